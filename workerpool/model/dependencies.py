"""Jobs that wait for other jobs: the checks of ``after=`` and ``sequence=``, and the one rule
that decides what a waiting job becomes when its parents change (:func:`verdict`).

An edge joins a dependent to one parent. Its ``kind`` says why it exists (``after``: asked for;
``sequence``: the previous job of the same sequence; ``await``: a running handler awaits that
job, ``job.wait_for_job``) and ``if_failed`` what a parent that ended
dead or cancelled does to the dependent: ``cancel`` it, let it ``run`` (the edge counts as
satisfied), or ``hold`` it (a sequence blocked by a dead job). The policy is written on the edge
at enqueue, from the tasks' declarations, so the statements that release jobs need no registry.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, NamedTuple

from .errors import InvalidDependency, UnknownTask
from .states import JobState

if TYPE_CHECKING:
    from .registry import Registry

#: What a dependent does when a parent ends dead or cancelled (``TaskSpec.on_dependency_failure``).
DEPENDENCY_FAILURE_POLICIES = ("cancel", "run")
#: What a dead job does to the next job of its sequence (``TaskSpec.on_failure``).
SEQUENCE_FAILURE_POLICIES = ("release", "block")
AFTER = "after"
SEQUENCE = "sequence"
#: ``job.wait_for_job``: the dependent is the awaiting job, the parent the job it awaits. Its
#: ``if_failed`` is always ``run``: the awaiting handler gets the failure raised, not a cancel.
AWAIT = "await"
EDGE_KINDS = (AFTER, SEQUENCE, AWAIT)
CANCEL, RUN, HOLD = "cancel", "run", "hold"
IF_FAILED = (CANCEL, RUN, HOLD)
#: The ``type`` of the error entry of a job cancelled because a parent failed (replay of that
#: parent re-opens the jobs whose last entry is this one and names it).
DEPENDENCY_FAILED = "DependencyFailed"
#: Most parents one job may name (the edges are one INSERT; a fan-in wider than this is a
#: batch's job: ``pool.batch(on_complete=...)``).
MAX_PARENTS = 1000
MAX_SEQUENCE_NAME = 200


def check_after(after: Any) -> tuple[int, ...]:
    """``after=``: an iterable of job ids or of what stands for one (a typed task's
    ``JobHandle``), no more than MAX_PARENTS; the ids, once each, in the order given."""
    if isinstance(after, str | bytes) or not isinstance(after, Iterable):
        raise InvalidDependency(f"after must be a list of job ids, got {type(after).__name__}")
    ids = tuple(_job_id(parent) for parent in after)
    if len(ids) > MAX_PARENTS:
        raise InvalidDependency(f"after names {len(ids)} parents; at most {MAX_PARENTS}")
    return tuple(dict.fromkeys(ids))  # once each, in the order given


def _job_id(parent: Any) -> int:
    """A parent as its id: an int, or an object that is one by ``__index__`` (a ``JobHandle``;
    the model cannot name the client's class). Not a bool, a float or a numeric string: those
    are a caller's mistake, not an id."""
    if isinstance(parent, bool) or not hasattr(type(parent), "__index__"):
        raise InvalidDependency(f"after must hold job ids (positive ints), got {parent!r}")
    job_id = operator.index(parent)
    if job_id <= 0:
        raise InvalidDependency(f"after must hold job ids (positive ints), got {parent!r}")
    return job_id


def check_sequence(sequence: Any) -> str:
    if not isinstance(sequence, str) or not sequence.strip():
        raise InvalidDependency(f"sequence must be a non-empty string, got {sequence!r}")
    if len(sequence) > MAX_SEQUENCE_NAME or "\x00" in sequence:
        raise InvalidDependency(
            f"sequence must be at most {MAX_SEQUENCE_NAME} characters, without NUL"
        )
    return sequence


def after_policy(on_dependency_failure: str) -> str:
    """``if_failed`` of an ``after`` edge, from the dependent's task."""
    return RUN if on_dependency_failure == "run" else CANCEL


def sequence_policy(on_failure: str | None) -> str:
    """``if_failed`` of a ``sequence`` edge, from the previous job's task (None: not declared
    here: the default)."""
    return HOLD if on_failure == "block" else RUN


def line_policy(registry: Registry, task: str) -> str:
    """``if_failed`` of a ``sequence`` edge to a job of ``task``, from its declaration (a task
    declared by another application: the default)."""
    try:
        return sequence_policy(registry.task_spec(task).on_failure)
    except UnknownTask:
        return sequence_policy(None)


def check_parents(wanted: Iterable[int], found: dict[int, str]) -> None:
    """Every parent exists (``found``: id → state) and has not ended dead or cancelled."""
    for job_id in wanted:
        state = found.get(job_id)
        if state is None:
            raise InvalidDependency(
                f"after names job {job_id}, which does not exist (or was pruned)"
            )
        if state in (JobState.DEAD, JobState.CANCELLED):
            raise InvalidDependency(f"after names job {job_id}, which already ended {state}")


class Edge(NamedTuple):
    """One parent of a waiting job, as the release reads it (``parent_state`` None: pruned)."""

    job_id: int
    parent_id: int
    kind: str
    if_failed: str
    parent_state: str | None


WAIT, DUE = "wait", "due"


def verdict(edges: Iterable[Edge]) -> tuple[str, int | None]:
    """What a waiting job becomes given all its edges: ``(WAIT, None)``, ``(DUE, None)`` or
    ``(CANCEL, parent)``, the parent whose failure cancels it.

    A parent that is gone was pruned, which only happens to finished rows whose dependents were
    already resolved: it counts as done.
    """
    waiting = False
    for edge in sorted(edges, key=lambda e: e.parent_id):
        state = edge.parent_state
        if state is None or state == JobState.DONE:
            continue
        if state in (JobState.DEAD, JobState.CANCELLED):
            if edge.if_failed == CANCEL:
                return CANCEL, edge.parent_id
            if edge.if_failed == HOLD and state == JobState.DEAD:
                waiting = True
            continue
        waiting = True  # a live parent
    return (WAIT, None) if waiting else (DUE, None)


def cancel_entry(parent_id: int, parent_state: str, at: str) -> dict[str, Any]:
    """The error entry of a job cancelled because its parent failed."""
    return {
        "attempt": 0,
        "at": at,
        "type": DEPENDENCY_FAILED,
        "parent": parent_id,
        "message": f"cancelled: parent job {parent_id} ended {parent_state}",
        "traceback": None,
        "worker": None,
    }


__all__ = [
    "AFTER",
    "AWAIT",
    "CANCEL",
    "DEPENDENCY_FAILED",
    "DEPENDENCY_FAILURE_POLICIES",
    "DUE",
    "EDGE_KINDS",
    "HOLD",
    "IF_FAILED",
    "RUN",
    "SEQUENCE",
    "SEQUENCE_FAILURE_POLICIES",
    "WAIT",
    "Edge",
    "after_policy",
    "cancel_entry",
    "check_after",
    "check_parents",
    "check_sequence",
    "sequence_policy",
    "verdict",
]
