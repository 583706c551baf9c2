"""From a handler's result to the state change it implies (DESIGN §4), and recording it."""

from __future__ import annotations

import random
import traceback
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection

from . import queries
from .errors import Permanent, RetryLater
from .pool import TaskSpec

MESSAGE_LIMIT = 2000
TRACEBACK_LIMIT = 8000

DONE, FAIL, PERMANENT, SNOOZE, RELEASE = "done", "fail", "permanent", "snooze", "release"


@dataclass(frozen=True)
class Outcome:
    """What happened to one attempt, ready to be written."""

    kind: str
    error: dict[str, Any] = field(default_factory=dict)
    delay: float = 0.0


def safe_text(value: Any, limit: int) -> str:
    """``str(value)`` that never raises, is valid UTF-8 and at most ``limit`` characters."""
    try:
        text = value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
    except Exception as exc:  # a __str__ that raises
        text = f"<unprintable {type(value).__name__}: str() raised {type(exc).__name__}>"
    text = text.encode("utf-8", "replace").decode("utf-8").replace("\x00", "\\x00")
    if len(text) > limit:
        text = text[:limit] + f"… [{len(text) - limit} more characters]"
    return text


def error_entry(exc: BaseException | None, *, attempt: int, worker: str, kind: str = "") -> dict:
    """One entry of a job's ``errors`` history (``at`` is stamped by the database)."""
    entry = {"attempt": attempt, "worker": worker, "type": kind or type(exc).__name__}
    entry["message"] = safe_text(exc, MESSAGE_LIMIT) if exc is not None else ""
    if exc is not None and exc.__traceback__ is not None:
        text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        entry["traceback"] = safe_text(text[-TRACEBACK_LIMIT:], TRACEBACK_LIMIT)
    return entry


def classify(
    exc: BaseException | None, spec: TaskSpec, attempt: int, worker: str, rng=random
) -> Outcome:
    """The outcome of an attempt that returned (``exc is None``) or raised ``exc``."""
    if exc is None:
        return Outcome(DONE)
    if isinstance(exc, RetryLater):
        return Outcome(SNOOZE, delay=exc.delay)
    entry = error_entry(exc, attempt=attempt, worker=worker)
    if isinstance(exc, Permanent):
        return Outcome(PERMANENT, entry)
    return Outcome(FAIL, entry, delay=spec.backoff.delay(attempt, rng))


def interrupted(lease: queries.Lease, reason: str) -> Outcome:
    """A drain stopped this attempt: give it back (attempt refunded, checkpoint kept)."""
    entry = {"attempt": lease.attempt, "worker": lease.worker, "type": "Interrupted"}
    entry["message"] = reason
    return Outcome(RELEASE, entry)


def record(conn: Connection, lease: queries.Lease, outcome: Outcome) -> str | None:
    """Write one outcome, fenced on the lease. Returns the job's new state, None if lease lost."""
    if outcome.kind == DONE:
        return "done" if queries.complete(conn, lease.worker, [(lease.job_id, lease.attempt)]) else None
    if outcome.kind == FAIL:
        return queries.fail(conn, lease, outcome.error, outcome.delay)
    if outcome.kind == PERMANENT:
        return "dead" if queries.kill(conn, lease, outcome.error) else None
    if outcome.kind == SNOOZE:
        return "pending" if queries.snooze(conn, lease, outcome.delay) else None
    if outcome.kind == RELEASE:
        return "pending" if queries.release(conn, lease, outcome.error) else None
    raise ValueError(f"unknown outcome {outcome.kind!r}")


def record_many(
    conn: Connection, worker: str, results: Sequence[tuple[queries.Lease, Outcome]]
) -> dict[int, str | None]:
    """Write a batch of outcomes: every ``done`` in one statement, the rest one by one."""
    done = [(lease.job_id, lease.attempt) for lease, outcome in results if outcome.kind == DONE]
    applied = queries.complete(conn, worker, done)
    states: dict[int, str | None] = {job_id: "done" for job_id in applied}
    for job_id, _ in done:
        states.setdefault(job_id, None)
    for lease, outcome in results:
        if outcome.kind != DONE:
            states[lease.job_id] = record(conn, lease, outcome)
    return states
