"""What a thread pays for the first work after it slept: the same calls back to back and each
after a 20 ms sleep (as the pickup bench paces its jobs), median microseconds.

    python scripts/wake_cost.py --url postgresql://postgres@127.0.0.1:5432/postgres [--calls 300]

Creates a scratch database (the bench's), then times, interleaved: a call that does nothing;
``build_job`` (pure Python: the checks and the row of one enqueue); a connection taken and
given back the way a single enqueue does (a kept one: ``autocommit._Kept``); ``pool.enqueue``;
and the pickup floor's producer statement on plain psycopg (``bench.floors.ENQUEUE_NOTIFY_SQL``).
On a machine where work after a sleep runs many times slower than hot, every thread that a
job's path wakes (the enqueuer, the listener, the claim loop, the handler) pays it, and the
path with more Python after each wake pays more: see docs/benchmarks.md#pickup.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import psycopg
from sqlalchemy.engine import make_url

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.app import QUEUE, make_pool, noop  # noqa: E402
from bench.database import BenchDatabase  # noqa: E402
from bench.floors import CHANNEL, ENQUEUE_NOTIFY_SQL  # noqa: E402
from workerpool.model.new_job import build_job  # noqa: E402
from workerpool.sql import autocommit  # noqa: E402


def checkout(engine) -> None:
    kept = autocommit._kept(engine)
    kept.give(*kept.take())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True, help="a server URL (its database: for admin)")
    parser.add_argument("--calls", type=int, default=300)
    args = parser.parse_args()
    if args.calls < 1:
        parser.error("--calls must be >= 1")
    server = make_url(args.url).set(drivername="postgresql+psycopg")
    with BenchDatabase(server) as db, psycopg.connect(db.dsn, autocommit=True) as raw:
        pool = make_pool(db.url)
        calls = {
            "nothing": lambda i: None,
            "build_job": lambda i: build_job(pool.registry, noop.__name__, {"i": i}),
            "checkout": lambda i: checkout(pool.engine),
            "pool.enqueue": lambda i: pool.enqueue(noop.__name__, {"i": i}),
            "raw enqueue": lambda i: raw.execute(
                ENQUEUE_NOTIFY_SQL, (QUEUE, noop.__name__, json.dumps({"i": i}), CHANNEL, QUEUE)
            ).fetchone(),
        }
        for call in calls.values():
            call(0)
            call(0)
        for gap in (0.0, 0.02):
            took: dict[str, list[float]] = {name: [] for name in calls}
            for i in range(args.calls):
                for name, call in calls.items():
                    if gap:
                        time.sleep(gap)  # pacing is the measurement
                    started = time.perf_counter()
                    call(i)
                    took[name].append(time.perf_counter() - started)
            label = "back to back" if not gap else f"after {gap * 1000:.0f} ms asleep"
            print(
                f"{label:>20}: "
                + ", ".join(
                    f"{name} {statistics.median(v) * 1e6:,.0f} us" for name, v in took.items()
                )
            )
        pool.dispose()
    return 0


if __name__ == "__main__":
    sys.exit(main())
