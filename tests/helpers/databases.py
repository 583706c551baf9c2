"""Test databases: a randomly named scratch database, and one reused copy of the template.

``CREATE DATABASE ... TEMPLATE`` costs 0.3 to 0.5 s (it writes the template's 8 MB through the
WAL), while most tests write a few rows. So each pytest process keeps one copy of the migrated
template and, after a test, makes it clean again: it ends the test's leftover sessions, drops
the history partitions it made, truncates the tables it filled (TRUNCATE gives a table new, empty
files, as a fresh copy has), puts every sequence back to its start and zeroes the statistics
counters. Then it compares the catalog with the template's: a table, role grant, function or
setting the test made, a migration it ran, a table ANALYZE or VACUUM counted — anything the reset
cannot undo shows there, and the copy is dropped instead; the next test gets a new one.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
from sqlalchemy.engine import URL

from tests.helpers.db import libpq

#: Schemas PostgreSQL itself owns; everything else in a test database is the test's.
SYSTEM_SCHEMAS = "('pg_catalog', 'information_schema', 'pg_toast')"

#: One line per relation (kind, columns, grants, options, whether VACUUM or ANALYZE has counted
#: a table's rows), function, trigger, schema, database setting and migration version. An
#: index's row count is left out: CREATE INDEX counts 0 rows, TRUNCATE leaves it uncounted (-1),
#: and the planner treats both as an empty index.
FINGERPRINT = f"""
SELECT md5(string_agg(item, E'\\n' ORDER BY item)) FROM (
  SELECT n.nspname || '.' || c.relname || ' ' || c.relkind::text || ' '
         || coalesce(c.relacl::text, '') || ' '
         || (c.relkind <> 'r' OR c.reltuples < 0)::text || ' '
         || coalesce(c.reloptions::text, '') || ' '
         || coalesce(string_agg(a.attname || ':' || a.atttypid::regtype::text
                                || ':' || a.attnotnull::text, ',' ORDER BY a.attnum), '') AS item
  FROM pg_class c
  JOIN pg_namespace n ON n.oid = c.relnamespace
  LEFT JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
  WHERE n.nspname NOT IN {SYSTEM_SCHEMAS}
  GROUP BY n.nspname, c.oid
  UNION ALL
  SELECT 'function ' || p.oid::regprocedure::text || ' ' || md5(p.prosrc)
  FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
  WHERE n.nspname NOT IN {SYSTEM_SCHEMAS}
  UNION ALL
  SELECT 'trigger ' || tgname FROM pg_trigger WHERE NOT tgisinternal
  UNION ALL
  SELECT 'setting ' || array_to_string(setconfig, ',') FROM pg_db_role_setting
  WHERE setdatabase = (SELECT oid FROM pg_database WHERE datname = current_database())
  UNION ALL
  SELECT 'schema ' || nspname FROM pg_namespace WHERE nspname NOT IN {SYSTEM_SCHEMAS}
  UNION ALL
  SELECT 'version ' || version_num FROM workerpool_alembic_version
) AS catalog
"""

#: One round trip: end the other sessions, drop the partitions, truncate the filled tables,
#: rewind the sequences.
RESET = f"""
DO $$
DECLARE
  relation regclass;
  filled boolean;
  filled_tables text[] := '{{}}';
BEGIN
  PERFORM pg_terminate_backend(pid, 5000) FROM pg_stat_activity
  WHERE datname = current_database() AND pid <> pg_backend_pid();
  -- the template has no partitions: the history's are made as finished jobs reach it
  FOR relation IN SELECT c.oid FROM pg_class c WHERE c.relispartition AND c.relkind = 'r' LOOP
    EXECUTE format('DROP TABLE %s', relation);
  END LOOP;
  FOR relation IN
    SELECT c.oid FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE c.relkind IN ('r', 'p') AND NOT c.relispartition
      AND n.nspname NOT IN {SYSTEM_SCHEMAS} AND c.relname <> 'workerpool_alembic_version'
  LOOP
    EXECUTE format('SELECT EXISTS (SELECT FROM %s)', relation) INTO filled;
    IF filled THEN
      filled_tables := filled_tables || relation::text;
    END IF;
  END LOOP;
  IF cardinality(filled_tables) > 0 THEN
    EXECUTE 'TRUNCATE ' || array_to_string(filled_tables, ', ') || ' CASCADE';
  END IF;
  PERFORM setval(seqrelid, seqstart, false) FROM pg_sequence;
  PERFORM pg_stat_reset();
END
$$
"""


def _admin(url: URL) -> psycopg.Connection:
    return psycopg.connect(libpq(url), autocommit=True)


@contextmanager
def scratch_database(server_url: URL, prefix: str, template: str | None = None) -> Iterator[URL]:
    """Create a randomly named database (optionally from ``template``); drop it afterwards."""
    url = create(server_url, prefix, template)
    try:
        yield url
    finally:
        drop(server_url, url)


def create(server_url: URL, prefix: str, template: str | None = None) -> URL:
    name = f"{prefix}_{secrets.token_hex(6)}"
    source = f' TEMPLATE "{template}"' if template else ""
    with _admin(server_url) as admin:
        admin.execute(f'CREATE DATABASE "{name}"{source}')
    return server_url.set(database=name)


def drop(server_url: URL, url: URL) -> None:
    with _admin(server_url) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{url.database}" WITH (FORCE)')


def fingerprint(conn: psycopg.Connection) -> str:
    return conn.execute(FINGERPRINT).fetchone()[0]


class ReusedCopy:
    """One copy of the template for one pytest process, handed to one test at a time."""

    def __init__(self, server_url: URL, template: str) -> None:
        self.server_url = server_url
        self.template = template
        self.url: URL | None = None
        self.clean_fingerprint = ""

    def take(self) -> URL:
        if self.url is None:
            self.url = create(self.server_url, "wp_r", self.template)
            with _admin(self.url) as conn:
                self.clean_fingerprint = fingerprint(conn)
        return self.url

    def give_back(self) -> None:
        """Make the copy clean for the next test, or drop it when that cannot be done."""
        assert self.url is not None
        try:
            with _admin(self.url) as conn:
                conn.execute(RESET)
                clean = fingerprint(conn) == self.clean_fingerprint
        except psycopg.Error:
            clean = False
        if not clean:
            self.close()

    def close(self) -> None:
        if self.url is not None:
            drop(self.server_url, self.url)
            self.url = None
