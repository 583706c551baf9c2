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
from typing import Any

from ..client import WorkerPool
from ..model.cancel import CANCELLED, STOPPING
from ..model.errors import InvalidFilter, WrongState
from ..model.states import LIVE_STATES, JobState
from ..model.validation import check_ids
from ..sql.dashboard_reads import matching_ids
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


def apply(
    pool: WorkerPool, action: str, ids: Sequence[int], *, by: str, reason: str | None = None
) -> BulkPlan:
    """Check as :func:`plan` does, then cancel or replay every one of ``ids``."""
    checked = plan(pool, action, ids)
    if action == "cancel":
        pool.cancel(list(checked.states), reason=reason, by=by)
    else:
        result = dead.retry(pool, list(checked.states), by=by)
        if result.not_dead:  # replayed or purged by someone else since the check
            raise WrongState(
                f"job(s) {result.not_dead} are no longer dead; the others were replayed"
            )
    return BulkPlan(action, checked.states, applied=True)


# -- every match of a filter -------------------------------------------------------------------

#: Jobs an action on every match of a filter takes at most (past it: narrow the filter).
MAX_MATCHES = 100_000
#: Jobs per transaction (and audit entry) when acting on every match.
CHUNK = 1000


@dataclass(frozen=True)
class MatchPlan:
    """The jobs a filter matches that the action takes: their ids (oldest first), counts per
    state and per task, and the newest id (the confirmation acts on none newer)."""

    action: str
    ids: tuple[int, ...]
    by_state: dict[str, int]
    by_task: dict[str, int]
    upto: int | None


def plan_matching(pool: WorkerPool, action: str, where: Any, upto: int | None = None) -> MatchPlan:
    """The dry run of :func:`apply_matching`: what ``where`` matches among live jobs (cancel)
    or dead ones (replay), up to job ``upto``; nothing written."""
    if action not in ACTIONS:
        raise InvalidFilter(f"action must be one of {', '.join(ACTIONS)}; got {action!r}")
    states = LIVE_STATES if action == "cancel" else (JobState.DEAD,)
    with pool.read_engine.connect() as conn:
        rows = matching_ids(conn, where, [str(s) for s in states], upto, MAX_MATCHES)
    if len(rows) > MAX_MATCHES:
        raise InvalidFilter(f"more than {MAX_MATCHES:,} jobs match: narrow the filter")
    by_state: dict[str, int] = {}
    by_task: dict[str, int] = {}
    for row in rows:
        by_state[row.state] = by_state.get(row.state, 0) + 1
        by_task[row.task] = by_task.get(row.task, 0) + 1
    ids = tuple(row.id for row in rows)
    return MatchPlan(action, ids, by_state, by_task, ids[-1] if ids else upto)


def apply_matching(
    pool: WorkerPool,
    action: str,
    where: Any,
    upto: int | None,
    *,
    by: str,
    reason: str | None = None,
) -> int:
    """Cancel or replay every job ``where`` matches now, up to job ``upto`` (the dry run's
    newest: a job that came later is left alone), :data:`CHUNK` a transaction, each through
    the single operation (logged, audited, hooks called). Returns how many it changed; jobs
    that left the state meanwhile (another operator, a worker) are left as they are."""
    planned = plan_matching(pool, action, where, upto)
    changed = 0
    for start in range(0, len(planned.ids), CHUNK):
        chunk = list(planned.ids[start : start + CHUNK])
        if action == "cancel":
            result = pool.cancel(chunk, reason=reason, by=by)
            changed += sum(
                1 for verdict in result.verdicts.values() if verdict in (CANCELLED, STOPPING)
            )
        else:
            result = dead.retry(pool, chunk, by=by)
            changed += len(result.ids)
    return changed


__all__ = [
    "ACTIONS",
    "MAX_BULK",
    "MAX_MATCHES",
    "BulkPlan",
    "MatchPlan",
    "apply",
    "apply_matching",
    "plan",
    "plan_matching",
]
