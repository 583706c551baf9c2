"""Upgrading an install with many finished rows to the history table: what the migration locks
and for how long, then how fast the maintenance child moves the rows over.

    python scripts/history_migration.py --url postgresql://postgres@127.0.0.1:5432/postgres \\
        [--rows 10000000] [--move-seconds 60]

Creates a scratch database on that server, migrates it to 0012 (before the history), loads
``--rows`` done rows finished over the last 7 days and VACUUM ANALYZEs them. Then a second
connection takes ``LOCK TABLE workerpool_jobs IN EXCLUSIVE MODE`` (every write waits, reads go
on) and the upgrade to 0013 runs meanwhile: it completes while that lock is held, so it needs
nothing on the jobs table that conflicts with writers; its duration is printed. Then the
history duty (``HistoryKeeper.tick``, default settings but no delay) runs for up to
``--move-seconds``: rows moved per second, and the longest single batch transaction (the only
locks a batch holds on the jobs table are its rows' and ROW EXCLUSIVE). Last, back to 0015
and the upgrade to 0016 timed on the history the moves filled (it counts the last hour of
it and drops an index of every partition). Drops the database.
"""

from __future__ import annotations

import argparse
import secrets
import sys
import threading
import time
from pathlib import Path

import psycopg
from sqlalchemy.engine import make_url

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from workerpool import WorkerPool  # noqa: E402
from workerpool.migrate import downgrade, upgrade  # noqa: E402
from workerpool.model.specs import MaintenanceSpec  # noqa: E402
from workerpool.runtime.maintenance.history import HistoryKeeper  # noqa: E402


def libpq(url) -> str:
    return url.set(drivername="postgresql").render_as_string(hide_password=False)


def load(dsn: str, rows: int) -> float:
    started = time.monotonic()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO workerpool_jobs (queue, task, state, attempts, finished_at, result)"
            " SELECT 'q', 'work', 'done', 1, now() - make_interval(secs => (n %% 604800)::float8),"
            " to_jsonb(n) FROM generate_series(1, %s) AS n",
            (rows,),
        )
        conn.execute("VACUUM ANALYZE workerpool_jobs")
    return time.monotonic() - started


def upgrade_under_exclusive_lock(url, dsn: str) -> float:
    """The upgrade's seconds, run while another session holds EXCLUSIVE on the jobs table."""
    with psycopg.connect(dsn) as blocker:
        blocker.execute("LOCK TABLE workerpool_jobs IN EXCLUSIVE MODE")
        done: list[float] = []

        def run() -> None:
            started = time.monotonic()
            upgrade(url, "0013")
            done.append(time.monotonic() - started)

        thread = threading.Thread(target=run)
        thread.start()
        thread.join(timeout=120)
        if not done:
            raise SystemExit("the upgrade waited behind the EXCLUSIVE lock on workerpool_jobs")
        blocker.rollback()
    return done[0]


def move(url, seconds: float) -> tuple[int, float, float]:
    """(rows moved, elapsed seconds, longest batch in ms) within ``seconds``."""
    pool = WorkerPool(url)
    settings = MaintenanceSpec(history_delay=0.0)
    longest = 0.0

    def transaction():
        return pool.engine.begin()

    keeper = HistoryKeeper(transaction, settings)
    keeper.keep_partitions()
    moved, started = 0, time.monotonic()
    while time.monotonic() - started < seconds:
        batch_started = time.perf_counter()
        count = keeper.move_batch()
        longest = max(longest, (time.perf_counter() - batch_started) * 1000.0)
        moved += count
        if count < settings.history_batch:
            break
    elapsed = time.monotonic() - started
    pool.dispose()
    return moved, elapsed, longest


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True, help="a server URL (its database: for admin)")
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--move-seconds", type=float, default=60.0)
    args = parser.parse_args()
    if args.rows < 1 or args.move_seconds <= 0:
        parser.error("--rows must be >= 1 and --move-seconds > 0")
    server = make_url(args.url)
    name = f"wp_histmig_{secrets.token_hex(4)}"
    admin_dsn = libpq(server)
    with psycopg.connect(admin_dsn, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    url = server.set(drivername="postgresql+psycopg", database=name)
    dsn = libpq(url)
    try:
        upgrade(url, "0012")
        print(f"loaded {args.rows:,} done rows in {load(dsn, args.rows):.1f} s", flush=True)
        took = upgrade_under_exclusive_lock(url, dsn)
        print(
            f"upgrade 0012 -> 0013: {took * 1000:.0f} ms, completed while another session"
            " held EXCLUSIVE on workerpool_jobs",
            flush=True,
        )
        upgrade(url)  # the mover of this version counts what it moves (0016)
        moved, elapsed, longest = move(url, args.move_seconds)
        print(
            f"moved {moved:,} rows in {elapsed:.1f} s ({moved / elapsed:,.0f} rows/s);"
            f" longest batch transaction {longest:.0f} ms",
            flush=True,
        )
        downgrade(url, "0015")
        started = time.monotonic()
        upgrade(url, "0016")
        print(
            f"upgrade 0015 -> 0016 on a history of {moved:,} rows:"
            f" {(time.monotonic() - started) * 1000:.0f} ms",
            flush=True,
        )
    finally:
        with psycopg.connect(admin_dsn, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    return 0


if __name__ == "__main__":
    sys.exit(main())
