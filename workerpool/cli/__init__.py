"""The `workerpool` command: parses arguments and hands over to the modules that do the work.
What its help says to the person running it is in :mod:`workerpool.cli.helptext`.

Every failure prints one readable line to stderr and exits non-zero. Subcommands import their
modules lazily so that `workerpool healthcheck` (a Kubernetes exec probe) stays cheap.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from ..model import exitcodes
from . import batch as cli_batch
from . import crons as cli_crons
from . import dead as cli_dead
from . import enqueue as cli_enqueue
from . import helptext as cli_help
from . import job as cli_job
from . import live
from . import queues as cli_queues
from . import status as cli_status
from .helptext import add_app_option, add_command
from .target import CliError, check_migrated, load_pool, pool_for

# -- commands --------------------------------------------------------------------------------


def cmd_migrate(args: argparse.Namespace) -> int:
    from ..client import WorkerPool

    if args.app and args.schema:
        raise CliError("give --app or --schema, not both: the app's pool names its schema")
    pool = load_pool(args.app) if args.app else WorkerPool(schema=args.schema)
    pool.migrate(args.revision)
    print(f"workerpool: migrated to {args.revision} in schema {pool.schema}")
    return exitcodes.OK


def cmd_demo(args: argparse.Namespace) -> int:
    try:
        from workerpool_demo import Options, main
    except ModuleNotFoundError as exc:
        if exc.name != "workerpool_demo":
            raise
        raise CliError(
            "the demo (package workerpool_demo) is not installed: "
            "pip install 'workerpool[embedded]', or run it from a checkout"
        ) from None

    given = {name: value for name, value in vars(args).items() if name in DEMO_OPTIONS}
    return main(Options(**given))


DEMO_OPTIONS = ("duration", "users", "chaos", "chaos_every", "settle_timeout", "database", "seed")


def cmd_embedded(args: argparse.Namespace) -> int:
    """``workerpool embedded status|stop``: the embedded PostgreSQL of this directory."""
    from ..process import settings
    from ..sql import db

    data_dir = settings.embedded_dir()
    if args.action == "stop":
        stopped = db.stop_embedded(data_dir)
        print(
            f"stopped the embedded PostgreSQL in {data_dir}"
            if stopped
            else f"no embedded PostgreSQL is running in {data_dir}"
        )
        return exitcodes.OK
    running = db.embedded_running(data_dir)
    print(f"the embedded PostgreSQL in {data_dir} is {'running' if running else 'not running'}")
    return exitcodes.OK if running else 1


def _run(args: argparse.Namespace) -> int:
    from .run import cmd_run  # the database stack and the runtime: not for `healthcheck`

    return cmd_run(args)


def cmd_healthcheck(args: argparse.Namespace) -> int:
    from pathlib import Path

    from ..process import settings
    from ..process.healthcheck import Verdict, check_all, find

    if not args.max_age > 0:
        raise CliError(f"--max-age must be > 0, got {args.max_age:g}")
    given = Path(args.dir) if args.dir else settings.heartbeat_directory()
    found = [given] if given is not None else find(settings.heartbeat_bases(), args.app)
    verdict = found if isinstance(found, Verdict) else check_all(found, args.max_age, args.workers)
    if not verdict.healthy:
        raise CliError(verdict.message)
    print(f"workerpool healthcheck: {verdict.message}")
    return exitcodes.OK if verdict.healthy else exitcodes.UNHEALTHY


def cmd_web(args: argparse.Namespace) -> int:
    try:
        from ..web.server import serve
    except ModuleNotFoundError as exc:
        raise CliError(
            f"the dashboard needs its extra ({exc.name} is missing): pip install 'workerpool[web]'"
        ) from None
    if not 0 < args.port < 65536:
        raise CliError(f"--port must be within 1..65535, got {args.port}")
    pool = pool_for(args)
    check_migrated(pool)
    serve(pool, bind=args.bind, port=args.port, read_only=args.read_only, hosts=args.allow_host)
    return exitcodes.OK


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "migrate": cmd_migrate,
    "enqueue": lambda args: cli_enqueue.cmd_enqueue(args),
    "status": lambda args: cli_status.cmd_status(args),
    "dead": lambda args: cli_dead.cmd_dead(args),
    "batch": lambda args: cli_batch.cmd_batch(args),
    "job": lambda args: cli_job.cmd_job(args),
    "rerun": lambda args: cli_job.cmd_rerun(args),
    "signal": lambda args: live.cmd_signal(args),
    "cancel": lambda args: live.cmd_cancel(args),
    "pause": lambda args: live.cmd_pause(args),
    "resume": lambda args: live.cmd_resume(args),
    "roles": lambda args: live.cmd_roles(args),
    "run": lambda args: _run(args),
    "healthcheck": cmd_healthcheck,
    "web": cmd_web,
    "demo": cmd_demo,
    "embedded": cmd_embedded,
    "cron": lambda args: cli_crons.cmd_cron(args),
    "audit": lambda args: cli_crons.cmd_audit(args),
    "queue": lambda args: cli_queues.cmd_queue(args),
}


def build_parser() -> argparse.ArgumentParser:
    from ..process import heartbeat
    from ..process import settings as config

    parser = argparse.ArgumentParser(
        prog="workerpool",
        description=cli_help.DESCRIPTION,
        epilog=cli_help.EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)

    migrate = add_command(sub, "migrate", help="apply workerpool's migrations (alembic upgrade)")
    migrate.add_argument("revision", nargs="?", default="head")
    migrate.add_argument(
        "--schema",
        default=None,
        help="the schema of workerpool's tables, created if missing (default: "
        "$WORKERPOOL_SCHEMA, else public)",
    )
    add_app_option(
        migrate,
        "migrate the database (and schema) this app's pool names, e.g. a Django"
        " project's: workerpool.contrib.django.worker:pool",
    )

    cli_enqueue.add_parser(sub)

    cli_status.add_parser(sub)
    cli_dead.add_parser(sub)
    cli_batch.add_parser(sub)
    cli_queues.add_parser(sub)
    cli_job.add_parser(sub)
    cli_job.add_rerun_parser(sub)
    live.add_parsers(sub)
    cli_crons.add_parsers(sub)
    run = add_command(
        sub, "run", help="the supervisor: fork each queue's children and keep them up"
    )
    run.add_argument("app", metavar="APP:POOL")
    run.add_argument(
        "--queue",
        action="append",
        default=None,
        metavar="Q",
        help="run only this queue (repeatable; default: every declared queue)",
    )
    run.add_argument(
        "--processes",
        action="append",
        default=None,
        metavar="QUEUE=N",
        help="fork N children of QUEUE (an int, or 'auto': one per core), replacing "
        "its declared processes= (repeatable)",
    )
    run.add_argument(
        "--heartbeat-dir",
        default=None,
        metavar="DIR",
        help="where <worker>.heartbeat files go (default: $WORKERPOOL_HEARTBEAT_DIR, "
        "else one of this app and database's own under "
        "$XDG_RUNTIME_DIR/workerpool or /dev/shm/workerpool-<uid>)",
    )
    run.add_argument(
        "--grace",
        default=None,
        metavar="SECONDS",
        help="the orchestrator's stop grace period (default: "
        "$WORKERPOOL_GRACE_PERIOD); drain_timeout + margin must be below it",
    )
    run.add_argument(
        "--restart-delay",
        type=float,
        default=config.RESTART_DELAY,
        metavar="SECONDS",
        help="base of the restart backoff after repeated fast crashes (default 1)",
    )
    run.add_argument(
        "--boot-retries",
        type=int,
        default=config.BOOT_RETRIES,
        metavar="N",
        help="exit non-zero after a worker type fails to start N times in a row",
    )
    run.add_argument(
        "--metrics-port",
        default=None,
        metavar="PORT",
        help="serve Prometheus metrics on GET /metrics at this port (default: "
        "$WORKERPOOL_METRICS_PORT, else off); needs workerpool[metrics]",
    )
    run.add_argument(
        "--metrics-bind",
        default=None,
        metavar="ADDR",
        help="address the metrics port listens on (default: "
        "$WORKERPOOL_METRICS_BIND, else 127.0.0.1)",
    )
    run.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    run.add_argument(
        "--log-format",
        default=None,
        choices=["text", "json", "auto"],
        help="text (default), json (one object a line), or auto (json unless "
        "stderr is a terminal); default: $WORKERPOOL_LOG_FORMAT, else text",
    )

    web = add_command(sub, "web", help="the web dashboard: queues, jobs, dead letters, actions")
    web.add_argument(
        "app",
        nargs="?",
        metavar="APP:POOL",
        default=None,
        help="the app (its tasks decide what a retry may replay; default: what"
        " live workers registered)",
    )
    web.add_argument(
        "--bind",
        default="127.0.0.1",
        metavar="ADDR",
        help="address to listen on (default 127.0.0.1; any other needs $WORKERPOOL_WEB_TOKEN)",
    )
    web.add_argument("--port", type=int, default=8080, help="default %(default)s")
    web.add_argument(
        "--read-only",
        action="store_true",
        help="serve no action at all (no retry, purge, cancel, pause)",
    )
    web.add_argument(
        "--allow-host",
        action="append",
        default=[],
        metavar="NAME",
        help="a Host name to serve besides the loopback ones (repeatable; a"
        " reverse proxy's name). Without a token no other is served",
    )

    health = add_command(sub, "healthcheck", help="exit 0 iff every heartbeat file is fresh")
    health.add_argument(
        "workers",
        nargs="*",
        metavar="WORKER",
        help="heartbeat names to check (default: every file in the directory)",
    )
    health.add_argument(
        "--dir",
        default=None,
        help="heartbeat directory (default: $WORKERPOOL_HEARTBEAT_DIR, else the "
        "one the live supervisor on this host holds)",
    )
    add_app_option(
        health,
        "without --dir: the supervisor of this app, when several run here"
        " (the target as given to `workerpool run`; not imported)",
    )
    health.add_argument(
        "--max-age",
        type=float,
        default=heartbeat.DEFAULT_MAX_AGE,
        metavar="SECONDS",
        help="older than this is stale (default %(default)g)",
    )
    demo = add_command(
        sub,
        "demo",
        help="the quick start: an example backend's jobs under a real supervisor, with a verdict",
        description="Runs workerpool_demo.app under `workerpool run` on a fresh database "
        "(the embedded PostgreSQL unless WORKERPOOL_DATABASE_URL names a server), plays a burst "
        "of web requests, shows each queue live, drains, and checks that nothing was lost.",
    )
    keep = argparse.SUPPRESS  # unset options take the defaults of workerpool_demo.Options
    demo.add_argument(
        "--duration",
        type=float,
        default=keep,
        help="seconds during which requests arrive (default 15), then it settles",
    )
    demo.add_argument("--users", type=int, default=keep, help="signups in the burst (default 150)")
    demo.add_argument(
        "--chaos",
        action="store_true",
        default=keep,
        help="SIGKILL a random worker process every few seconds meanwhile",
    )
    demo.add_argument(
        "--chaos-every",
        type=float,
        default=keep,
        metavar="SECONDS",
        help="seconds between two kills with --chaos (default 3)",
    )
    demo.add_argument(
        "--settle-timeout",
        type=float,
        default=keep,
        metavar="SECONDS",
        help="give up if the work has not settled this long after the requests (default 90)",
    )
    demo.add_argument(
        "--database",
        default=keep,
        help="name of the demo's own database, re-created on each run (default workerpool_demo)",
    )
    demo.add_argument("--seed", type=int, default=keep, help="seed the scenario's randomness")
    embedded = add_command(
        sub, "embedded", help="the embedded PostgreSQL of this directory: status, stop"
    )
    embedded.add_argument("action", choices=["status", "stop"])
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from ..model.audit import acting
    from ..model.errors import WorkerpoolError, first_line
    from .terminal import escaped, safe_stdout

    parser = build_parser()
    args = parser.parse_args(argv)
    handler = COMMANDS[args.command]
    try:
        with acting(getattr(args, "as_name", None), "cli"), safe_stdout(args.command):
            return handler(args)  # what it does is recorded as cli
    except (CliError, WorkerpoolError) as exc:
        print(escaped(f"workerpool {args.command}: {exc}"), file=sys.stderr)
        return exitcodes.FAILURE
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # a database or import failure: one line, password-free
        told = _not_migrated(args, exc) or f"{type(exc).__name__}: {first_line(exc)}"
        print(escaped(f"workerpool {args.command}: {told}"), file=sys.stderr)
        return exitcodes.FAILURE


def _not_migrated(args: argparse.Namespace, exc: Exception) -> str | None:
    """For a statement that met a database without workerpool's tables (or older ones): the
    line naming `workerpool migrate` and the revisions, instead of the driver's error."""
    if "psycopg" not in sys.modules:  # no statement ran: not a database's error
        return None
    from ..sql import revision

    if not revision.is_missing(exc):
        return None
    try:
        return str(pool_for(args).not_migrated(exc))
    except Exception:
        return None
