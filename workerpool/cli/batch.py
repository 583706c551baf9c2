"""`workerpool batch show ID`: one batch's progress, outcome and callback jobs (``--json`` for
scripts)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from ..model import exitcodes
from .helptext import add_command


def cmd_batch(args: argparse.Namespace) -> int:
    from ..client import WorkerPool
    from ..ops import batches

    pool = WorkerPool()
    try:
        status = pool.batch_status(args.id)
        with pool.engine.connect() as conn:
            data = batches.show(conn, status)
    finally:
        pool.dispose()
    print(
        json.dumps(data, indent=2) if args.json else batches.render(data),
        end="" if not args.json else "\n",
    )
    return exitcodes.OK


def add_parser(sub: Any) -> None:
    batch = add_command(sub, "batch", help="batches: a batch's progress, outcome and callbacks")
    verbs = batch.add_subparsers(dest="batch_command", required=True)
    show = add_command(verbs, "batch show", help="one batch: members by state, its callbacks")
    show.add_argument("id", type=int, metavar="ID")
    show.add_argument("--json", action="store_true", help="stable JSON for scripts")
