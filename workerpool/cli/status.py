"""`workerpool status`: the queues (counts, oldest due, dead), crons and workers; ``--job ID``:
why one job is not running, then its steps, tags, progress and logs; ``--tag``: the jobs
carrying tags, by queue and state (``--json`` for scripts)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from ..model import exitcodes
from .helptext import add_app_option, add_command
from .target import CliError, existing_database, pool_for


def cmd_status(args: argparse.Namespace) -> int:
    from ..model.validation import check_tag_filter
    from ..ops import job_steps, job_story, job_view, status, why

    tags = check_tag_filter(args.tag)
    if tags and args.job is not None:
        raise CliError("give --job or --tag, not both")
    pool = existing_database(pool_for(args), "status")
    if args.job is not None:
        with pool.engines.replica_errors(), pool.read_engine.connect() as conn:
            answer = why.explain(conn, args.job, why.app_tasks(pool) if args.app else None)
            logs = job_view.attempt_logs(conn, args.job)
        text = why.line(answer)
        steps = job_steps.steps_json(answer.job.steps, answer.facts.now)
        registry = pool.registry if args.app else None  # a typed job's arguments by name
        arguments = job_story.arguments(registry, answer.job.task, answer.job.payload)
        print(
            json.dumps(
                {
                    "job": args.job,
                    "why": text,
                    "reasons": [{"code": r.code, "text": r.text} for r in answer.reasons],
                    "steps": steps,
                    "arguments": arguments,
                }
                | job_view.job_json(answer.job, logs),
                default=str,
            )
            if args.json
            else text
        )
        if arguments and not args.json:
            print("\n".join(job_story.render_arguments(arguments)))
        if steps and not args.json:
            print("STEPS\n" + job_steps.render_steps(steps))
        extra = job_view.render_job(answer.job, logs)
        if extra and not args.json:
            print(extra)
        return exitcodes.OK
    if tags:
        with pool.engine.connect() as conn:
            tagged = job_view.tagged(conn, tags)
        print(
            json.dumps(tagged, indent=2) if args.json else job_view.render_tagged(tagged),
            end="\n" if args.json else "",
        )
        return exitcodes.OK
    known = {q: pool.registry.task_versions(q) for q in pool.queues} if args.app else None
    with pool.engines.replica_errors():
        data = status.collect(pool.read_engine, known)
    if args.json:
        print(json.dumps(data, indent=2))
    else:
        print(status.render(data), end="")
    return exitcodes.OK


def add_parser(sub: Any) -> None:
    status = add_command(sub, "status", help="queues (counts, oldest due, dead), crons, workers")
    status.add_argument("--json", action="store_true", help="stable JSON for scripts")
    add_app_option(status, "judge runnable rows by this app's tasks instead of live workers'")
    status.add_argument(
        "--job",
        type=int,
        default=None,
        metavar="ID",
        help="one line: why this job is not running (a limit, a pause, no"
        " worker, ...); then its steps, tags, progress and logs",
    )
    status.add_argument(
        "--tag",
        action="append",
        default=None,
        metavar="TAG",
        help="count the jobs carrying this tag by queue and state (repeatable: every one of them)",
    )
