"""`workerpool enqueue`: one job from the command line, with the options of ``pool.enqueue``.

Each option is checked by its command-line name before the pool is loaded, and the pool checks
the rest (a ``--concurrency-key`` for a task without per-key limits, ``--unique`` without
``--key``) before anything is written: a refusal is one line and a non-zero exit.
"""

from __future__ import annotations

import argparse
import json
import math
from typing import Any

from ..model import exitcodes
from ..model.limits import ON_CONFLICT, UNIQUE_SCOPES
from ..model.validation import check_tags
from .helptext import add_command
from .target import CliError, load_pool


def cmd_enqueue(args: argparse.Namespace) -> int:
    try:
        payload = json.loads(args.payload, parse_constant=reject_constant)
    except ValueError as exc:
        raise CliError(f"--payload is not valid JSON: {exc}") from None
    options = _options(args, CliError)
    job_id = load_pool(args.app).enqueue(args.task, payload, **options)
    print(job_id)
    return exitcodes.OK


def _options(args: argparse.Namespace, error: type[Exception]) -> dict[str, Any]:
    """The keyword arguments of ``pool.enqueue``; a bad value raises ``error`` naming its
    option."""
    options: dict[str, Any] = {"key": args.key, "delay": args.delay}
    for name, value in (
        ("priority", args.priority),
        ("max_attempts", args.max_attempts),
        ("concurrency_key", args.concurrency_key),
    ):
        if value is not None:
            options[name] = value
    for flag, value, allowed in (
        ("--unique", args.unique, UNIQUE_SCOPES),
        ("--on-conflict", args.on_conflict, ON_CONFLICT),
    ):
        if value is not None and value not in allowed:
            raise error(f"{flag} must be one of {', '.join(allowed)}, got {value!r}")
    if args.unique is not None:
        options["unique"] = args.unique
    if args.on_conflict is not None:
        options["on_conflict"] = args.on_conflict
    if args.unique_for is not None:
        options["unique_for"] = _seconds("--unique-for", args.unique_for, error)
    if args.tag:
        try:
            options["tags"] = check_tags(args.tag, error)
        except error as exc:
            raise error(f"--tag: {exc}") from None
    return options


def _seconds(flag: str, text: str, error: type[Exception]) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise error(f"{flag} must be a number of seconds above 0, got {text!r}")
    return value


def reject_constant(name: str) -> Any:
    """``json.loads(parse_constant=...)``: NaN and Infinity are not JSON."""
    raise ValueError(f"{name} is not valid JSON")


def add_parser(sub: Any) -> None:
    enqueue = add_command(sub, "enqueue", help="enqueue one job")
    enqueue.add_argument("app", metavar="APP:POOL")
    enqueue.add_argument("task")
    enqueue.add_argument("--payload", default="{}", help="a JSON object")
    enqueue.add_argument("--key", default=None, help="idempotency key")
    enqueue.add_argument("--delay", type=float, default=None, help="seconds before it may run")
    enqueue.add_argument("--priority", type=int, default=None)
    enqueue.add_argument("--max-attempts", type=int, default=None)
    enqueue.add_argument(
        "--concurrency-key",
        default=None,
        metavar="KEY",
        help="the job's key for its task's per-key limits (docs/limits.md)",
    )
    enqueue.add_argument(
        "--unique",
        default=None,
        metavar="SCOPE",
        help=f"how long --key is held: {' or '.join(UNIQUE_SCOPES)} (default forever)",
    )
    enqueue.add_argument(
        "--unique-for",
        default=None,
        metavar="SECONDS",
        help="hold --key for this long after the enqueue",
    )
    enqueue.add_argument(
        "--on-conflict",
        default=None,
        metavar="WHAT",
        help=f"when --key is held: {', '.join(ON_CONFLICT)} (default keep)",
    )
    enqueue.add_argument(
        "--tag",
        action="append",
        default=None,
        metavar="TAG",
        help="a tag the job carries for life (repeat for several; `status --tag`, `cancel --tag`)",
    )
