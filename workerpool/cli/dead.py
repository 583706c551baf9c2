"""`workerpool dead list|retry|purge`: the dead-letter queue, filtered by queue, task, reason,
tag and age; a retry replays (attempts reset, history kept), a purge deletes."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from ..model import exitcodes
from .helptext import add_app_option, add_as, add_command
from .target import CliError, pool_for


def _dead_filter(args: argparse.Namespace, ids: Sequence[int] | None = None) -> Any:
    from ..ops.dead import DeadFilter, parse_since

    since = parse_since(args.since) if getattr(args, "since", None) else None
    return DeadFilter(
        queue=args.queue,
        task=args.task,
        reason=args.reason,
        since=since,
        ids=tuple(ids) if ids else None,
        tags=args.tag,
    )


def cmd_dead(args: argparse.Namespace) -> int:
    return {"list": dead_list, "retry": dead_retry, "purge": dead_purge}[args.dead_command](args)


def dead_list(args: argparse.Namespace) -> int:
    from ..ops import dead

    if args.limit < 0:
        raise CliError(f"--limit must be >= 0 (0 = all), got {args.limit}")
    page = dead.list_dead(pool_for(args), _dead_filter(args), limit=args.limit or None)
    if args.json:
        print(json.dumps({"total": page.total, "jobs": [j.to_json() for j in page.jobs]}, indent=2))
        return exitcodes.OK
    from ..ops.status import table

    rows = [
        [
            j.id,
            j.queue,
            j.task,
            j.reason,
            f"{j.attempts}/{j.max_attempts}",
            j.finished_at.isoformat(timespec="seconds") if j.finished_at else None,
            _error_line(j.last_error),
        ]
        for j in page.jobs
    ]
    headers = ["ID", "QUEUE", "TASK", "REASON", "ATTEMPTS", "DIED", "LAST ERROR"]
    print(table(headers, rows, empty="(no dead jobs match)"))
    print(f"{len(page.jobs)} of {page.total} matching dead jobs shown")
    return exitcodes.OK


def _error_line(error: Any) -> str:
    if not error:
        return "-"
    text = f"{error.get('type', '?')}: {error.get('message', '')}".strip().splitlines()
    line = text[0] if text else ""
    return line if len(line) <= 80 else line[:77] + "..."


def dead_retry(args: argparse.Namespace) -> int:
    from ..ops import dead
    from .progress import ProgressBar

    if bool(args.ids) == bool(args.all):
        raise CliError("give job IDS or --all (with optional filters), not both and not neither")
    bar = ProgressBar("replaying")
    try:
        result = dead.retry(
            pool_for(args),
            args.ids or None,
            all_matching=args.all,
            filters=_dead_filter(args),
            dry_run=args.dry_run,
            progress=bar,
        )
    finally:
        bar.close()
    if result.not_dead:
        print(
            f"workerpool dead retry: {len(result.not_dead)} id(s) are not dead jobs, left alone: "
            f"{_ids_text(result.not_dead)}",
            file=sys.stderr,
        )
    if args.json:
        print(
            json.dumps(
                {
                    "dry_run": result.dry_run,
                    "count": len(result.ids),
                    "ids": result.ids,
                    "by_task": result.by_task,
                    "not_dead": result.not_dead,
                },
                indent=2,
            )
        )
        return exitcodes.OK
    verb = "dry run: would replay" if result.dry_run else "replayed"
    tasks = ", ".join(f"{t}: {n}" for t, n in sorted(result.by_task.items())) or "none"
    print(f"{verb} {plural(len(result.ids), 'dead job')} ({tasks})")
    if result.ids:
        print(f"ids: {_ids_text(result.ids)}")
    return exitcodes.OK


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _ids_text(ids: Sequence[int], limit: int = 50) -> str:
    shown = " ".join(str(i) for i in ids[:limit])
    return shown + (f" ... (+{len(ids) - limit} more)" if len(ids) > limit else "")


def dead_purge(args: argparse.Namespace) -> int:
    from ..ops import dead
    from .progress import ProgressBar

    older_than = dead.parse_duration(args.older_than)
    bar = ProgressBar("purging")
    try:
        result = dead.purge(
            pool_for(args), older_than, _dead_filter(args), dry_run=args.dry_run, progress=bar
        )
    finally:
        bar.close()
    if args.json:
        print(json.dumps({"dry_run": result.dry_run, "count": result.count}))
    else:
        verb = "dry run: would purge" if result.dry_run else "purged"
        print(f"{verb} {plural(result.count, 'dead job')} older than {args.older_than}")
    return exitcodes.OK


def add_parser(sub: Any) -> None:
    dead = add_command(sub, "dead", help="the dead-letter queue: list, retry (replay), purge")
    verbs = dead.add_subparsers(dest="dead_command", required=True)

    listing = add_command(verbs, "dead list", help="list dead jobs, most recent first")
    _add_filters(listing)
    listing.add_argument("--limit", type=int, default=100, help="rows to show (0 = all)")
    listing.add_argument("--json", action="store_true")

    retry = add_command(verbs, "dead retry", help="replay dead jobs: attempts reset, history kept")
    retry.add_argument("ids", nargs="*", type=int, metavar="ID")
    retry.add_argument("--all", action="store_true", help="every dead job matching the filters")
    _add_filters(retry)
    retry.add_argument("--dry-run", action="store_true", help="show what would be replayed")
    add_app_option(retry, "check tasks against this app (default: what live workers run)")
    retry.add_argument("--json", action="store_true")
    add_as(retry)

    purge = add_command(verbs, "dead purge", help="delete dead jobs that died long enough ago")
    purge.add_argument("--older-than", required=True, metavar="AGE", help="e.g. 30d, 12h, 3600")
    _add_filters(purge, since=False)
    purge.add_argument("--dry-run", action="store_true", help="count what would be deleted")
    purge.add_argument("--json", action="store_true")
    add_as(purge)


def _add_filters(parser: argparse.ArgumentParser, since: bool = True) -> None:
    parser.add_argument("--queue", default=None)
    parser.add_argument("--task", default=None)
    parser.add_argument("--reason", default=None, help="exhausted, permanent or abandoned")
    parser.add_argument(
        "--tag",
        action="append",
        default=None,
        metavar="TAG",
        help="only jobs carrying this tag (repeatable: every one of them)",
    )
    if since:
        parser.add_argument(
            "--since",
            default=None,
            help="died within this duration (2h, 7d) or after this ISO time",
        )
