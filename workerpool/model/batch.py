"""What a batch is, without the database: its callbacks as the opener's registry resolves them,
its progress (:class:`BatchStatus`) and a member's result (:class:`MemberResult`).

A batch fans out into member jobs and fans in with callbacks: ``on_complete`` always,
``on_success`` when every member is done, ``on_failure`` when any is dead or cancelled, each
enqueued once with the batch's payload when its last member ends. Opening, filling and reading
a batch is :mod:`workerpool.client.batches`'s; settling it is :mod:`workerpool.sql.batches`'.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from .limits import job_concurrency_key
from .registry import Registry
from .states import JobState

#: The callbacks, in the order they are declared (and inserted).
CALLBACKS = ("complete", "success", "failure")
#: Members per page of ``pool.batch_results``.
PAGE_SIZE = 500
#: The order ``pool.batch_results`` yields members in: settled ones first.
RESULT_ORDER = (
    JobState.DONE,
    JobState.DEAD,
    JobState.CANCELLED,
    JobState.FAILED,
    JobState.PENDING,
    JobState.PROCESSING,
)


def callback_templates(
    registry: Registry, tasks: Mapping[str, Any], payload: Mapping[str, Any]
) -> tuple[dict[str, str | None], list[dict[str, Any]]]:
    """``tasks``: the task (a name or a handler, or None) of each callback in :data:`CALLBACKS`.
    Returns each callback's task name (None: not asked for) and the job templates the batch
    row keeps: what the settling transaction inserts, resolved from ``registry`` now (an
    unknown task raises here, before anything is written)."""
    names: dict[str, str | None] = {}
    templates: list[dict[str, Any]] = []
    for on in CALLBACKS:
        task = tasks.get(on)
        if task is None:
            names[on] = None
            continue
        spec = registry.task_spec(task)
        names[on] = spec.name
        templates.append(
            {
                "on": on,
                "queue": spec.queue,
                "task": spec.name,
                "payload_version": spec.version,
                "priority": spec.priority,
                "max_attempts": spec.max_attempts,
                "concurrency_key": job_concurrency_key(spec, payload, None),
            }
        )
    return names, templates


@dataclass(frozen=True)
class BatchStatus:
    """A batch's progress: its members by state (its callbacks not counted), and whether it
    finished (its callbacks were enqueued: ``callback_ids``)."""

    id: int
    key: str | None
    total: int
    pending: int  # not started yet: due, scheduled, or waiting for parents or a sequence
    running: int
    failed: int  # waiting to retry
    done: int
    dead: int
    cancelled: int
    finished: bool
    finished_at: datetime | None
    outcome: str | None  # "success" (every member done) or "failure", once finished
    created_at: datetime
    on_complete: str | None
    on_success: str | None
    on_failure: str | None
    callback_ids: list[int]
    fired_by: str | None  # "outcome", "empty" or "sweep" (the safety net)

    @property
    def live(self) -> int:
        """Members that can still run."""
        return self.pending + self.running + self.failed

    def as_dict(self) -> dict[str, Any]:
        out = dict(self.__dict__)
        for name in ("finished_at", "created_at"):
            value = out[name]
            out[name] = value.isoformat() if value is not None else None
        out["live"] = self.live
        return out


def status_of(row: Any, counts: Mapping[str, int]) -> BatchStatus:
    """A batch's status from its row and its members' counts by state."""

    def n(state: str) -> int:
        return counts.get(state, 0)

    return BatchStatus(
        id=row.id,
        key=row.key,
        total=sum(counts.values()),
        pending=n(JobState.PENDING) + n(JobState.WAITING),
        running=n(JobState.PROCESSING),
        failed=n(JobState.FAILED),
        done=n(JobState.DONE),
        dead=n(JobState.DEAD),
        cancelled=n(JobState.CANCELLED),
        finished=row.finished_at is not None,
        finished_at=row.finished_at,
        outcome=row.outcome,
        created_at=row.created_at,
        on_complete=row.on_complete,
        on_success=row.on_success,
        on_failure=row.on_failure,
        callback_ids=sorted(row.callback_ids or []),
        fired_by=row.fired_by,
    )


@dataclass(frozen=True)
class MemberResult:
    """One member of a batch: its state and, once ``done``, what its handler returned."""

    job_id: int
    state: str
    result: Any
    key: str | None


__all__ = [
    "CALLBACKS",
    "PAGE_SIZE",
    "RESULT_ORDER",
    "BatchStatus",
    "MemberResult",
    "callback_templates",
    "status_of",
]
