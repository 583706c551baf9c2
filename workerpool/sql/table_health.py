"""The jobs table's health as PostgreSQL keeps it: its statistics counters, its size, what holds
back the xmin horizon, and the ANALYZE and VACUUM that refresh it.

Every read here is a catalog or statistics view, visible to any role (the other sessions'
``backend_xmin`` needs ``pg_read_all_stats`` or the same role; without it those sessions are
simply not seen). ANALYZE and VACUUM need the table's owner, the database's owner or a
superuser (or, from PostgreSQL 17, the MAINTAIN privilege): :func:`may_maintain` says which.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

from sqlalchemy import Connection, text

from .schema import jobs

TABLE = jobs.name

# table_stats: the statistics counters and sizes of the jobs table. Index: none (one row of
# pg_stat_user_tables, pg_class).
_TABLE_STATS = text(
    "SELECT s.n_live_tup AS live, s.n_dead_tup AS dead, s.n_mod_since_analyze AS modified,"
    " c.reltuples::bigint AS estimated_rows,"
    " extract(epoch FROM now() - s.last_vacuum)::float8 AS vacuum_age,"
    " extract(epoch FROM now() - s.last_autovacuum)::float8 AS autovacuum_age,"
    " extract(epoch FROM now() - s.last_analyze)::float8 AS analyze_age,"
    " extract(epoch FROM now() - s.last_autoanalyze)::float8 AS autoanalyze_age,"
    " pg_table_size(c.oid) AS table_bytes, pg_indexes_size(c.oid) AS index_bytes"
    " FROM pg_class c JOIN pg_stat_user_tables s ON s.relid = c.oid"
    " WHERE c.oid = CAST(:table AS regclass)"
)


def table_stats(conn: Connection) -> Any:
    """One row: live, dead, modified (since the last analyze), estimated_rows, the ages in
    seconds of the last (auto)vacuum and (auto)analyze (None: never), table and index bytes."""
    return conn.execute(_TABLE_STATS, {"table": TABLE}).one()


# horizon_holders: what keeps the oldest xmin of this database (sessions, prepared
# transactions) or of the cluster (replication slots), oldest first. Index: none (views).
_HORIZON_HOLDERS = text(
    "SELECT * FROM ("
    " SELECT 'session' AS kind, pid::text AS name, application_name AS application,"
    "  usename AS role, state, greatest(age(backend_xid), age(backend_xmin))::bigint AS xid_age,"
    "  extract(epoch FROM now() - xact_start)::float8 AS age_s"
    "  FROM pg_stat_activity"
    "  WHERE datname = current_database() AND pid <> pg_backend_pid()"
    "  AND (backend_xid IS NOT NULL OR backend_xmin IS NOT NULL)"
    " UNION ALL"
    " SELECT 'prepared transaction', gid, NULL, owner::text, NULL,"
    "  age(transaction)::bigint, extract(epoch FROM now() - prepared)::float8"
    "  FROM pg_prepared_xacts WHERE database = current_database()"
    " UNION ALL"
    " SELECT 'replication slot', slot_name::text, NULL, NULL,"
    "  CASE WHEN active THEN 'active' ELSE 'inactive' END,"
    "  greatest(age(xmin), age(catalog_xmin))::bigint, NULL"
    "  FROM pg_replication_slots WHERE xmin IS NOT NULL OR catalog_xmin IS NOT NULL"
    ") AS holders ORDER BY xid_age DESC LIMIT :limit"
)


def horizon_holders(conn: Connection, limit: int = 3) -> list[Any]:
    """The oldest holders of the xmin horizon: ``kind`` (session, prepared transaction,
    replication slot), ``name`` (pid, gid or slot name), application, role, state, xid_age
    (transactions since its snapshot) and age_s (seconds since it began, None for a slot)."""
    return list(conn.execute(_HORIZON_HOLDERS, {"limit": limit}))


# may_maintain: whether this role may ANALYZE and VACUUM the jobs table. Index: none.
_MAY_MAINTAIN = text(
    "SELECT current_user AS role,"
    " pg_has_role(c.relowner, 'USAGE') AS table_owner,"
    " pg_has_role(d.datdba, 'USAGE') AS database_owner,"
    " (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) AS superuser,"
    " pg_get_userbyid(c.relowner) AS owner,"
    " current_setting('server_version_num')::int AS server_version"
    " FROM pg_class c, pg_database d"
    " WHERE c.oid = CAST(:table AS regclass) AND d.datname = current_database()"
)
# PostgreSQL 17 grants ANALYZE and VACUUM to holders of the MAINTAIN privilege.
_HAS_MAINTAIN = text("SELECT has_table_privilege(CAST(:table AS regclass), 'MAINTAIN')")
MAINTAIN_PRIVILEGE_SINCE = 170000


def may_maintain(conn: Connection) -> tuple[bool, str]:
    """(allowed, why): PostgreSQL skips a table this role may not maintain with a mere warning,
    so the duty asks first."""
    row = conn.execute(_MAY_MAINTAIN, {"table": TABLE}).one()
    if row.table_owner or row.database_owner or row.superuser:
        return True, f"role {row.role} may maintain {TABLE}"
    if (
        row.server_version >= MAINTAIN_PRIVILEGE_SINCE
        and conn.execute(_HAS_MAINTAIN, {"table": TABLE}).scalar()
    ):
        return True, f"role {row.role} holds MAINTAIN on {TABLE}"
    return False, (
        f"role {row.role} is neither the owner of {TABLE} ({row.owner}) nor of the"
        " database, nor a superuser (and does not hold MAINTAIN)"
    )


#: ANALYZE alone, when only the statistics are behind. SKIP_LOCKED: when autovacuum (or
#: another replica) is already at it, this pass has nothing to add.
ANALYZE = f"ANALYZE (SKIP_LOCKED) {TABLE}"
#: VACUUM always with ANALYZE: a bare VACUUM refreshes the row count but not the column
#: statistics, the very mix under which a planner without our settings reads the backlog.
VACUUM = f"VACUUM (SKIP_LOCKED, ANALYZE) {TABLE}"


# index_sizes: each B-tree index of the jobs table, its size, and the size its entries would
# take packed: entries from pg_class.reltuples (as of the last VACUUM or build), each the
# index tuple header and line pointer plus its columns' average width (pg_stats), at the
# default leaf fillfactor. Index: none (catalogs and pg_stats, one row per index).
_INDEX_SIZES = text("""
SELECT i.relname AS name, x.indisvalid AS valid,
       pg_relation_size(i.oid) AS bytes,
       greatest(i.reltuples, 0)::float8 AS entries,
       coalesce((SELECT sum(s.avg_width) FROM pg_attribute AS a
                 JOIN pg_stats AS s ON s.schemaname = n.nspname AND s.tablename = t.relname
                                    AND s.attname = a.attname
                 WHERE a.attrelid = t.oid AND a.attnum = ANY(x.indkey)), 8)::float8 AS key_width
FROM pg_index AS x
JOIN pg_class AS i ON i.oid = x.indexrelid
JOIN pg_class AS t ON t.oid = x.indrelid
JOIN pg_namespace AS n ON n.oid = t.relnamespace
JOIN pg_am AS am ON am.oid = i.relam
WHERE t.oid = CAST(:table AS regclass) AND am.amname = 'btree'
ORDER BY i.relname
""")
#: Bytes of a B-tree page an index tuple can use, and the share a freshly built leaf fills.
_PAGE_USABLE = 8192 - 24 - 16
_LEAF_FILL = 0.9
_TUPLE_OVERHEAD = 8 + 4  # IndexTupleData, ItemIdData


class IndexSize(NamedTuple):
    name: str
    valid: bool
    bytes: int
    packed_bytes: int  # what its entries would take right after a rebuild (an estimate)

    @property
    def bloat(self) -> float:
        return self.bytes / self.packed_bytes if self.packed_bytes else 1.0


def index_sizes(conn: Connection) -> list[IndexSize]:
    """The jobs table's B-tree indexes, their size and their packed size (estimated)."""
    out = []
    for row in conn.execute(_INDEX_SIZES, {"table": TABLE}):
        width = 8 * math.ceil((_TUPLE_OVERHEAD - 4 + row.key_width) / 8) + 4  # MAXALIGNed
        pages = math.ceil(row.entries * width / (_PAGE_USABLE * _LEAF_FILL)) + 1  # + meta
        out.append(IndexSize(row.name, row.valid, row.bytes, pages * 8192))
    return out


def reindex(name: str) -> str:
    """The rebuild of one index without blocking writes (PostgreSQL 12+)."""
    return f'REINDEX INDEX CONCURRENTLY "{name}"'


def drop_leftover(name: str) -> str:
    """The drop of an invalid index an interrupted REINDEX CONCURRENTLY left behind."""
    return f'DROP INDEX CONCURRENTLY IF EXISTS "{name}"'


#: The names REINDEX CONCURRENTLY gives its transient indexes (``<index>_ccnew``,
#: ``<index>_ccnew1``, ``<index>_ccold`` ...): left invalid when it was interrupted.
LEFTOVER_MARKS = ("_ccnew", "_ccold")
