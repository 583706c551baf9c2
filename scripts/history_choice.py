"""Why finished rows move to a history table instead of partitioning the jobs table by state
(docs/storage.md): the completing write, and a key unique across every job.

    python scripts/history_choice.py --url postgresql://postgres@127.0.0.1:5432/postgres \\
        [--rows 200000] [--batch 100]

In a scratch database, two tables of ``--rows`` pending rows each: ``plain`` (one table, a
partial unique index on ``key``, as workerpool_jobs) and ``by_state`` (LIST-partitioned on
``state``: a live partition and a finished one, Oban Pro's shape). Times the completing write,
``UPDATE ... SET state = 'done'`` of ``--batch`` rows per statement (autocommit) over all rows,
on each: on ``by_state`` every completion moves its row to the other partition (a DELETE and an
INSERT with every index entry). Then tries the global unique index on ``key`` on ``by_state``
and prints PostgreSQL's answer. Drops the database.
"""

from __future__ import annotations

import argparse
import secrets
import statistics
import sys
import time

import psycopg

TABLES = {
    "plain": """
CREATE TABLE plain (id bigint PRIMARY KEY, state text NOT NULL, key text,
                    payload jsonb NOT NULL DEFAULT '{}', finished_at timestamptz);
CREATE UNIQUE INDEX ON plain (key) WHERE key IS NOT NULL;
CREATE INDEX ON plain (id) WHERE state = 'pending';
""",
    "by_state": """
CREATE TABLE by_state (id bigint NOT NULL, state text NOT NULL, key text,
                       payload jsonb NOT NULL DEFAULT '{}', finished_at timestamptz,
                       PRIMARY KEY (id, state)) PARTITION BY LIST (state);
CREATE TABLE by_state_live PARTITION OF by_state FOR VALUES IN ('pending', 'processing');
CREATE TABLE by_state_finished PARTITION OF by_state FOR VALUES IN ('done');
CREATE INDEX ON by_state (id) WHERE state = 'pending';
""",
}


def complete_ms(conn: psycopg.Connection, table: str, rows: int, batch: int) -> list[float]:
    out = []
    for first in range(1, rows + 1, batch):
        started = time.perf_counter()
        conn.execute(
            f"UPDATE {table} SET state = 'done', finished_at = now()"
            " WHERE id >= %s AND id < %s AND state = 'pending'",
            (first, first + batch),
        )
        out.append((time.perf_counter() - started) * 1000.0)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--batch", type=int, default=100)
    args = parser.parse_args()
    if args.rows < 1 or args.batch < 1:
        parser.error("--rows and --batch must be >= 1")
    name = f"wp_choice_{secrets.token_hex(4)}"
    with psycopg.connect(args.url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        dsn = psycopg.conninfo.make_conninfo(args.url, dbname=name)
        with psycopg.connect(dsn, autocommit=True) as conn:
            for table, ddl in TABLES.items():
                conn.execute(ddl)
                conn.execute(
                    f"INSERT INTO {table} (id, state, key) SELECT n, 'pending',"
                    " 'k' || n FROM generate_series(1, %s) AS n",
                    (args.rows,),
                )
                conn.execute(f"VACUUM ANALYZE {table}")
            for table in TABLES:
                times = complete_ms(conn, table, args.rows, args.batch)
                print(
                    f"{table}: completing {args.batch} rows per statement: p50"
                    f" {statistics.median(times):.2f} ms, total {sum(times) / 1000:.1f} s"
                )
            try:
                conn.execute("CREATE UNIQUE INDEX ON by_state (key) WHERE key IS NOT NULL")
                print("by_state: a unique index on key alone was accepted")
            except psycopg.Error as exc:
                print(f"by_state: unique index on key alone: {str(exc).splitlines()[0]}")
    finally:
        with psycopg.connect(args.url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    return 0


if __name__ == "__main__":
    sys.exit(main())
