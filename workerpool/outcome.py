"""From a handler's result to the state change it implies (DESIGN §4), and recording it."""

from __future__ import annotations

import random
import traceback
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection

from . import queries
from .errors import Permanent, RetryLater, WorkerpoolError
from .pool import TaskSpec

MESSAGE_LIMIT = 2000
TRACEBACK_LIMIT = 8000

DONE, FAIL, PERMANENT, SNOOZE, RELEASE = "done", "fail", "permanent", "snooze", "release"
#: A prefetched job given back before its handler started: nothing ran, nothing to record.
UNSTARTED = "unstarted"


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
    entry = {"attempt": attempt, "worker": worker,
             "type": safe_text(kind or type(exc).__name__, MESSAGE_LIMIT)}
    entry["message"] = safe_text(exc, MESSAGE_LIMIT) if exc is not None else ""
    if exc is not None and exc.__traceback__ is not None:
        entry["traceback"] = format_traceback(exc)
    return entry


def worker_lost(worker: str) -> dict:
    """The ``errors`` entry of a job whose process died holding its claim (type ``WorkerLost``)."""
    return {"type": "WorkerLost", "worker": worker,
            "message": f"worker {worker} died while running this job"}


def format_traceback(exc: BaseException) -> str:
    """The traceback as text, at most TRACEBACK_LIMIT characters, frames kept readable.

    Each chunk (a frame, the final message line) is capped first, so a huge exception message
    cannot push the frames out; then the innermost part is kept (where the error happened).
    """
    try:
        chunks = traceback.format_exception(type(exc), exc, exc.__traceback__)
    except Exception as failure:  # a broken exception object: say so, do not fail the outcome
        return f"<traceback unavailable: {type(failure).__name__}>"
    text = "".join(safe_text(chunk, MESSAGE_LIMIT) for chunk in chunks)
    if len(text) <= TRACEBACK_LIMIT:
        return text
    head = chunks[0] if chunks and chunks[0].startswith("Traceback") else ""
    marker = "  [... earlier frames cut ...]\n"
    return head + marker + text[-(TRACEBACK_LIMIT - len(head) - len(marker)):]


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


def timed_out(spec: TaskSpec, lease: queries.Lease, stack: str = "", rng=random) -> Outcome:
    """The attempt overran ``spec.timeout``: a failure like any other (retried per policy).

    ``stack`` is where the handler was when its time ran out, stored as the entry's traceback.
    """
    exc = TimeoutError(f"task {spec.name} exceeded its timeout of {spec.timeout:g}s")
    entry = error_entry(exc, attempt=lease.attempt, worker=lease.worker)
    if stack:
        entry["traceback"] = safe_text(stack[-TRACEBACK_LIMIT:], TRACEBACK_LIMIT)  # innermost
    return Outcome(FAIL, entry, delay=spec.backoff.delay(lease.attempt, rng))


class UpcastError(WorkerpoolError):
    """An upcaster could not turn a stored payload into the task's current shape."""


def upcast(spec: TaskSpec, payload: dict[str, Any], version: int) -> dict[str, Any]:
    """``payload`` written at ``version``, brought to ``spec.version`` one upcaster at a time.

    ``spec.upcasters[n]`` turns a version-n payload into a version-(n+1) one; missing steps
    leave the payload as it is. A step that raises or returns something other than a dict
    raises UpcastError naming the task and the step (the attempt then fails and is retried).
    """
    for step in range(version, spec.version):
        upcaster = spec.upcasters.get(step)
        if upcaster is None:
            continue
        where = f"task {spec.name}: upcaster {step}->{step + 1}"
        try:
            payload = upcaster(payload)
        except Exception as exc:
            raise UpcastError(f"{where} raised {type(exc).__name__}: "
                              f"{safe_text(exc, MESSAGE_LIMIT)}") from exc
        if not isinstance(payload, dict):
            raise UpcastError(f"{where} returned {type(payload).__name__}, not a dict")
    return payload


def interrupted(lease: queries.Lease, reason: str) -> Outcome:
    """A drain stopped this attempt: give it back (attempt refunded, checkpoint kept)."""
    entry = {"attempt": lease.attempt, "worker": lease.worker, "type": "Interrupted"}
    entry["message"] = reason
    return Outcome(RELEASE, entry)


def record(conn: Connection, lease: queries.Lease, outcome: Outcome) -> str | None:
    """Write one outcome, fenced on the lease. Returns the job's new state, None if lease lost."""
    if outcome.kind == DONE:
        done = queries.complete(conn, lease.worker, [(lease.job_id, lease.attempt)])
        return "done" if done else None
    if outcome.kind == FAIL:
        return queries.fail(conn, lease, outcome.error, outcome.delay)
    if outcome.kind == PERMANENT:
        return "dead" if queries.mark_permanent(conn, lease, outcome.error) else None
    if outcome.kind == SNOOZE:
        return "pending" if queries.snooze(conn, lease, outcome.delay) else None
    if outcome.kind == RELEASE:
        return "pending" if queries.give_back(conn, lease, outcome.error) else None
    if outcome.kind == UNSTARTED:
        return "pending" if queries.return_unstarted(conn, lease.worker, [(lease.job_id, lease.attempt)]) \
            else None
    raise ValueError(f"unknown outcome {outcome.kind!r}")


def record_many(
    conn: Connection, worker: str, results: Sequence[tuple[queries.Lease, Outcome]]
) -> dict[int, str | None]:
    """Write a batch of outcomes: every ``done`` in one statement, every ``unstarted`` in one,
    the rest one by one."""
    states: dict[int, str | None] = {}
    for kind, write, state in ((DONE, queries.complete, "done"),
                               (UNSTARTED, queries.return_unstarted, "pending")):
        leases = [(lease.job_id, lease.attempt) for lease, outcome in results
                  if outcome.kind == kind]
        if leases:
            applied = write(conn, worker, leases)
            states.update((job_id, state if job_id in applied else None) for job_id, _ in leases)
    for lease, outcome in results:
        if outcome.kind not in (DONE, UNSTARTED):
            states[lease.job_id] = record(conn, lease, outcome)
    return states
