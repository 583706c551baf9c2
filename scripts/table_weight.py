"""What each index and CHECK constraint of ``workerpool_jobs`` costs the raw claim-and-complete
loop, measured apart from the noise of whole drains.

    WORKERPOOL_DATABASE_URL=postgresql://postgres@127.0.0.1:5432/postgres \\
        python scripts/table_weight.py [--jobs 20000] [--rounds 3] [--groups] [--payload-bytes N]

On a scratch database of that server (migrated, dropped at the end) it builds copies of the
jobs table (``CREATE TABLE ... (LIKE workerpool_jobs INCLUDING ALL)``, its storage settings
too): the whole table, then the same less one index (each in turn; not with ``--groups``) or
less its CHECK constraints, the same less everything the lean floor has not (with and without
the CHECKs), and the lean floor's own table (``bench/ceiling.py``). Each is loaded with
``--jobs`` no-op rows as the drain's (``{"i": i}``, padded with ``--payload-bytes`` characters
of hex), vacuumed, analyzed and checkpointed, then drained on one autocommit connection by the
ceiling's two statements (claim 100 with ``FOR UPDATE SKIP LOCKED``, complete them fenced).
Every variant is drained back to back with the whole table, the two in alternating order and
the variants shuffled each round, so that the machine's drift cancels out of each pair.
Prints, per variant, the medians over the rounds of the server backend's CPU per job
(``/proc/<pid>/schedstat``: the server must run on this machine), the WAL bytes per job and
the jobs per second, each with the median of its ratio to the whole table's beside it.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import ceiling  # noqa: E402
from bench.capacity import backend_cpu_s, backend_pid, is_local_postgres  # noqa: E402
from bench.database import BenchDatabase  # noqa: E402
from workerpool.client import database_url  # noqa: E402
from workerpool.sql.schema import JOBS_AUTOVACUUM  # noqa: E402

QUEUE = "weight"
#: What the lean floor keeps of workerpool_jobs: the key, the due index, the lease index.
ESSENTIAL = ("pk_workerpool_jobs", "ix_workerpool_jobs_due", "ix_workerpool_jobs_leased")


def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, got {value}")
    return value


def not_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def jobs_indexes(conn: psycopg.Connection) -> list[str]:
    rows = conn.execute(
        "SELECT indexname FROM pg_indexes WHERE tablename = 'workerpool_jobs' ORDER BY 1"
    ).fetchall()
    return [name for (name,) in rows]


def copy_of_jobs(name: str) -> str:
    storage = ", ".join(f"{k} = {v}" for k, v in JOBS_AUTOVACUUM.items())
    return f"CREATE TABLE {name} (LIKE workerpool_jobs INCLUDING ALL) WITH ({storage})"


def drop_index_like(conn: psycopg.Connection, table: str, original: str) -> None:
    """Drop the copy's index built from ``original`` (same definition, the copy's own name)."""
    definition = conn.execute(
        "SELECT regexp_replace(indexdef, '^.* USING ', '') FROM pg_indexes WHERE indexname = %s",
        [original],
    ).fetchone()[0]
    copied = conn.execute(
        "SELECT indexname FROM pg_indexes WHERE tablename = %s"
        " AND regexp_replace(indexdef, '^.* USING ', '') = %s",
        [table, definition],
    ).fetchone()
    if original.startswith("uq_") or original.startswith("pk_"):
        constraint = conn.execute(
            "SELECT conname FROM pg_constraint WHERE conindid = %s::regclass",
            [copied[0]],
        ).fetchone()
        if constraint:
            conn.execute(f"ALTER TABLE {table} DROP CONSTRAINT {constraint[0]}")
            return
    conn.execute(f"DROP INDEX {copied[0]}")


def drop_checks(conn: psycopg.Connection, table: str) -> None:
    rows = conn.execute(
        "SELECT conname FROM pg_constraint WHERE conrelid = %s::regclass AND contype = 'c'",
        [table],
    ).fetchall()
    for (name,) in rows:
        conn.execute(f"ALTER TABLE {table} DROP CONSTRAINT {name}")


def build_variants(conn: psycopg.Connection, per_index: bool) -> dict[str, str]:
    """Variant label -> table name, every table created."""
    variants: dict[str, str] = {}
    indexes = jobs_indexes(conn)
    extra = [i for i in indexes if i not in ESSENTIAL]

    def new_copy(label: str) -> str:
        table = f"w_{len(variants)}"
        conn.execute(copy_of_jobs(table))
        variants[label] = table
        return table

    new_copy("jobs table")
    for index in extra if per_index else ():
        drop_index_like(conn, new_copy(f"less {index}"), index)
    drop_checks(conn, new_copy("less its CHECKs"))
    table = new_copy("less every extra index")
    for index in extra:
        drop_index_like(conn, table, index)
    table = new_copy("less every extra index and CHECK")
    for index in extra:
        drop_index_like(conn, table, index)
    drop_checks(conn, table)
    conn.execute(ceiling.lean_table())
    variants["lean floor"] = ceiling.LEAN
    return variants


def drain_once(
    conn: psycopg.Connection, table: str, jobs: int, pad: int
) -> tuple[float, float, float]:
    """Load, vacuum, drain ``table``; server CPU µs and WAL bytes per job, jobs per second."""
    conn.execute(f"TRUNCATE {table}")
    # The padding is hex of md5s, none repeated: it does not compress, so a payload past 2 kB
    # is stored out of line (TOAST), as a large real one may be.
    conn.execute(
        f"INSERT INTO {table} (queue, task, payload)"
        " SELECT %(queue)s, 'noop', CASE WHEN %(pad)s = 0 THEN jsonb_build_object('i', i)"
        "  ELSE jsonb_build_object('i', i, 'pad', left((SELECT string_agg(md5((i * 100000 + g)"
        "   ::text), '') FROM generate_series(0, %(pad)s / 32) AS g), %(pad)s)) END"
        " FROM generate_series(0, %(jobs)s - 1) AS i",
        {"queue": QUEUE, "pad": pad, "jobs": jobs},
    )
    conn.execute(f"VACUUM ANALYZE {table}")
    conn.execute("CHECKPOINT")  # every drain starts owing the same full-page writes
    claim = ceiling.CLAIM_SQL.replace("workerpool_jobs", table)
    complete = ceiling.COMPLETE_SQL.replace("workerpool_jobs", table)
    params = {"me": "weight", "queue": QUEUE, "limit": ceiling.BATCH}
    pid = backend_pid(conn)
    wal = conn.execute("SELECT pg_current_wal_lsn()").fetchone()[0]
    cpu = backend_cpu_s(pid)
    started = time.perf_counter()
    done = 0
    while rows := conn.execute(claim, params).fetchall():
        conn.execute(complete, {"ids": [row[0] for row in rows], "me": "weight"})
        done += len(rows)
    wall = time.perf_counter() - started
    cpu = backend_cpu_s(pid) - cpu
    wal_bytes = conn.execute("SELECT pg_current_wal_lsn() - %s::pg_lsn", [wal]).fetchone()[0]
    if done != jobs:
        raise SystemExit(f"table_weight: {table} drained {done} of {jobs} jobs")
    return cpu * 1e6 / jobs, float(wal_bytes) / jobs, jobs / wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=positive, default=20000)
    parser.add_argument("--rounds", type=positive, default=3)
    parser.add_argument(
        "--payload-bytes",
        type=not_negative,
        default=0,
        help="pad each payload with this many characters",
    )
    parser.add_argument(
        "--groups",
        action="store_true",
        help="only the table, less its CHECKs, less every"
        " extra index (and CHECK), the lean floor: no variant per index",
    )
    args = parser.parse_args()
    with BenchDatabase(database_url()) as bench_db:
        with psycopg.connect(bench_db.dsn, autocommit=True) as conn:
            if not is_local_postgres(backend_pid(conn)):
                raise SystemExit("table_weight: the server must run on this machine")
            variants = build_variants(conn, per_index=not args.groups)
            rounds = measure(conn, variants, args.jobs, args.rounds, args.payload_bytes)
        report(rounds, args.jobs)


def measure(
    conn: psycopg.Connection, variants: dict[str, str], jobs: int, rounds: int, pad: int
) -> dict[str, list[tuple[float, ...]]]:
    """Per variant, per round: its figures as ratios to the jobs table's drained beside it
    (the two back to back, in alternating order), and its own figures."""
    whole = variants["jobs table"]
    others = [label for label in variants if label != "jobs table"]
    figures: dict[str, list[tuple[float, ...]]] = {label: [] for label in variants}
    shuffle = random.Random(1)
    for i in range(rounds):
        shuffle.shuffle(others)
        for label in others:
            if i % 2:
                mine, base = (
                    drain_once(conn, variants[label], jobs, pad),
                    drain_once(conn, whole, jobs, pad),
                )
            else:
                base, mine = (
                    drain_once(conn, whole, jobs, pad),
                    drain_once(conn, variants[label], jobs, pad),
                )
            figures[label].append(tuple(m / b for m, b in zip(mine, base)) + mine)
            figures["jobs table"].append((1.0, 1.0, 1.0, *base))
    return figures


def report(figures: dict[str, list[tuple[float, ...]]], jobs: int) -> None:
    rounds = len(figures["lean floor"])
    print(
        f"{jobs} jobs a drain, {rounds} rounds; each variant drained beside the jobs table,"
        " the median of its own figure and of its ratio to the table's beside it"
    )
    print(f"{'variant':<40} {'server us/job':>20} {'WAL B/job':>18} {'jobs/s':>20}")
    for label, runs in figures.items():
        cells = []
        for k in range(3):
            own = statistics.median(run[3 + k] for run in runs)
            ratio = statistics.median(run[k] for run in runs)
            cells.append(f"{own:,.1f} ({ratio:.2f}x)")
        print(f"{label:<40} {cells[0]:>20} {cells[1]:>18} {cells[2]:>20}")


if __name__ == "__main__":
    main()
