"""From a handler's result to the outcome it implies (DESIGN §4); the worker writes it
(:mod:`workerpool.runtime.worker.outcomes`)."""

from __future__ import annotations

import random
import traceback
from dataclasses import dataclass, field
from typing import Any

from .errors import PayloadError, Permanent, RetryLater, WorkerpoolError
from .job import Lease
from .payload import DEFAULT_PAYLOAD_LIMIT, dumps
from .specs import TaskSpec
from .states import OutcomeKind
from .steps import SLEEP, Suspended, Suspension

MESSAGE_LIMIT = 2000
TRACEBACK_LIMIT = 8000


@dataclass(frozen=True)
class Outcome:
    """What happened to one attempt, ready to be written."""

    kind: OutcomeKind
    error: dict[str, Any] = field(default_factory=dict)
    delay: float = 0.0
    #: ``done`` only: the handler's return value as JSON text (None: it returned None).
    result: str | None = None
    #: A snooze or a wait that a step asked for (job.sleep, job.wait_for), written with it.
    suspension: Suspension | None = None
    #: ``committed`` only: what followed the completion in the handler's transaction (its
    #: batches finished), reported by the worker like its own outcomes' (``sql.settled``).
    followed: Any = None


def safe_text(value: Any, limit: int) -> str:
    """``str(value)`` that never raises, is valid UTF-8 and at most ``limit`` characters."""
    try:
        text = value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
    except Exception as exc:  # a __str__ that raises
        text = f"<unprintable {type(value).__name__}: str() raised {type(exc).__name__}>"
    text = storable(text)
    if len(text) > limit:
        text = text[:limit] + f"… [{len(text) - limit} more characters]"
    return text


def storable(text: str) -> str:
    """``text`` as PostgreSQL can store it, in a text column or a JSON string: a lone surrogate
    (not valid UTF-8) becomes ``?`` and a NUL (which neither may hold) ``\\x00``."""
    return text.encode("utf-8", "replace").decode("utf-8").replace("\x00", "\\x00")


def error_entry(exc: BaseException | None, *, attempt: int, worker: str, kind: str = "") -> dict:
    """One entry of a job's ``errors`` history (``at`` is stamped by the database)."""
    entry = {
        "attempt": attempt,
        "worker": worker,
        "type": safe_text(kind or type(exc).__name__, MESSAGE_LIMIT),
    }
    entry["message"] = safe_text(exc, MESSAGE_LIMIT) if exc is not None else ""
    if exc is not None:  # the importable path: "type" alone names no module
        entry["class"] = safe_text(
            f"{type(exc).__module__}.{type(exc).__qualname__}", MESSAGE_LIMIT
        )
    if exc is not None and exc.__traceback__ is not None:
        entry["traceback"] = format_traceback(exc)
    return entry


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
    return head + marker + text[-(TRACEBACK_LIMIT - len(head) - len(marker)) :]


def classify(
    exc: BaseException | None,
    spec: TaskSpec,
    attempt: int,
    worker: str,
    rng=random,
    *,
    result: Any = None,
    limit: int = DEFAULT_PAYLOAD_LIMIT,
) -> Outcome:
    """The outcome of an attempt that returned ``result`` (``exc is None``) or raised ``exc``.

    The result is checked like a payload (JSON, at most ``limit`` bytes); one that is refused
    fails the attempt with the reason (retried per policy) and nothing of it is written.
    """
    if exc is None:
        if result is None:
            return DONE
        try:
            return Outcome(
                OutcomeKind.DONE,
                result=dumps(result, limit=limit, what="result", object_only=False),
            )
        except PayloadError as refused:
            exc = refused
    if isinstance(exc, RetryLater):
        return Outcome(OutcomeKind.SNOOZE, delay=exc.delay)
    if isinstance(exc, Suspended):
        pause = exc.suspension
        kind = OutcomeKind.SNOOZE if pause.kind == SLEEP else OutcomeKind.WAIT
        return Outcome(kind, delay=pause.seconds or 0.0, suspension=pause)
    entry = error_entry(exc, attempt=attempt, worker=worker)
    if isinstance(exc, Permanent):
        return Outcome(OutcomeKind.PERMANENT, entry)
    return Outcome(OutcomeKind.FAIL, entry, delay=spec.backoff.delay(attempt, rng))


def timed_out(spec: TaskSpec, lease: Lease, stack: str = "", rng=random) -> Outcome:
    """The attempt overran ``spec.timeout``: a failure like any other (retried per policy).

    ``stack`` is where the handler was when its time ran out, stored as the entry's traceback.
    """
    exc = TimeoutError(f"task {spec.name} exceeded its timeout of {spec.timeout:g}s")
    entry = error_entry(exc, attempt=lease.attempt, worker=lease.worker)
    if stack:
        entry["traceback"] = safe_text(stack[-TRACEBACK_LIMIT:], TRACEBACK_LIMIT)  # innermost
    return Outcome(OutcomeKind.FAIL, entry, delay=spec.backoff.delay(lease.attempt, rng))


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
            raise UpcastError(
                f"{where} raised {type(exc).__name__}: {safe_text(exc, MESSAGE_LIMIT)}"
            ) from exc
        if not isinstance(payload, dict):
            raise UpcastError(f"{where} returned {type(payload).__name__}, not a dict")
    return payload


#: What a cancelled attempt comes to; the row's cancel request becomes its history entry.
CANCELLED = Outcome(OutcomeKind.CANCELLED)
#: A handler that returned None (most do): one object, not a frozen dataclass built per job.
DONE = Outcome(OutcomeKind.DONE)


def interrupted(lease: Lease, reason: str) -> Outcome:
    """A drain stopped this attempt: give it back (attempt refunded, checkpoint kept)."""
    entry = {"attempt": lease.attempt, "worker": lease.worker, "type": "Interrupted"}
    entry["message"] = reason
    return Outcome(OutcomeKind.INTERRUPTED, entry)
