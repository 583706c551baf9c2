"""`workerpool cron list|pause|resume|run|add|remove` (schedules at run time) and `workerpool
audit` (who did what)."""

from __future__ import annotations

import argparse
import json
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from ..model import exitcodes
from .helptext import add_app_option, add_as
from .target import CliError, pool_for

CRON_EXAMPLE = """\
example:
  workerpool cron list --app myapp.jobs:pool      # code defaults beside run-time state
  workerpool cron pause nightly_report --as alice # every replica, survives restarts
  workerpool cron resume nightly_report
  workerpool cron run nightly_report --app myapp.jobs:pool   # one job now
  workerpool cron add digest '*/15 * * * *' --task send_digest --payload '{"kind": "short"}' \
      --app myapp.jobs:pool                        # no deploy; every replica within a pass
  workerpool cron remove digest                    # only a schedule added at run time

A change is recorded in the audit trail (workerpool audit) with who and when."""

AUDIT_EXAMPLE = """\
example:
  workerpool audit --action cron_pause --limit 20
  workerpool audit --actor alice --json

Newest first; --before ID pages to older entries."""


def cmd_cron(args: argparse.Namespace) -> int:
    verbs = {
        "list": cron_list,
        "pause": cron_pause,
        "resume": cron_resume,
        "run": cron_run,
        "add": cron_add,
        "remove": cron_remove,
    }
    return verbs[args.cron_command](args)


def cron_list(args: argparse.Namespace) -> int:
    from ..ops.crons import list_crons
    from ..ops.status import table

    views = list_crons(pool_for(args))
    if args.json:
        print(json.dumps([view.to_json() for view in views], indent=2))
        return exitcodes.OK
    print(render_list(views, table))
    return exitcodes.OK


def render_list(views: list[Any], table: Any) -> str:
    """The schedules as a table: each next tick in the schedule's own timezone (with its UTC
    offset), beside that timezone's name."""
    rows = [
        [
            v.name,
            v.expression,
            v.queue,
            v.timezone,
            _time(v.next_tick, v.timezone),
            _last_job(v),
            _paused(v),
        ]
        for v in views
    ]
    return table(
        ["NAME", "EXPRESSION", "QUEUE", "TIMEZONE", "NEXT TICK", "LAST JOB", "PAUSED"],
        rows,
        empty="(no cron schedules: none declared or seen by a scheduler)",
    )


def _time(moment: Any, timezone: str | None = None) -> str | None:
    if moment is None:
        return None
    if timezone:
        try:
            moment = moment.astimezone(ZoneInfo(timezone))
        except (ZoneInfoNotFoundError, ValueError):  # a zone this host lacks: UTC, labelled
            pass
    return moment.isoformat(timespec="seconds")


def _last_job(view: Any) -> str | None:
    if view.last_job_id is None:
        return None
    return f"{view.last_job_id} ({view.last_job_state or 'pruned'})"


def _paused(view: Any) -> str:
    if not view.paused:
        return "no"
    return f"yes, by {view.paused_by} at {_time(view.paused_at)}"


def cron_pause(args: argparse.Namespace) -> int:
    pool_for(args).cron_pause(args.name)
    print(f"cron {args.name} paused on every replica")
    return exitcodes.OK


def cron_resume(args: argparse.Namespace) -> int:
    pool_for(args).cron_resume(args.name)
    print(f"cron {args.name} resumed")
    return exitcodes.OK


def cron_run(args: argparse.Namespace) -> int:
    if not args.app:
        raise CliError("cron run needs --app APP:POOL (the app declares the cron's task)")
    job_id = pool_for(args).cron_run(args.name, request=args.request)
    print(
        json.dumps({"cron": args.name, "job_id": job_id})
        if args.json
        else f"cron {args.name}: job {job_id} enqueued"
    )
    return exitcodes.OK


def cron_add(args: argparse.Namespace) -> int:
    from .enqueue import reject_constant

    if not args.app:
        raise CliError("cron add needs --app APP:POOL (the app declares the schedule's task)")
    try:
        payload = json.loads(args.payload, parse_constant=reject_constant)
    except ValueError as exc:
        raise CliError(f"--payload is not valid JSON: {exc}") from None
    pool_for(args).cron_add(
        args.name,
        args.expression,
        task=args.task,
        payload=payload,
        queue=args.queue,
        timezone=args.timezone,
    )
    print(f"cron {args.name} added: {args.expression} ({args.timezone}) enqueues {args.task}")
    return exitcodes.OK


def cron_remove(args: argparse.Namespace) -> int:
    pool_for(args).cron_remove(args.name)
    print(f"cron {args.name} removed: its ticks stop on every replica")
    return exitcodes.OK


def cmd_audit(args: argparse.Namespace) -> int:
    from ..ops.audit import list_audit
    from ..ops.status import table

    page = list_audit(
        pool_for(args), actor=args.actor, action=args.action, before=args.before, limit=args.limit
    )
    if args.json:
        print(
            json.dumps(
                {"entries": [e.to_json() for e in page.entries], "before": page.before}, indent=2
            )
        )
        return exitcodes.OK
    rows = [[e.id, _time(e.at), e.actor, e.source, e.action, e.target] for e in page.entries]
    print(
        table(
            ["ID", "AT", "ACTOR", "SOURCE", "ACTION", "TARGET"],
            rows,
            empty="(no audit entries match)",
        )
    )
    if page.before is not None:
        print(f"older entries: --before {page.before}")
    return exitcodes.OK


def add_parsers(sub: Any) -> None:
    def command(parent: Any, name: str, epilog: str | None, **options: Any) -> Any:
        return parent.add_parser(
            name, epilog=epilog, formatter_class=argparse.RawDescriptionHelpFormatter, **options
        )

    cron = command(
        sub,
        "cron",
        CRON_EXAMPLE,
        help="cron schedules at run time: list, pause, resume, run now, add, remove",
    )
    verbs = cron.add_subparsers(dest="cron_command", required=True)
    listing = command(
        verbs,
        "list",
        CRON_EXAMPLE,
        help="name, expression, next tick, last job, paused (by whom, when)",
    )
    add_app_option(listing, "show this app's declared crons too (before a scheduler saw them)")
    listing.add_argument("--json", action="store_true")
    for verb, text in (
        ("pause", "pause a schedule on every replica (kept across restarts)"),
        ("resume", "resume a paused schedule from its next tick"),
        ("run", "enqueue one job of the schedule now"),
    ):
        parser = command(verbs, verb, CRON_EXAMPLE, help=text)
        parser.add_argument("name", metavar="NAME")
        add_app_option(parser, "the app declaring the cron (required by run)")
        add_as(parser)
        if verb == "run":
            parser.add_argument(
                "--request",
                default=None,
                metavar="ID",
                help="an id of this request: the same id twice is one job",
            )
            parser.add_argument("--json", action="store_true")
    add = command(verbs, "add", CRON_EXAMPLE, help="add a schedule at run time (or change one)")
    add.add_argument("name", metavar="NAME")
    add.add_argument("expression", metavar="EXPRESSION")
    add.add_argument("--task", required=True, help="the task each tick enqueues")
    add.add_argument("--payload", default="{}", help="a JSON object; each job gets its tick too")
    add.add_argument("--queue", default=None, help="the task's queue (checked against it)")
    add.add_argument("--timezone", default="UTC", help="an IANA name (default UTC)")
    add_app_option(add, "the app (required)")
    add_as(add)
    remove = command(verbs, "remove", CRON_EXAMPLE, help="remove a schedule added at run time")
    remove.add_argument("name", metavar="NAME")
    add_app_option(remove, "the app")
    add_as(remove)
    audit = command(
        sub,
        "audit",
        AUDIT_EXAMPLE,
        help="who did what, when: cancel, retry, purge, pause, cron changes",
    )
    audit.add_argument("--actor", default=None)
    audit.add_argument(
        "--action",
        default=None,
        help="cancel, retry, rerun, purge, pause, resume, cron_pause, cron_resume, cron_run,"
        " cron_add, cron_remove",
    )
    audit.add_argument(
        "--before",
        type=int,
        default=None,
        metavar="ID",
        help="entries older than this id (the next page)",
    )
    audit.add_argument("--limit", type=int, default=50, help="default %(default)s, at most 500")
    audit.add_argument("--json", action="store_true")
