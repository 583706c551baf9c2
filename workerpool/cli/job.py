"""`workerpool job show ID`: one job's whole story (``--json`` for scripts)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from ..model import exitcodes
from .helptext import add_command
from .target import pool_for


def cmd_job(args: argparse.Namespace) -> int:
    from ..ops import job_story

    pool = pool_for(args)
    try:
        with pool.engines.replica_errors(), pool.read_engine.connect() as conn:
            data = job_story.story(conn, args.id, pool.registry if args.app else None)
    finally:
        pool.dispose()
    print(
        json.dumps(data, indent=2, default=str) if args.json else job_story.render(data),
        end="\n" if args.json else "",
    )
    return exitcodes.OK


def add_parser(sub: Any) -> None:
    job = add_command(sub, "job", help="one job: its state, attempts, errors, result, times")
    verbs = job.add_subparsers(dest="job_command", required=True)
    show = add_command(
        verbs,
        "job show",
        help="one job's story: each attempt's error with its"
        " worker, its result, steps, logs, and when it was enqueued, started and"
        " finished",
    )
    show.add_argument("id", type=int, metavar="ID")
    show.add_argument(
        "--app",
        default=None,
        metavar="APP:POOL",
        help="the app: a typed task's payload is shown as its arguments by name"
        " (default: a pool on $WORKERPOOL_DATABASE_URL)",
    )
    show.add_argument("--json", action="store_true", help="stable JSON for scripts")
