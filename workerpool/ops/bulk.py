"""Acting on jobs picked by hand (the dashboard's checkboxes): cancel or replay a list of ids,
all or nothing.

:func:`plan` is the dry run: every id must exist (UnknownJob) and be in a state the action
applies to (WrongState: cancel takes live jobs, replay takes dead ones), at most
:data:`MAX_BULK` of them; nothing is written. :func:`apply` checks the same, then calls the
operation the command line calls (``pool.cancel``, ``dead.retry``), so each job is changed,
logged and recorded exactly as a single action would change it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..client import WorkerPool
from ..model.errors import InvalidFilter, WrongState
from ..model.states import LIVE_STATES, JobState
from ..model.validation import check_ids
from . import dead

#: Jobs one bulk action takes at most.
MAX_BULK = 40
ACTIONS = ("cancel", "retry")


@dataclass(frozen=True)
class BulkPlan:
    """What the action does (or did) to each job: id -> its state before."""

    action: str
    states: dict[int, str]
    applied: bool = False


def plan(pool: WorkerPool, action: str, ids: Sequence[int]) -> BulkPlan:
    """The dry run: the checks, nothing written."""
    if action not in ACTIONS:
        raise InvalidFilter(f"action must be one of {', '.join(ACTIONS)}; got {action!r}")
    ids = check_ids(ids)
    if len(ids) > MAX_BULK:
        raise InvalidFilter(f"at most {MAX_BULK} jobs at once, got {len(ids)}")
    result = pool.cancel(list(ids), dry_run=True)  # reads states; unknown ids: UnknownJob
    states = {job_id: str(result.states[job_id]) for job_id in ids}
    allowed = LIVE_STATES if action == "cancel" else (JobState.DEAD,)
    wrong = [f"{job_id} ({state})" for job_id, state in states.items() if state not in allowed]
    if wrong:
        verb = "cancelled (it is not live)" if action == "cancel" else "replayed (not dead)"
        raise WrongState(f"job(s) {', '.join(wrong)} cannot be {verb}; nothing was changed")
    return BulkPlan(action, states)


def apply(pool: WorkerPool, action: str, ids: Sequence[int], *, by: str,
          reason: str | None = None) -> BulkPlan:
    """Check as :func:`plan` does, then cancel or replay every one of ``ids``."""
    checked = plan(pool, action, ids)
    if action == "cancel":
        pool.cancel(list(checked.states), reason=reason, by=by)
    else:
        result = dead.retry(pool, list(checked.states), by=by)
        if result.not_dead:  # replayed or purged by someone else since the check
            raise WrongState(f"job(s) {result.not_dead} are no longer dead; the others were"
                             " replayed")
    return BulkPlan(action, checked.states, applied=True)


__all__ = ["ACTIONS", "MAX_BULK", "BulkPlan", "apply", "plan"]
