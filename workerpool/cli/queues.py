"""`workerpool queue bound NAME N`, `queue unbound NAME`, `queue bounds`: the bounds every door
in (SQL, HTTP) honours, set without a deploy (docs/doors.md)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from ..model import exitcodes
from ..model.audit import current_actor
from ..model.specs import check_max_pending
from ..model.validation import check_name
from .helptext import add_app_option, add_command
from .target import CliError, pool_for


def cmd_queue(args: argparse.Namespace) -> int:
    from ..sql import doors

    verb = args.queue_command
    if verb != "bounds":
        _checked(args)
    pool = pool_for(args)
    try:
        with pool.engine.begin() as conn:
            if verb == "bound":
                doors.set_bound(conn, args.name, args.max_pending, current_actor())
                print(f"queue {args.name}: at most {args.max_pending} jobs waiting to run")
            elif verb == "unbound":
                had = doors.clear_bound(conn, args.name)
                print(f"queue {args.name}: {'unbounded' if had else 'had no bound'}")
            else:
                found = doors.read_bounds(conn)
                _print_bounds(found, args.json)
    finally:
        pool.dispose()
    return exitcodes.OK


def _checked(args: argparse.Namespace) -> None:
    """Bad input refused before anything is written, with one line."""
    from ..model.errors import ConfigError

    try:
        check_name("queue", args.name)
        if args.queue_command == "bound":
            check_max_pending("max_pending", args.max_pending)
    except ConfigError as exc:
        raise CliError(str(exc)) from None


def _print_bounds(found: dict[str, int], as_json: bool) -> None:
    if as_json:
        print(json.dumps(found, indent=2, sort_keys=True))
    elif not found:
        print("no bounded queue")
    for queue, max_pending in sorted(found.items()):
        if not as_json:
            print(f"{queue}\t{max_pending}")


def _count(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a whole number of jobs, got {text!r}") from None


def add_parser(sub: Any) -> None:
    queue = add_command(sub, "queue", help="queue bounds: how many jobs may wait to run")
    verbs = queue.add_subparsers(dest="queue_command", required=True)
    bound = add_command(
        verbs,
        "queue bound",
        help="refuse enqueues (QueueFull, HTTP 429, a SQL error) past N jobs waiting to run",
    )
    bound.add_argument("name", metavar="NAME")
    bound.add_argument("max_pending", metavar="N", type=_count)
    unbound = add_command(verbs, "queue unbound", help="remove a queue's bound")
    unbound.add_argument("name", metavar="NAME")
    listed = add_command(verbs, "queue bounds", help="every bounded queue and its bound")
    listed.add_argument("--json", action="store_true", help="stable JSON for scripts")
    for parser in (bound, unbound, listed):
        add_app_option(parser, "the app's database")
