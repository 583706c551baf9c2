"""Why is this job not running? The one answer ``workerpool status --job`` and the dashboard
give, read from the facts around one job.

:func:`explain` reads the facts (the job's row, its queue's pause row, the registered workers,
the limit holding it back, if any) and runs every check in :data:`CHECKS` over them;
:func:`reasons` returns what each found, most important first. A check is a function
``Facts -> Reason | None``; a new cause of waiting is one more function appended to ``CHECKS``,
so every page and command that explains a job explains the new cause too. :func:`line` is the
one-line answer of ``workerpool status --job``.

The limits come from the queue's row, where its workers published what they enforce, so the
answer needs only the database.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import Connection

from .. import sql
from ..model.errors import UnknownJob
from ..model.limits import parse_rate
from ..model.states import DUE_STATES, LIVE_STATES, LIVE_WORKER_WINDOW, JobState
from ..sql import dashboard_reads, dependencies, limits_held
from .status import age


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
    limit: str | None = None  # the limit holding it back (:func:`holding_limit`), if any
    #: A waiting job's parents (``sql.dependencies.parents_of``): id, kind, if_failed, state.
    parents: Sequence[Any] = field(default_factory=tuple)

    @property
    def live_workers(self) -> list[Any]:
        return [
            w
            for w in self.workers
            if w.queue == self.job.queue and float(w.age) <= LIVE_WORKER_WINDOW
        ]


def _age(seconds: float) -> str:
    return age(max(0.0, seconds))


def finished(facts: Facts) -> Reason | None:
    job = facts.job
    if job.state in (JobState.PENDING, JobState.FAILED, JobState.PROCESSING, JobState.WAITING):
        return None
    if job.state == JobState.DEAD:
        return Reason(
            "finished", f"it is dead ({job.dead_reason}): it runs again only if it is retried"
        )
    return Reason("finished", f"it is {job.state}: it will not run again")


def running(facts: Facts) -> Reason | None:
    job = facts.job
    if job.state != JobState.PROCESSING:
        return None
    began = getattr(job, "started_at", None) or job.claimed_at  # claimed_at: the last renewal
    since = _age((facts.now - began).total_seconds()) if began else "?"
    return Reason(
        "running",
        f"it is running: the lease is held by worker {job.claimed_by}"
        f" since {since} ago (attempt {job.attempts} of {job.max_attempts})",
    )


def orphaned(facts: Facts) -> Reason | None:
    """The lease's holder is gone or silent: recovery returns the job once the lease is stale."""
    job = facts.job
    if job.state != JobState.PROCESSING:
        return None
    holder = next((w for w in facts.workers if getattr(w, "id", None) == job.claimed_by), None)
    if holder is not None and float(holder.age) <= LIVE_WORKER_WINDOW:
        return None
    seen = "is not registered" if holder is None else f"was last seen {_age(holder.age)} ago"
    return Reason(
        "orphaned",
        f"its worker {job.claimed_by} {seen}: the job is recovered when"
        " its lease goes stale (stale_after) or its supervisor reaps it",
    )


def scheduled(facts: Facts) -> Reason | None:
    job = facts.job
    if job.state not in DUE_STATES or job.run_at <= facts.now:
        return None
    wait = _age((job.run_at - facts.now).total_seconds())
    why = "its retry after a failed attempt" if job.state == JobState.FAILED else "its run_at"
    return Reason(
        "scheduled",
        f"{why} is in the future: due in {wait} ({job.run_at.isoformat(timespec='seconds')})",
    )


def paused(facts: Facts) -> Reason | None:
    row = facts.paused
    if facts.job.state not in DUE_STATES or row is None or not row.paused:
        return None
    since = f" since {row.paused_at.isoformat(timespec='seconds')}" if row.paused_at else ""
    by = f" by {row.paused_by}" if row.paused_by else ""
    return Reason(
        "paused",
        f"queue {facts.job.queue} is paused{since}{by}: nothing of it is"
        " claimed until it is resumed",
    )


def no_worker(facts: Facts) -> Reason | None:
    """No live worker of the queue, or none that knows the task or its payload version."""
    job = facts.job
    if job.state not in DUE_STATES:
        return None
    live = facts.live_workers
    if not live:  # an app's tasks say what could run it, never that something will
        return Reason("no_worker", f"no live worker serves queue {job.queue}")
    versions = [
        int(v)
        for v in (
            [facts.known.get(job.task)]
            if facts.known is not None
            else [(w.tasks or {}).get(job.task) for w in live]
        )
        if v is not None
    ]
    if not versions:
        text = (
            f"the app has no task {job.task}"
            if facts.known is not None
            else f"no live worker of queue {job.queue} knows task {job.task}"
        )
        return Reason("unknown_task", text)
    if job.payload_version > max(versions):
        return Reason(
            "payload_version",
            f"its payload version {job.payload_version} is newer"
            f" than any worker knows (up to {max(versions)}): it waits for a deploy",
        )
    return None


def exhausted(facts: Facts) -> Reason | None:
    job = facts.job
    if job.state not in DUE_STATES or job.attempts < job.max_attempts:
        return None
    return Reason("exhausted", f"all {job.max_attempts} attempts are spent: no claim takes it")


def limited(facts: Facts) -> Reason | None:
    if facts.job.state not in DUE_STATES or facts.limit is None:
        return None
    return Reason(
        "limit",
        f"it is held by the {facts.limit}: it starts when the limit lets it,"
        " without spending an attempt",
    )


def waiting(facts: Facts) -> Reason | None:
    """A job in ``waiting``: the parents (``after=``) or the sequence head it waits for (one
    waiting for a signal is :func:`signal`'s: its parents were done before it ran)."""
    job = facts.job
    if job.state != JobState.WAITING or getattr(job, "signal", None):
        return None
    holding = []
    for parent in facts.parents:
        if parent.state == JobState.DEAD and parent.if_failed == "hold":
            holding.append(
                f"job {parent.parent_id} ({parent.task}), ahead of it in sequence"
                f" {job.sequence!r}, is dead and its task blocks the sequence:"
                " replay it or purge it"
            )
        elif parent.state in (
            JobState.PENDING,
            JobState.PROCESSING,
            JobState.FAILED,
            JobState.WAITING,
        ):
            if parent.kind == "await":
                holding.append(
                    f"it awaits job {parent.parent_id} ({parent.task}, {parent.state}):"
                    " job.wait_for_job resumes it when that job ends"
                )
            elif parent.kind == "sequence":
                holding.append(
                    f"job {parent.parent_id} ({parent.task}, {parent.state}) is ahead"
                    f" of it in sequence {job.sequence!r}"
                )
            else:
                holding.append(
                    f"parent job {parent.parent_id} ({parent.task}, {parent.state}) is not done"
                )
    if not holding:
        return Reason(
            "waiting",
            "it is waiting, and every parent has ended: the next release"
            " (or the maintenance sweep) makes it due",
        )
    kinds = {parent.kind for parent in facts.parents if parent.state in LIVE_STATES}
    code = "awaits" if kinds == {"await"} else "parents"
    if all("sequence" in text for text in holding):
        code = "sequence"
    return Reason(code, "it waits: " + "; ".join(holding))


def signal(facts: Facts) -> Reason | None:
    """Waiting in ``job.wait_for``: which signal, since when, and until when."""
    job = facts.job
    if job.state != JobState.WAITING or not getattr(job, "signal", None):
        return None
    entry = (job.steps or {}).get(job.signal) or {}
    since = entry.get("started_at")
    waited = (
        f" for {_age((facts.now - datetime.fromisoformat(since)).total_seconds())}" if since else ""
    )
    deadline = entry.get("deadline")
    until = (
        f", until {datetime.fromisoformat(deadline).isoformat(timespec='seconds')} (then"
        " wait_for raises TimeoutError)"
        if deadline
        else ", with no deadline"
    )
    return Reason(
        "signal",
        f"it waits for signal {job.signal!r}{waited}{until}:"
        f" `workerpool signal {job.signal}` (or pool.signal) wakes it",
    )


Check = Callable[[Facts], Reason | None]
#: Every check, in the order their reasons are shown. Append to add a cause of waiting.
CHECKS: list[Check] = [
    finished,
    signal,
    waiting,
    running,
    orphaned,
    paused,
    scheduled,
    no_worker,
    exhausted,
    limited,
]


def reasons(facts: Facts, checks: Sequence[Check] | None = None) -> list[Reason]:
    """What keeps this job from running now; empty when nothing does (it waits for a slot)."""
    found = (check(facts) for check in (CHECKS if checks is None else checks))
    return [reason for reason in found if reason is not None]


# -- reading the facts --------------------------------------------------------------------------


@dataclass(frozen=True)
class Explanation:
    """One job's facts and what keeps it from running (empty: it waits for a free worker)."""

    facts: Facts
    reasons: list[Reason]

    @property
    def job(self) -> Any:
        return self.facts.job


def explain(
    conn: Connection, job_id: int, known: Mapping[str, Mapping[str, int]] | None = None
) -> Explanation:
    """Why job ``job_id`` is not running. ``known``: the app's tasks and payload versions per
    queue (queue → task → version), when an app was given; else live workers' count."""
    row = dashboard_reads.job_detail(conn, job_id)
    if row is None:
        raise UnknownJob(f"no job has id {job_id}")
    states = {r.queue: r for r in sql.list_queue_states(conn)}
    limit = holding_limit(conn, job_id, {q: r.limits for q, r in states.items()})
    parents = dependencies.parents_of(conn, job_id) if row.state == JobState.WAITING else ()
    facts = Facts(
        row,
        row.now,
        states.get(row.queue),
        sql.list_workers(conn),
        None if known is None else dict(known.get(row.queue, {})),
        limit,
        parents,
    )
    return Explanation(facts, reasons(facts))


def app_tasks(registry: Any) -> dict[str, dict[str, int]]:
    """queue → task → payload version of every task an app declares (``known`` of
    :func:`explain`)."""
    known: dict[str, dict[str, int]] = {}
    for spec in registry.tasks.values():
        known.setdefault(spec.queue, {})[spec.name] = spec.version
    return known


def line(explanation: Explanation) -> str:
    """The one-line answer: ``job 812 (sync_account): held by concurrency_limit of key
    'account:42' (1 of 1 running)``, or every reason found, or that nothing holds it."""
    job = explanation.job
    head = f"job {job.id} ({job.task}): "
    if not explanation.reasons:
        return head + "due, no limit holds it (waiting for a free worker)"
    return head + "; ".join(
        f"held by {explanation.facts.limit}" if reason.code == "limit" else reason.text
        for reason in explanation.reasons
    )


def holding_limit(conn: Connection, job_id: int, published: Mapping[str, Any]) -> str | None:
    """The limit that holds this due job back now (as a phrase), or None."""
    row = limits_held.job(conn, job_id)
    return _hold(conn, row, published) if row is not None and row.due else None


def _hold(conn: Connection, row: Any, published: Mapping[str, Any]) -> str | None:
    limits = published.get(row.queue) or {}
    return _queue_hold(conn, row.queue, limits) or _key_hold(conn, row, limits)


def _queue_hold(conn: Connection, queue: str, limits: Mapping[str, Any]) -> str | None:
    usage = limits_held.queue_usage(conn, queue, {**limits, "tasks": {}})
    cap = usage["global_concurrency"]
    if cap and cap["running"] >= cap["limit"]:
        return f"global_concurrency of queue {queue} ({cap['running']} of {cap['limit']} running)"
    rate = usage["rate_limit"]
    if rate and rate["held"]:
        return f"rate_limit {rate['limit']} of queue {queue} ({rate['started']} started)"
    return None


def _key_hold(conn: Connection, row: Any, limits: Mapping[str, Any]) -> str | None:
    task = (limits.get("tasks") or {}).get(row.task)
    if not task or row.concurrency_key is None:
        return None
    rate = (
        parse_rate("key_rate_limit", task["key_rate_limit"]) if task.get("key_rate_limit") else None
    )
    used = limits_held.key_usage(conn, row.queue, row.concurrency_key, rate.window if rate else 1.0)
    cap = task.get("concurrency_limit")
    if cap and used.running >= cap:
        return f"concurrency_limit of key {row.concurrency_key!r} ({used.running} of {cap} running)"
    if rate and used.started >= rate.count:
        return f"key_rate_limit {rate} of key {row.concurrency_key!r} ({used.started} started)"
    return None
