"""`workerpool job show ID`: one job's whole story (``--json`` for scripts); `workerpool rerun
ID [--from-step NAME]`: a job that ended runs again (``pool.rerun``)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from ..model import exitcodes
from .helptext import add_app_option, add_command
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


def cmd_rerun(args: argparse.Namespace) -> int:
    pool = pool_for(args)
    try:
        dropped = pool.rerun(args.id, args.from_step)
    finally:
        pool.dispose()
    if args.json:
        print(json.dumps({"job": args.id, "from_step": args.from_step, "dropped": dropped}))
    else:
        start = f"from step {args.from_step!r}" if args.from_step else "from its first line"
        print(f"job {args.id} runs again {start} (steps dropped: {', '.join(dropped) or 'none'})")
    return exitcodes.OK


def add_rerun_parser(sub: Any) -> None:
    rerun = add_command(
        sub,
        "rerun",
        help="run a done, dead or cancelled job again, keeping its steps before --from-step",
    )
    rerun.add_argument("id", type=int, metavar="ID")
    rerun.add_argument(
        "--from-step",
        default=None,
        metavar="NAME",
        help="keep the steps recorded before this one, drop it and the later ones"
        " (default: keep none)",
    )
    add_app_option(rerun, "the app (default: a pool on $WORKERPOOL_DATABASE_URL)")
    rerun.add_argument("--json", action="store_true")


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
    add_app_option(
        show,
        "the app: a typed task's payload is shown as its arguments by name"
        " (default: a pool on $WORKERPOOL_DATABASE_URL)",
    )
    show.add_argument("--json", action="store_true", help="stable JSON for scripts")
