"""``pool.rerun(job_id, from_step=None)``: a job that ended (done, dead or cancelled) runs
again, keeping the durable steps it recorded before ``from_step`` (``None``: none), attempts
reset, the rerun appended to its ``replays`` and written to the audit trail, in one transaction.

When a step stored a wrong value (a bug since fixed), rerunning from that step keeps the work
before it (a charge, an email) and runs the rest with the fixed code. Refused by name, nothing
written: a job no one has (``UnknownJob``), a live one (``JobLive``), a step it never recorded
(``UnknownStep``, listing its steps), and, as ``WrongState``: a batch member (its batch's
outcome is settled), a job whose parents did not all end done, one whose key a newer live job
holds.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection

from .. import sql
from ..model.dependencies import line_policy
from ..model.errors import UnknownJob, WrongState
from ..model.registry import Registry
from ..model.reruns import Kept, check_rerun, kept_steps
from ..model.results import check_id
from ..model.steps import check_name
from ..sql import audit, dependencies, reruns, sequences


def rerun(
    registry: Registry, conn: Connection, job_id: int, from_step: str | None, by: str
) -> Kept:
    """Rerun ``job_id`` in ``conn``'s transaction; returns the steps kept and dropped."""
    job_id = check_id(job_id)
    if from_step is not None:
        check_name(from_step)
    reruns.restore(conn, job_id)
    row = reruns.lock(conn, job_id)
    if row is None:
        raise UnknownJob(f"no job has id {job_id}")
    check_rerun(job_id, row.state)
    kept = kept_steps(job_id, row.steps, from_step)
    _check_free(conn, row)
    done = reruns.rerun(conn, job_id, kept.steps, from_step, by)
    assert done is not None  # locked and final above
    if done.sequence is not None:  # one at a time in its line, as a replay
        sequences.wait_in_line(
            conn, job_id, done.sequence, lambda task: line_policy(registry, task)
        )
    if row.state != "done":  # what its failure cancelled runs once it is done
        dependencies.reopen_dependents(conn, [job_id])
    sql.notify(conn, [done.queue])
    audit.record(
        conn,
        by,
        "rerun",
        f"job {job_id}",
        {
            "task": done.task,
            "was": str(row.state),
            "from_step": from_step,
            "kept": list(kept.steps or {}),
            "dropped": kept.dropped,
        },
    )
    return kept


def _check_free(conn: Connection, row: Any) -> None:
    """Nothing outside the job stands in the way of its running again."""
    if row.batch_id is not None:
        raise WrongState(
            f"job {row.id} belongs to batch {row.batch_id}, whose outcome is settled:"
            " enqueue it anew; nothing changed"
        )
    parent = reruns.undone_parent(conn, row.id)
    if parent is not None:
        raise WrongState(
            f"job {row.id} depends on job {parent.parent_id}, which is {parent.state}:"
            " rerun or replay that job first; nothing changed"
        )
    if row.key_scope == "live" and row.key_taken:
        raise WrongState(f"job {row.id}'s key {row.key!r} is held by a newer job; nothing changed")


__all__ = ["rerun"]
