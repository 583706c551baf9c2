"""The `workerpool` command. Parses arguments and hands over; the logic lives elsewhere.

Every failure prints one readable line to stderr and exits non-zero. Subcommands import their
modules lazily so that `workerpool healthcheck` (a Kubernetes exec probe) stays cheap.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2


class CliError(Exception):
    """A failure to report as one line with a non-zero exit."""


def load_pool(target: str) -> Any:
    """Import ``module.path:attribute`` and return the WorkerPool it names."""
    from .pool import WorkerPool

    module_name, sep, attribute = target.partition(":")
    if not sep or not module_name or not attribute:
        raise CliError(f"APP:POOL must look like 'package.module:pool', got {target!r}")
    sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise CliError(f"cannot import {module_name!r}: {exc}") from None
    pool = getattr(module, attribute, None)
    if not isinstance(pool, WorkerPool):
        raise CliError(f"{target!r} is not a WorkerPool (got {type(pool).__name__})")
    return pool


# -- commands --------------------------------------------------------------------------------


def cmd_migrate(args: argparse.Namespace) -> int:
    from . import db
    from .migrate import upgrade

    upgrade(db.resolve_url(), args.revision)
    print(f"workerpool: migrated to {args.revision}")
    return EXIT_OK


def cmd_enqueue(args: argparse.Namespace) -> int:
    pool = load_pool(args.app)
    try:
        payload = json.loads(args.payload, parse_constant=_reject_constant)
    except ValueError as exc:
        raise CliError(f"--payload is not valid JSON: {exc}") from None
    options: dict[str, Any] = {"key": args.key, "delay": args.delay}
    if args.priority is not None:
        options["priority"] = args.priority
    if args.max_attempts is not None:
        options["max_attempts"] = args.max_attempts
    job_id = pool.enqueue(args.task, payload, **options)
    print(job_id)
    return EXIT_OK


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def cmd_run(args: argparse.Namespace) -> int:
    from . import config
    from .child import maintenance_available
    from .log import configure_logging
    from .supervisor import Supervisor

    configure_logging(args.log_level)
    pool = load_pool(args.app)
    interval = None
    if maintenance_available():
        interval = getattr(getattr(pool, "maintenance_settings", None), "interval", 1.0)
    settings = config.load(
        pool, args.queue, heartbeat_dir=args.heartbeat_dir, grace=args.grace,
        restart_delay=args.restart_delay, boot_retries=args.boot_retries,
        maintenance_interval=interval,
    )
    pool.url  # noqa: B018 - resolve once here: the embedded PostgreSQL starts before any fork
    return Supervisor(pool, settings).run()


def cmd_healthcheck(args: argparse.Namespace) -> int:
    from pathlib import Path

    from . import heartbeat
    from .healthcheck import EXIT_HEALTHY, EXIT_UNHEALTHY, check

    if not args.max_age > 0:
        raise CliError(f"--max-age must be > 0, got {args.max_age:g}")
    directory = Path(args.dir) if args.dir else heartbeat.default_dir()
    verdict = check(directory, args.max_age, args.workers)
    if not verdict.healthy:
        raise CliError(verdict.message)
    print(f"workerpool healthcheck: {verdict.message}")
    return EXIT_HEALTHY if verdict.healthy else EXIT_UNHEALTHY


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "migrate": cmd_migrate,
    "enqueue": cmd_enqueue,
    "run": cmd_run,
    "healthcheck": cmd_healthcheck,
}


def build_parser() -> argparse.ArgumentParser:
    from . import config, heartbeat

    parser = argparse.ArgumentParser(prog="workerpool", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    migrate = sub.add_parser("migrate", help="apply workerpool's migrations (alembic upgrade)")
    migrate.add_argument("revision", nargs="?", default="head")

    enqueue = sub.add_parser("enqueue", help="enqueue one job")
    enqueue.add_argument("app", metavar="APP:POOL")
    enqueue.add_argument("task")
    enqueue.add_argument("--payload", default="{}", help="a JSON object")
    enqueue.add_argument("--key", default=None, help="idempotency key")
    enqueue.add_argument("--delay", type=float, default=None, help="seconds before it may run")
    enqueue.add_argument("--priority", type=int, default=None)
    enqueue.add_argument("--max-attempts", type=int, default=None)

    run = sub.add_parser("run", help="the supervisor: fork one child per queue and keep them up")
    run.add_argument("app", metavar="APP:POOL")
    run.add_argument("--queue", action="append", default=None, metavar="Q",
                     help="run only this queue (repeatable; default: every declared queue)")
    run.add_argument("--heartbeat-dir", default=None, metavar="DIR",
                     help="where <worker>.heartbeat files go (default: $WORKERPOOL_HEARTBEAT_DIR, "
                          "else /dev/shm/workerpool-<uid>)")
    run.add_argument("--grace", default=None, metavar="SECONDS",
                     help="the orchestrator's stop grace period (default: "
                          "$WORKERPOOL_GRACE_PERIOD); drain_timeout + margin must be below it")
    run.add_argument("--restart-delay", type=float, default=config.RESTART_DELAY, metavar="SECONDS",
                     help="base of the restart backoff after repeated fast crashes (default 1)")
    run.add_argument("--boot-retries", type=int, default=config.BOOT_RETRIES, metavar="N",
                     help="exit non-zero after a worker type fails to start N times in a row")
    run.add_argument("--log-level", default="INFO",
                     choices=["DEBUG", "INFO", "WARNING", "ERROR"])

    health = sub.add_parser("healthcheck", help="exit 0 iff every heartbeat file is fresh")
    health.add_argument("workers", nargs="*", metavar="WORKER",
                        help="heartbeat names to check (default: every file in the directory)")
    health.add_argument("--dir", default=None,
                        help="heartbeat directory (default: as for `workerpool run`)")
    health.add_argument("--max-age", type=float, default=heartbeat.DEFAULT_MAX_AGE,
                        metavar="SECONDS", help="older than this is stale (default %(default)g)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from .errors import WorkerpoolError

    parser = build_parser()
    args = parser.parse_args(argv)
    handler = COMMANDS[args.command]
    try:
        return handler(args)
    except (CliError, WorkerpoolError) as exc:
        print(f"workerpool {args.command}: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # a database or import failure: one line, password-free
        print(f"workerpool {args.command}: {type(exc).__name__}: {_first_line(exc)}", file=sys.stderr)
        return EXIT_FAILURE


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else ""

