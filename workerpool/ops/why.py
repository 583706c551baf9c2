"""Why is this job not running? Plain-language reasons read from the facts around one job.

:func:`reasons` runs every check in :data:`CHECKS` over a :class:`Facts` and returns what each
found, most important first. A check is a function ``Facts -> Reason | None``; a new cause of
waiting (a concurrency or rate limit, say) is one more function appended to ``CHECKS``, so every
page and command that explains a job explains the new cause too.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ..model.states import DUE_STATES, JobState

#: A worker seen within this many seconds is live (as in ``workerpool status``).
LIVE_WORKER_WINDOW = 60.0


@dataclass(frozen=True)
class Reason:
    code: str  # stable, for tests and styling: "paused", "scheduled", "no_worker", ...
    text: str  # one sentence for a person


@dataclass(frozen=True)
class Facts:
    """What the checks read: the job's row, the database clock, its queue's pause row, and the
    registered workers (``age`` in seconds since each was seen)."""

    job: Any  # a workerpool_jobs row
    now: datetime
    paused: Any | None = None  # the workerpool_queues row, or None
    workers: Sequence[Any] = field(default_factory=tuple)
    known: Mapping[str, int] | None = None  # the app's tasks → versions, if an app was given
    limit: str | None = None  # the limit holding it back (limit_status.holding_limit), if any

    @property
    def live_workers(self) -> list[Any]:
        return [w for w in self.workers
                if w.queue == self.job.queue and float(w.age) <= LIVE_WORKER_WINDOW]


def _age(seconds: float) -> str:
    from .status import age

    return age(max(0.0, seconds))


def finished(facts: Facts) -> Reason | None:
    job = facts.job
    if job.state in (JobState.PENDING, JobState.FAILED, JobState.PROCESSING):
        return None
    if job.state == JobState.DEAD:
        return Reason("finished", f"it is dead ({job.dead_reason}): it runs again only if it is"
                                  " retried")
    return Reason("finished", f"it is {job.state}: it will not run again")


def running(facts: Facts) -> Reason | None:
    job = facts.job
    if job.state != JobState.PROCESSING:
        return None
    since = _age((facts.now - job.claimed_at).total_seconds()) if job.claimed_at else "?"
    return Reason("running", f"it is running: the lease is held by worker {job.claimed_by}"
                             f" since {since} ago (attempt {job.attempts} of {job.max_attempts})")


def orphaned(facts: Facts) -> Reason | None:
    """The lease's holder is gone or silent: recovery returns the job once the lease is stale."""
    job = facts.job
    if job.state != JobState.PROCESSING:
        return None
    holder = next((w for w in facts.workers if getattr(w, "id", None) == job.claimed_by), None)
    if holder is not None and float(holder.age) <= LIVE_WORKER_WINDOW:
        return None
    seen = "is not registered" if holder is None else f"was last seen {_age(holder.age)} ago"
    return Reason("orphaned", f"its worker {job.claimed_by} {seen}: the job is recovered when"
                              " its lease goes stale (stale_after) or its supervisor reaps it")


def scheduled(facts: Facts) -> Reason | None:
    job = facts.job
    if job.state not in DUE_STATES or job.run_at <= facts.now:
        return None
    wait = _age((job.run_at - facts.now).total_seconds())
    why = "its retry after a failed attempt" if job.state == JobState.FAILED else "its run_at"
    return Reason("scheduled", f"{why} is in the future: due in {wait}"
                               f" ({job.run_at.isoformat(timespec='seconds')})")


def paused(facts: Facts) -> Reason | None:
    row = facts.paused
    if facts.job.state not in DUE_STATES or row is None or not row.paused:
        return None
    since = f" since {row.paused_at.isoformat(timespec='seconds')}" if row.paused_at else ""
    by = f" by {row.paused_by}" if row.paused_by else ""
    return Reason("paused", f"queue {facts.job.queue} is paused{since}{by}: nothing of it is"
                            " claimed until it is resumed")


def no_worker(facts: Facts) -> Reason | None:
    """No live worker of the queue, or none that knows the task or its payload version."""
    job = facts.job
    if job.state not in DUE_STATES:
        return None
    live = facts.live_workers
    if facts.known is None and not live:
        return Reason("no_worker", f"no live worker serves queue {job.queue}")
    versions = [int(v) for v in ([facts.known.get(job.task)] if facts.known is not None
                                 else [(w.tasks or {}).get(job.task) for w in live])
                if v is not None]
    if not versions:
        text = (f"the app has no task {job.task}" if facts.known is not None
                else f"no live worker of queue {job.queue} knows task {job.task}")
        return Reason("unknown_task", text)
    if job.payload_version > max(versions):
        return Reason("payload_version", f"its payload version {job.payload_version} is newer"
                      f" than any worker knows (up to {max(versions)}): it waits for a deploy")
    return None


def exhausted(facts: Facts) -> Reason | None:
    job = facts.job
    if job.state not in DUE_STATES or job.attempts < job.max_attempts:
        return None
    return Reason("exhausted", f"all {job.max_attempts} attempts are spent: no claim takes it")


def limited(facts: Facts) -> Reason | None:
    if facts.job.state not in DUE_STATES or facts.limit is None:
        return None
    return Reason("limit", f"it is held by the {facts.limit}: it starts when the limit lets it,"
                           " without spending an attempt")


Check = Callable[[Facts], Reason | None]
#: Every check, in the order their reasons are shown. Append to add a cause of waiting.
CHECKS: list[Check] = [finished, running, orphaned, paused, scheduled, no_worker, exhausted,
                       limited]


def reasons(facts: Facts, checks: Sequence[Check] | None = None) -> list[Reason]:
    """What keeps this job from running now; empty when nothing does (it waits for a slot)."""
    found = (check(facts) for check in (CHECKS if checks is None else checks))
    return [reason for reason in found if reason is not None]
