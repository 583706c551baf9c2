"""Every exception workerpool raises on purpose. One class per cause; context in the message."""

from __future__ import annotations

from typing import Any

#: The longest delay anything may ask for (ten years, in seconds): a snooze, a backoff cap or an
#: enqueue delay beyond it is refused, so a run_at is always a valid PostgreSQL timestamp.
MAX_DELAY = 10 * 365.25 * 86400


def first_line(exc: BaseException) -> str:
    """The first line of ``str(exc)`` for a one-line report (never raises)."""
    try:
        lines = str(exc).strip().splitlines()
    except Exception:
        return type(exc).__name__
    return lines[0] if lines else type(exc).__name__


class WorkerpoolError(Exception):
    """workerpool error."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (self.__doc__ or "").strip())


class ConfigError(WorkerpoolError, ValueError):
    """Invalid configuration."""


class NotMigrated(ConfigError):
    """The database lacks workerpool's tables, or holds them at an older revision than this
    code: run ``workerpool migrate``."""


class ReplicaUnavailable(WorkerpoolError):
    """The read replica (``read_url``) failed; reads never fall back to the primary."""


class InvalidSchema(ConfigError):
    """The schema name is not a plain lower-case PostgreSQL identifier."""


class InvalidJob(WorkerpoolError, ValueError):
    """Invalid job argument (key, run_at, delay, priority, max_attempts, queue)."""


class PayloadError(InvalidJob):
    """Payload is not a JSON object made of JSON values."""


class PayloadTooLarge(PayloadError):
    """Payload is larger than the size limit."""

    def __init__(self, size: int, limit: int, what: str = "payload") -> None:
        self.size, self.limit = size, limit
        super().__init__(f"{what} is {size} bytes, over the limit of {limit} bytes")


class UnknownTask(WorkerpoolError, LookupError):
    """No task is registered under this name."""


class UnknownQueue(ConfigError, LookupError):
    """No queue is declared under this name."""


class UnknownJob(WorkerpoolError, LookupError):
    """No job has this id."""


class UnknownBatch(WorkerpoolError, LookupError):
    """No batch has this id."""


class JobFailed(WorkerpoolError):
    """The job ended ``dead``: ``reason`` (exhausted, permanent, abandoned) and ``errors``, its
    error history (one entry per failed attempt), say why."""

    def __init__(self, job_id: int, reason: str | None, errors: list[Any]) -> None:
        self.job_id, self.reason, self.errors = job_id, reason, errors
        last = errors[-1] if errors else {}
        cause = f": {last.get('type', '')}: {last.get('message', '')}" if last else ""
        super().__init__(f"job {job_id} is dead ({reason}){cause}")


class JobCancelled(WorkerpoolError):
    """The job was cancelled; ``errors`` holds the cancel request (who, why, when)."""

    def __init__(self, job_id: int, errors: list[Any]) -> None:
        self.job_id, self.errors = job_id, errors
        super().__init__(f"job {job_id} was cancelled")


class ResultTimeout(WorkerpoolError, TimeoutError):
    """The job had not finished when the wait for its result ran out (it may still finish)."""


class BatchClosed(WorkerpoolError):
    """This batch's ``with`` block is over: open a new batch (or reopen it by its key)."""


class BatchFinished(WorkerpoolError):
    """This batch finished (its callbacks fired): it takes no new member."""


class InvalidDependency(InvalidJob):
    """An ``after=`` or ``sequence=`` that cannot hold: a parent that does not exist (or was
    pruned), that already ended dead or cancelled, an id that is not an integer, a sequence name
    that is not a non-empty string. Nothing was written."""


class WorkflowCycle(InvalidJob):
    """A workflow's steps wait for each other in a cycle; nothing was written."""


class IdempotencyConflict(WorkerpoolError):
    """A job with this key exists with a different task or payload."""


class QueueFull(WorkerpoolError):
    """The queue holds its ``max_pending`` jobs waiting to run; nothing was written."""

    def __init__(self, message: str, queue: str | None = None) -> None:
        self.queue = queue
        super().__init__(message)


class DuplicateJob(WorkerpoolError):
    """A job holding this key exists (``on_conflict="error"``); nothing was written."""

    def __init__(self, key: str, job_id: int, state: str) -> None:
        self.key, self.job_id, self.state = key, job_id, state
        super().__init__(f"key {key!r} is held by job {job_id} ({state})")


class DatabaseNotConfigured(WorkerpoolError):
    """No database URL is set and the embedded PostgreSQL (pgserver) is not installed."""


class Permanent(Exception):
    """Raised by a handler: this job can never succeed; dead-letter it now, no retries."""


class InvalidArguments(InvalidJob):
    """A typed task's arguments do not fit its handler's signature (one is missing, unknown,
    or not of its type); the message names the argument. Nothing was written."""


class ArgumentsRefused(Permanent, WorkerpoolError):
    """A job's stored payload no longer fits its typed handler's signature (written by an
    older version, the command line or SQL): the attempt fails as permanent, the job goes dead
    with this message instead of being retried."""


class RetryLater(Exception):
    """Raised by a handler: run this job again after `delay` seconds without spending an attempt."""

    def __init__(self, delay: float = 60.0, reason: str = "") -> None:
        if (
            isinstance(delay, bool)
            or not isinstance(delay, int | float)
            or not (0 <= delay <= MAX_DELAY)
        ):
            raise InvalidJob(
                f"RetryLater delay must be a number of seconds within 0..{MAX_DELAY:.0f},"
                f" got {delay!r}"
            )
        self.delay = float(delay)
        super().__init__(reason or f"retry in {self.delay:g}s")


class Cancelled(Exception):
    """This job was cancelled by an operator; raised by ``job.checkpoint()`` once it is asked to
    stop. Whatever the handler then returns or raises, the job ends ``cancelled``."""


class HaltSupervisor(BaseException):
    """Stop the supervisor now. BaseException so that job code cannot swallow it."""


class LeaseLost(WorkerpoolError):
    """This process no longer owns the job (its lease went stale and another process claimed it)."""


class CompletionRefused(WorkerpoolError):
    """``job.complete_in`` refused to end the job in the caller's transaction; nothing was
    written (called twice, after a cancel, outside a running handler, on a connection that is
    not in a transaction or not on the pool's database, or the lease is gone)."""


class CompletionLeaseLost(CompletionRefused, LeaseLost):
    """``job.complete_in``: this process no longer owns the job, so nothing was written and the
    caller's transaction must not commit its effect (let the exception leave the block)."""


class CrashPointFailure(WorkerpoolError, AssertionError):
    """``testing.crash_points``: a handler crashed at a durable point and the check failed (the
    message names the point and the failure)."""


class StepNameReused(WorkerpoolError):
    """A step name was used twice in one run of a handler: each step needs its own name, or
    the second would replay the first one's stored value."""


class InvalidStep(InvalidJob):
    """Invalid step: its name (a non-empty string of at most 200 characters), a sleep's
    seconds or a wait's timeout."""


class InvalidProgress(InvalidJob):
    """``job.progress`` got something else than a fraction within 0..1 or a small JSON object."""


class InvalidSignal(InvalidJob):
    """Invalid signal name (a non-empty string of at most 200 characters)."""


class SignalExists(WorkerpoolError):
    """A signal of this name was already sent: the first one stands (waiters may have read it)
    and this one was not kept. ``payload`` and ``sent_at`` are the kept signal's."""

    def __init__(self, name: str, payload: Any, sent_at: Any) -> None:
        self.name, self.payload, self.sent_at = name, payload, sent_at
        super().__init__(f"signal {name!r} was already sent at {sent_at}; the first one stands")


# -- dead-letter queue ----------------------------------------------------------------------------


class InvalidFilter(WorkerpoolError, ValueError):
    """Invalid dead-letter filter (queue, task, reason, since, ids or age)."""


class WrongState(WorkerpoolError):
    """An action named a job whose state does not allow it (cancel a finished job, replay one
    that is not dead); nothing was changed."""


class JobLive(WrongState):
    """A rerun named a job that is still live (pending, processing, failed or waiting): only a
    job that ended (done, dead or cancelled) runs again; nothing was changed."""


class UnknownStep(InvalidStep):
    """A rerun named a step the job never recorded; the message lists the ones it did."""


class ReplayRefused(WorkerpoolError):
    """These dead jobs cannot be replayed (their task is no longer registered); \
nothing was changed."""


# -- cron and audit -------------------------------------------------------------------------------


class UnknownCron(WorkerpoolError, LookupError):
    """No cron schedule of that name (declared in the app, or seen by a scheduler)."""


class CronDeclared(WorkerpoolError):
    """The cron schedule is declared in code (``@pool.cron``): it changes with a deploy, not
    with ``cron_add`` or ``cron_remove``; nothing was written."""


class InvalidActor(WorkerpoolError, ValueError):
    """An actor's name for the audit trail is empty, too long or not printable."""


#: The errors an application catches or raises: exported as ``workerpool.<name>``. The others
#: here are raised to an operator (the CLI, the dashboard) or inside workerpool.
__all__ = [
    "ArgumentsRefused",
    "BatchClosed",
    "BatchFinished",
    "Cancelled",
    "CompletionLeaseLost",
    "CompletionRefused",
    "ConfigError",
    "CrashPointFailure",
    "DatabaseNotConfigured",
    "DuplicateJob",
    "IdempotencyConflict",
    "InvalidArguments",
    "InvalidJob",
    "InvalidProgress",
    "InvalidSchema",
    "InvalidSignal",
    "InvalidStep",
    "JobCancelled",
    "JobFailed",
    "JobLive",
    "LeaseLost",
    "PayloadError",
    "PayloadTooLarge",
    "Permanent",
    "QueueFull",
    "ResultTimeout",
    "RetryLater",
    "SignalExists",
    "StepNameReused",
    "UnknownBatch",
    "UnknownJob",
    "UnknownQueue",
    "UnknownStep",
    "UnknownTask",
    "WorkerpoolError",
    "WrongState",
]
