"""``python -m workerpool.chaos``: a seeded fault-injection run with a history checker.

Without ``--database-url`` (or ``$WORKERPOOL_DATABASE_URL``) the run creates its own throwaway
PostgreSQL cluster (initdb + pg_ctl from ``$WORKERPOOL_CHAOS_PG_BIN``, default
/usr/lib/postgresql/15/bin) and may restart it and fail it over; against a server you name, it
creates (and drops) a database of its own and injects only process and connection faults.
Exit status: 0 when every check passed, 1 on any violation, 2 on bad usage.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from ..model.errors import ConfigError, WorkerpoolError, first_line
from ..process import settings
from ..sql import db


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m workerpool.chaos",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--seed", type=int, default=1, help="same seed, same fault schedule")
    parser.add_argument(
        "--duration",
        type=float,
        default=60.0,
        help="seconds of workload and faults (default 60), then the drain",
    )
    parser.add_argument(
        "--database-url",
        default=None,
        help="a server to run on (default: $WORKERPOOL_DATABASE_URL, else a "
        "throwaway cluster made here)",
    )
    parser.add_argument(
        "--own-cluster",
        action="store_true",
        help="ignore $WORKERPOOL_DATABASE_URL: always make a throwaway cluster",
    )
    parser.add_argument(
        "--failover",
        nargs="?",
        const="sync",
        choices=["sync", "async"],
        default=None,
        help="with a throwaway cluster: add a standby (synchronous unless "
        "'async') and fail over to it once; async shows what it loses",
    )
    parser.add_argument(
        "--rate",
        type=float,
        default=40.0,
        help="enqueue operations a second, all producers (default 40)",
    )
    parser.add_argument(
        "--mean-gap", type=float, default=2.0, help="mean seconds between two faults (default 2)"
    )
    parser.add_argument("--supervisors", type=int, default=2, help="supervisors kept up")
    parser.add_argument(
        "--settle-timeout",
        type=float,
        default=30.0,
        help="the drain gives up after this many seconds in which no job finished (default 30)",
    )
    parser.add_argument(
        "--json",
        default="chaos-result.json",
        metavar="PATH",
        help="where the result goes as JSON (default %(default)s)",
    )
    parser.add_argument(
        "--logs",
        default=None,
        metavar="DIR",
        help="keep the supervisors' logs in DIR (default: removed)",
    )
    parser.add_argument(
        "--schedule-only", action="store_true", help="print the seed's fault schedule and exit"
    )
    return parser


def options_from(args: argparse.Namespace):  # -> runner.Options
    from sqlalchemy.engine import make_url

    from .runner import Options

    if not 10 <= args.duration <= 24 * 3600:
        raise ConfigError(f"--duration must be within 10..86400 seconds, got {args.duration:g}")
    if not 0.1 <= args.mean_gap <= 3600 or not 0.1 <= args.rate <= 10_000:
        raise ConfigError("--mean-gap must be within 0.1..3600 and --rate within 0.1..10000")
    if not 1 <= args.supervisors <= 16:
        raise ConfigError(f"--supervisors must be within 1..16, got {args.supervisors}")
    raw = None if args.own_cluster else (args.database_url or settings.database_url())
    server = None
    if raw:
        try:
            server = db.normalise(make_url(raw))
        except ConfigError:
            raise
        except Exception:
            raise ConfigError("--database-url is not a valid URL (value hidden)") from None
    if args.failover and server is not None:
        raise ConfigError(
            "--failover needs a throwaway cluster: drop --database-url (or pass --own-cluster)"
        )
    return Options(
        seed=args.seed,
        duration=args.duration,
        server=server,
        failover=args.failover,
        supervisors=args.supervisors,
        rate=args.rate,
        mean_gap=args.mean_gap,
        settle_timeout=args.settle_timeout,
        logs=Path(args.logs).resolve() if args.logs else None,
    )


def main(argv: list[str] | None = None) -> int:
    from . import report
    from .runner import kinds, run
    from .schedule import plan

    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s chaos %(message)s")
    try:
        options = options_from(args)
        if args.schedule_only:
            print(
                report.schedule_text(
                    plan(
                        options.seed,
                        options.duration,
                        options.mean_gap,
                        kinds(options),
                        options.failover is not None,
                    )
                )
            )
            return 0
        result = run(options, on_schedule=lambda s: print(report.schedule_text(s), flush=True))
    except WorkerpoolError as exc:
        print(f"workerpool.chaos: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:
        print(f"workerpool.chaos: {type(exc).__name__}: {first_line(exc)}", file=sys.stderr)
        return 2
    print(report.table(options, result))
    report.write_json(Path(args.json), options, result)
    print(f"(JSON: {args.json})")
    return 0 if result.verdict.ok else 1


if __name__ == "__main__":
    sys.exit(main())
