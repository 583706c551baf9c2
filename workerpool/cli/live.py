"""`workerpool signal`, `cancel`, `pause`, `resume` (steering live work) and `roles`."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ..model import exitcodes
from .enqueue import reject_constant
from .helptext import add_app_option, add_as, add_command
from .target import CliError, pool_for


def cmd_signal(args: argparse.Namespace) -> int:
    """``workerpool signal NAME --payload JSON``: ``pool.signal``; prints when it was sent."""
    try:
        payload = json.loads(args.payload, parse_constant=reject_constant)
    except ValueError as exc:
        raise CliError(f"--payload is not valid JSON: {exc}") from None
    sent_at = pool_for(args).signal(args.name, payload)
    print(
        json.dumps({"signal": args.name, "sent_at": sent_at.isoformat()})
        if args.json
        else f"signal {args.name!r} sent at {sent_at.isoformat(timespec='seconds')}"
    )
    return exitcodes.OK


def cmd_cancel(args: argparse.Namespace) -> int:

    if bool(args.ids) == bool(args.queue or args.tag):
        raise CliError(
            "give job IDs or --queue Q and/or --tag T (with optional --task, --state), not both"
        )
    result = pool_for(args).cancel(
        args.ids or None,
        queue=args.queue,
        task=args.task,
        state=args.state,
        reason=args.reason,
        dry_run=args.dry_run,
        tags=args.tag,
    )
    if args.json:
        print(json.dumps(result.to_json(), indent=2))
        return exitcodes.OK
    prefix = "dry run: would be " if result.dry_run else ""
    for job_id, verdict in result.verdicts.items():
        state = result.states.get(job_id)
        detail = f" ({state})" if verdict.startswith("already") else ""
        print(f"job {job_id}: {prefix}{verdict}{detail}")
    if not result.verdicts:
        print("no job matches")
    return exitcodes.OK


def cmd_pause(args: argparse.Namespace) -> int:
    return _set_paused(args, True)


def cmd_resume(args: argparse.Namespace) -> int:
    return _set_paused(args, False)


def _set_paused(args: argparse.Namespace, paused: bool) -> int:

    pool = pool_for(args)
    (pool.pause if paused else pool.resume)(args.queue)
    print(f"queue {args.queue} {'paused' if paused else 'resumed'}")
    return exitcodes.OK


def cmd_roles(args: argparse.Namespace) -> int:
    from ..model.validation import DEFAULT_SCHEMA, check_schema
    from ..ops.roles import print_sql
    from ..process import settings

    schema = check_schema(args.schema or settings.schema() or DEFAULT_SCHEMA)
    sys.stdout.write(print_sql(args.prefix, schema))
    return exitcodes.OK


def add_parsers(sub: Any) -> None:
    signal = add_command(
        sub,
        "signal",
        help="send a signal: wake the jobs waiting for it in"
        " job.wait_for (the first signal of a name stands)",
    )
    signal.add_argument("name", metavar="NAME")
    signal.add_argument("--payload", default="null", help="a JSON value (default null)")
    add_app_option(signal, "use this app's payload limit (default: the default limit)")
    signal.add_argument("--json", action="store_true")
    cancel = sub.add_parser(
        "cancel", help="cancel jobs: queued ones now, running ones asked to stop"
    )
    cancel.add_argument("ids", nargs="*", type=int, metavar="ID")
    cancel.add_argument("--queue", default=None, help="every live job of this queue")
    cancel.add_argument(
        "--tag",
        action="append",
        default=None,
        metavar="TAG",
        help="every live job carrying this tag (repeatable: every one of them)",
    )
    cancel.add_argument("--task", default=None, help="with --queue: only this task")
    cancel.add_argument("--state", default=None, help="with --queue: pending, processing or failed")
    cancel.add_argument("--reason", default=None, help="why (kept in each job's history)")
    cancel.add_argument("--dry-run", action="store_true", help="show what would happen")
    add_app_option(cancel)
    cancel.add_argument("--json", action="store_true")
    add_as(cancel)
    for verb, text in (
        ("pause", "stop every replica claiming from QUEUE"),
        ("resume", "let every replica claim from QUEUE again"),
    ):
        parser = sub.add_parser(verb, help=text)
        parser.add_argument("queue", metavar="QUEUE")
        add_app_option(
            parser, "known queues are this app's (default: queues with live workers or rows)"
        )
        add_as(parser)
    roles = sub.add_parser(
        "roles",
        help="least-privilege group roles: owner (migrate), worker, reader (see docs/roles.md)",
    )
    roles.add_argument(
        "--print-sql",
        action="store_true",
        required=True,
        help="print the idempotent SQL that creates the roles and their grants",
    )
    roles.add_argument(
        "--prefix",
        default="workerpool",
        help="role names PREFIX_owner, PREFIX_worker, PREFIX_reader (default %(default)s)",
    )
    roles.add_argument(
        "--schema",
        default=None,
        help="the schema of workerpool's tables (default: $WORKERPOOL_SCHEMA, else public)",
    )
