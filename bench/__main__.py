"""``python -m bench``: measure workerpool on a PostgreSQL server; print a table and JSON lines.

    python -m bench --url postgresql://postgres@127.0.0.1:5432/postgres --n 50000 --repeats 3
    python -m bench --quick                      # a smoke run with tiny sizes (CI)
    python -m bench --soak 10 --rate 2000        # sustained load, a line per interval (soak.py)
    python -m bench --soak 10 --rate 2000 --embedded   # the same on a scratch embedded server
    python -m bench --soak 60 --rate 1000 --spike 25:10:3000   # with a backlog spike
    python -m bench --scale 1,2,4,8              # supervisors on one database (fleet.py)
    python -m bench --only burst                 # kill -9 the worker child mid-drain (burst.py)
    python -m bench --only steps                 # durable steps against checkpoints (steps.py)
    python -m bench --only once                  # complete_in against a plain effect (once.py)
    python -m bench --only doors                 # SQL workerpool_enqueue against pool.enqueue
    python -m bench --only capacity              # server CPU per job, jobs/s per core
    python -m bench --only logs                  # attempt logs captured against not (joblogs.py)
    python -m bench --only typed                 # typed tasks against dict tasks (typed.py)
    python -m bench --only processes             # CPU-bound jobs, processes=1 against 2
    python -m bench --only history --history N   # N rows in the history table against none

The URL names a server (and a database to connect to for administration); the run creates its
own randomly named database there, migrates it, and drops it at the end. Without ``--url``:
``$WORKERPOOL_DATABASE_URL``, else the embedded PostgreSQL. Progress goes to stderr; stdout gets
a header line, the table, then one JSON object per line per figure.
"""

from __future__ import annotations

import argparse
import logging
import os
import platform
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from workerpool.client import database_url
from workerpool.sql import db

from . import fleet, scale
from .app import DEFAULT_CONCURRENCY
from .database import BenchDatabase, scratch_embedded_server
from .report import Report
from .run import ALIASES, DEFAULT_SECTIONS, SECTIONS, Bench, Plan, declare
from .soak import SoakPlan, run_soak

log = logging.getLogger("workerpool.bench")

FULL_MIN_N = 50_000
MAX_CONCURRENCY = 1000
FULL_MIN_REPEATS = 3
FULL = {
    "n": 50_000,
    "repeats": 3,
    "claims": 500,
    "claim_limit": 10,
    "history": 1_000_000,
    "backlog": 100_000,
    "single": 1_000,
    "pickup_jobs": 200,
    "pickup_gap_ms": 20.0,
    "finished": 1_000_000,
    "batch_members": 10_000,
    "step_jobs": 1_000,
    "kills": 10,
    "burst_window_s": 5.0,
    "burst_nap_ms": 20.0,
    "burst_concurrency": 10,
    "cpu_jobs": 3_000,
}
QUICK = {
    "n": 300,
    "repeats": 1,
    "claims": 30,
    "claim_limit": 10,
    "history": 2_000,
    "backlog": 1_000,
    "single": 50,
    "pickup_jobs": 10,
    "pickup_gap_ms": 20.0,
    "finished": 2_000,
    "batch_members": 200,
    "step_jobs": 20,
    "kills": 3,
    "burst_window_s": 1.0,
    "burst_nap_ms": 20.0,
    "burst_concurrency": 2,
    "cpu_jobs": 100,
}


class UsageError(Exception):
    """Bad command-line input, reported as one line before anything is created."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--url",
        help="PostgreSQL server URL (default: $WORKERPOOL_DATABASE_URL, "
        "else the embedded PostgreSQL)",
    )
    parser.add_argument("--n", type=int, help="jobs per drain and per bulk enqueue (>= 50000)")
    parser.add_argument("--repeats", type=int, help="repeats per figure, median reported (>= 3)")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="tiny sizes and 1 repeat: proves the harness works, not for figures",
    )
    parser.add_argument("--only", help=f"comma-separated sections: {','.join(SECTIONS)}")
    parser.add_argument(
        "--scale",
        nargs="?",
        const=",".join(map(str, fleet.DEFAULT_COUNTS)),
        metavar="COUNTS",
        help="supervisors on one database: drain N jobs with each count "
        "(default 1,2,4,8); alone, only this section runs",
    )
    parser.add_argument(
        "--pgbouncer",
        action="store_true",
        help="with --scale: each count also through a PgBouncer (transaction "
        "pooling) the run starts",
    )
    parser.add_argument("--claims", type=int, help="timed claims per round (growth)")
    parser.add_argument("--history", type=int, help="done rows in the large table (growth)")
    parser.add_argument("--backlog", type=int, help="pending rows in the large table (growth)")
    parser.add_argument(
        "--finished", type=int, help="finished rows in the operators' table (default 1000000)"
    )
    parser.add_argument(
        "--database",
        metavar="NAME",
        help="use (create if missing) and keep this database instead of a "
        "scratch one: a 10M-row table is loaded once",
    )
    parser.add_argument("--single", type=int, help="single transactional enqueues per repeat")
    parser.add_argument(
        "--batch-members", type=int, help="members of the batch measured against plain jobs (10000)"
    )
    parser.add_argument(
        "--kills",
        type=int,
        help="kill -9s of the queue child per burst (--only burst; default 10, --quick 3)",
    )
    parser.add_argument("--pickup-jobs", type=int, help="jobs per pickup-latency run")
    parser.add_argument(
        "--concurrency",
        type=int,
        help=f"the bench queue's concurrency (default {DEFAULT_CONCURRENCY}: "
        "claims of up to 100 rows, like the ceiling loop; the library's "
        "default is 10)",
    )
    soak = parser.add_argument_group("soak (python -m bench --soak MIN --rate R)")
    soak.add_argument("--soak", type=float, metavar="MIN", help="run the soak for MIN minutes")
    soak.add_argument("--rate", type=float, help="jobs offered per second")
    soak.add_argument("--batch", type=int, default=100, help="jobs per enqueue_many (100)")
    soak.add_argument("--interval", type=float, default=30.0, help="seconds per sample (30)")
    soak.add_argument(
        "--retention", type=float, default=120.0, help="seconds finished rows are kept (120)"
    )
    soak.add_argument("--out", type=Path, default=Path("."), help="where the CSV and PNG go")
    soak.add_argument("--label", help="name of this run (file names; default soak-<server>)")
    soak.add_argument(
        "--spike",
        metavar="AT:MINUTES:RATE",
        help="a backlog spike: RATE jobs/s offered from minute AT for MINUTES",
    )
    soak.add_argument(
        "--embedded",
        action="store_true",
        help="a scratch embedded PostgreSQL (pgserver) with autovacuum on",
    )
    return parser


def soak_plan(args: argparse.Namespace) -> SoakPlan:
    if args.rate is None or args.rate <= 0:
        raise UsageError("--soak needs --rate R > 0 (jobs per second)")
    if args.soak <= 0 or args.interval <= 0 or args.batch < 1 or args.retention <= 0:
        raise UsageError("--soak, --interval, --retention must be > 0 and --batch >= 1")
    label = args.label or ("soak-embedded" if args.embedded else "soak-server")
    spike = spike_option(args.spike, args.soak) if args.spike else {}
    return SoakPlan(
        minutes=args.soak,
        rate=args.rate,
        batch=args.batch,
        concurrency=args.concurrency or 20,
        interval=args.interval,
        retention=args.retention,
        out=args.out,
        label=label,
        **spike,
    )


def spike_option(value: str, minutes: float) -> dict[str, float]:
    try:
        at, length, rate = (float(part) for part in value.split(":"))
    except ValueError:
        raise UsageError(f"--spike {value!r}: expected AT:MINUTES:RATE (numbers)") from None
    if at < 0 or length <= 0 or rate <= 0 or at + length > minutes:
        raise UsageError(
            f"--spike {value!r}: needs AT >= 0, MINUTES and RATE > 0, and"
            f" AT + MINUTES within the {minutes:g}-minute soak"
        )
    return {"spike_at": at, "spike_minutes": length, "spike_rate": rate}


def run_soak_command(args: argparse.Namespace) -> int:
    plan = soak_plan(args)
    if not args.embedded:
        return run_soak(plan, database_url(args.url))
    with scratch_embedded_server() as server:
        return run_soak(plan, server)


def make_plan(args: argparse.Namespace) -> Plan:
    sizes = dict(QUICK if args.quick else FULL)
    sizes["concurrency"] = DEFAULT_CONCURRENCY
    for name in (
        "n",
        "repeats",
        "claims",
        "history",
        "backlog",
        "single",
        "pickup_jobs",
        "concurrency",
        "finished",
        "batch_members",
        "kills",
    ):
        value = getattr(args, name)
        if value is not None:
            if value < 1:
                raise UsageError(f"--{name.replace('_', '-')} must be >= 1, got {value}")
            sizes[name] = value
    if not args.quick and sizes["n"] < FULL_MIN_N:
        raise UsageError(
            f"--n must be >= {FULL_MIN_N} for a full run (use --quick for a smoke run)"
        )
    if not args.quick and sizes["repeats"] < FULL_MIN_REPEATS:
        raise UsageError(
            f"--repeats must be >= {FULL_MIN_REPEATS} for a full run (use --quick for a smoke run)"
        )
    if sizes["concurrency"] > MAX_CONCURRENCY:
        raise UsageError(f"--concurrency must be within 1..{MAX_CONCURRENCY}")
    sections, counts = choose_sections(args)
    needed = scale.rows_needed(sizes["claims"], sizes["claim_limit"], sizes["repeats"])
    if "growth" in sections and sizes["backlog"] < needed:
        raise UsageError(
            f"--backlog must be >= {needed} for {sizes['claims']} claims x "
            f"{sizes['repeats']} repeats"
        )
    if args.pgbouncer and "fleet" not in sections:
        raise UsageError("--pgbouncer goes with --scale (or --only fleet)")
    return Plan(
        sections=sections,
        quick=args.quick,
        fleet_counts=counts,
        fleet_bouncer=args.pgbouncer,
        **sizes,
    )


def choose_sections(args: argparse.Namespace) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """The sections to run (``--only``, plus ``fleet`` with ``--scale``) and the fleet's counts."""
    counts = fleet.DEFAULT_COUNTS
    if args.scale is not None:
        try:
            counts = fleet.parse_counts(args.scale)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    if not args.only:
        return (("fleet",) if args.scale is not None else tuple(DEFAULT_SECTIONS)), counts
    sections = tuple(ALIASES.get(s.strip(), s.strip()) for s in args.only.split(",") if s.strip())
    unknown = sorted(set(sections) - set(SECTIONS))
    if unknown or not sections:
        raise UsageError(f"--only: unknown section(s) {unknown}; choose from {list(SECTIONS)}")
    if args.scale is not None and "fleet" not in sections:
        sections += ("fleet",)
    return sections, counts


def header(bench_db: BenchDatabase, plan: Plan) -> str:
    facts = bench_db.server_facts()
    settings = " ".join(f"{k}={v}" for k, v in sorted(facts.items()) if k != "server_version")
    return (
        f"# workerpool bench {time.strftime('%Y-%m-%d %H:%M:%S %Z')}: "
        f"PostgreSQL {facts['server_version']} ({settings}); "
        f"Python {platform.python_version()}; {os.cpu_count()} CPUs; "
        f"n={plan.n} repeats={plan.repeats} concurrency={plan.concurrency}"
        f"{' QUICK' if plan.quick else ''}"
    )


def run(plan: Plan, url: str | None, keep: str | None = None) -> tuple[str, Report]:
    """Measure ``plan`` on a private database of the server at ``url``."""
    server = database_url(url)
    report = Report()
    declare(report, plan)
    with BenchDatabase(server, keep=keep) as bench_db:
        log.info("database %s on %s", bench_db.name, db.redact(server))
        title = header(bench_db, plan)
        bench = Bench(plan, bench_db, report)
        try:
            bench.run()
        finally:
            bench.close()
    return title, report


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format="bench [%(relativeCreated)6.0f ms] %(message)s",
    )
    logging.getLogger("alembic").setLevel(logging.WARNING)
    logging.getLogger("pgserver").setLevel(logging.WARNING)  # its start-up is not news
    logging.getLogger("httpx").setLevel(logging.WARNING)  # the web figure: a line per request
    args = build_parser().parse_args(argv)
    try:
        if args.soak is not None:
            return run_soak_command(args)
        plan = make_plan(args)
        title, report = run(plan, args.url, args.database)
    except UsageError as exc:
        print(f"python -m bench: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # a database or subprocess failure: one password-free line
        first = (str(exc).strip().splitlines() or [""])[0]
        print(f"python -m bench: {type(exc).__name__}: {first}", file=sys.stderr)
        return 1
    print(title)
    print()
    print(report.table())
    print()
    if plan.wants("fleet"):
        print(fleet.table(report, plan.fleet_counts))
        print()
    for line in report.json_lines():
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
