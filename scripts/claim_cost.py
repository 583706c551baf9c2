"""What one claim after a wake-up costs, and why the claim's states are literals.

    WORKERPOOL_DATABASE_URL=postgresql://postgres@127.0.0.1:5432/postgres \\
        python scripts/claim_cost.py [--claims 300] [--history 200000]

Creates a scratch database on that server with ``--history`` finished rows, then, for each
variant, enqueues one job, waits 20 ms (an idle worker), and times one claim of it as a single
autocommit statement, prepared on its connection as the worker's is. Prints p50/p90 and how
often PostgreSQL used a generic (reused) or a custom (planned afresh) plan:

- ``library``: the claim as workerpool sends it (``queries.claim_statement``);
- ``state-params``: the same statement with the states as bind parameters (the earlier form);
- ``async-commit``: the library's claim with ``synchronous_commit = off``, to show what the
  commit flush costs (workerpool keeps its claims durable: README, Performance).

Drops the scratch database at the end.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import psycopg
from sqlalchemy.dialects import postgresql

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.database import BenchDatabase  # noqa: E402
from workerpool import sql as queries  # noqa: E402
from workerpool.client import database_url  # noqa: E402

LITERAL_STATES = {"'processing'": "processing", "'pending'": "pending", "'failed'": "failed"}


def library_claim() -> tuple[str, dict]:
    statement = queries.claim_statement(
        queue="q",
        worker="w",
        limit=50,
        task_versions={"t": 1},
    )
    compiled = statement.compile(
        dialect=postgresql.psycopg.dialect(), compile_kwargs={"render_postcompile": True}
    )
    return str(compiled), compiled.construct_params()


def with_state_params(sql: str, params: dict) -> tuple[str, dict]:
    params = dict(params)
    for number, (literal, value) in enumerate(LITERAL_STATES.items()):
        sql = sql.replace(literal, f"%(state_literal_{number})s::VARCHAR")
        params[f"state_literal_{number}"] = value
    return sql, params


def time_claims(
    dsn: str, sql: str, params: dict, claims: int, *, async_commit: bool
) -> tuple[list[float], tuple[int, int]]:
    with (
        psycopg.connect(dsn, autocommit=True) as feeder,
        psycopg.connect(dsn, autocommit=True) as worker,
    ):
        if async_commit:
            worker.execute("SET synchronous_commit = off")
        took: list[float] = []
        for _ in range(claims):
            feeder.execute("INSERT INTO workerpool_jobs (queue, task) VALUES ('q', 't')")
            time.sleep(0.02)  # an idle worker: this measures a wake-up, not a busy loop
            started = time.perf_counter()
            claimed = worker.execute(sql, params, prepare=True).fetchall()
            took.append((time.perf_counter() - started) * 1000)
            if len(claimed) != 1:
                raise RuntimeError(f"claimed {len(claimed)} rows, expected 1")
        generic, custom = worker.execute(
            "SELECT generic_plans, custom_plans FROM pg_prepared_statements"
        ).fetchone()
    return took, (generic, custom)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--claims", type=int, default=300)
    parser.add_argument("--history", type=int, default=200_000)
    args = parser.parse_args()
    if args.claims < 2 or args.history < 0:
        parser.error("--claims must be at least 2 and --history at least 0")
    with BenchDatabase(database_url()) as scratch:
        scratch.sql(
            "INSERT INTO workerpool_jobs (queue, task, state, finished_at)"
            " SELECT 'q', 't', 'done', now() FROM generate_series(1, %s)",
            (args.history,),
        )
        scratch.sql("ANALYZE workerpool_jobs")
        sql, params = library_claim()
        variants = {
            "library": (sql, params, False),
            "state-params": (*with_state_params(sql, params), False),
            "async-commit": (sql, params, True),
        }
        for label, (text, values, async_commit) in variants.items():
            took, (generic, custom) = time_claims(
                scratch.dsn, text, values, args.claims, async_commit=async_commit
            )
            deciles = statistics.quantiles(took, n=10)
            print(
                f"{label:13} p50 {statistics.median(took):.3f} ms  p90 {deciles[8]:.3f} ms"
                f"  plans: {generic} generic, {custom} custom"
            )


if __name__ == "__main__":
    main()
