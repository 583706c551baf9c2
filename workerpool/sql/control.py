"""An operator steers live work: cancel jobs, pause and resume queues.

Cancel is one UPDATE per batch, decided per row on the version it locks: a ``pending`` or
``failed`` row ends ``cancelled`` at once; a ``processing`` row gets a ``cancel_request`` its
owner will act on. A claim that took the row first holds its lock until it commits, so the
cancel waits, re-reads the claimed row and treats it as running (never as queued).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from sqlalchemy import (
    BigInteger,
    Connection,
    and_,
    bindparam,
    case,
    cast,
    exists,
    false,
    func,
    literal,
    literal_column,
    select,
    true,
    update,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB, insert
from sqlalchemy.types import Text

from ..model.notices import CancelNotice
from ..model.states import DUE_STATES, LIVE_STATES, JobState
from .cancelled import history
from .enqueue import NOTIFY_CHANNEL
from .leases import Lease, fence
from .readouts import list_workers
from .schema import dependencies, jobs, queues
from .settled import after_rows
from .tags import carries
from .unique_keys import holds_its_key

#: Notification payloads that are not queue names start with this (names cannot contain it).
CONTROL = "!"

_IDS = bindparam("ids", type_=ARRAY(BigInteger))


def cancel_request(by: str, reason: str | None) -> Any:
    """``{"by", "message", "at"}`` as JSONB, stamped on the database clock."""
    fields = cast(literal(json.dumps({"by": by, "message": reason or ""}), Text), JSONB)
    return fields.op("||")(func.jsonb_build_object("at", func.now()))


# job_states: the state of each of these ids (the ones that exist). Index: pk_workerpool_jobs.
def job_states(conn: Connection, ids: Sequence[int]) -> dict[int, str]:
    rows = conn.execute(
        select(jobs.c.id, jobs.c.state).where(jobs.c.id == func.any(_IDS)), {"ids": list(ids)}
    )
    return {row.id: row.state for row in rows}


# select_ids: live rows of a queue and/or carrying tags (optionally one task and one state),
# ascending. Index: ix_workerpool_jobs_due or ix_workerpool_jobs_leased (by state), else a
# scan; with tags, ix_workerpool_jobs_tags.
def select_ids(
    conn: Connection,
    queue: str | None,
    task: str | None,
    state: str | None,
    tags: Sequence[str] | None = None,
) -> list[int]:
    clauses = [] if queue is None else [jobs.c.queue == queue]
    if tags:
        clauses.append(carries(tags))
    clauses.append(jobs.c.state == state if state else jobs.c.state.in_(LIVE_STATES))
    if task is not None:
        clauses.append(jobs.c.task == task)
    return list(conn.execute(select(jobs.c.id).where(*clauses).order_by(jobs.c.id)).scalars())


# cancel: queued rows (due or waiting) → cancelled now; processing rows → cancel requested
# (first request kept). Index: pk_workerpool_jobs.
def cancel(
    conn: Connection, ids: Sequence[int], by: str, reason: str | None
) -> tuple[list[Any], list[CancelNotice]]:
    """Returns ``id, queue, task, attempts, state, claimed_by, batch_id`` of every row it
    changed, and the dependents their cancel cancelled in turn; waiters of the rows it
    cancelled are woken and their batches settled."""
    queued = jobs.c.state.in_([literal_column(f"'{s}'") for s in (*DUE_STATES, JobState.WAITING)])
    request = cancel_request(by, reason)
    stmt = (
        update(jobs)
        .where(
            jobs.c.id == func.any(_IDS),
            jobs.c.state.in_(LIVE_STATES),
            (jobs.c.state != JobState.PROCESSING) | jobs.c.cancel_request.is_(None),
        )
        .values(
            state=case((queued, JobState.CANCELLED.value), else_=jobs.c.state),
            finished_at=case((queued, func.now()), else_=jobs.c.finished_at),
            errors=case((queued, history(request)), else_=jobs.c.errors),
            cancel_request=request,
        )
        .returning(
            jobs.c.id,
            jobs.c.queue,
            jobs.c.task,
            jobs.c.attempts,
            jobs.c.state,
            jobs.c.claimed_by,
            jobs.c.batch_id,
        )
    )
    rows = list(conn.execute(stmt, {"ids": list(ids)}).all())
    followed = after_rows(conn, rows)  # queued rows cancelled now: waiters, batches, dependents
    return rows, followed.cancelled


# notify_cancel: tell the owner of these running rows to stop them. Index: none.
def notify_cancel(conn: Connection, owner: str, ids: Sequence[int]) -> None:
    payload = f"{CONTROL}cancel {owner} {','.join(str(i) for i in ids)}"
    conn.execute(select(func.pg_notify(NOTIFY_CHANNEL, payload)))


def notify_owners(conn: Connection, changed: Sequence[Any]) -> None:
    """Tell the owner of each row a cancel left ``processing`` (one notification per owner)."""
    owners: dict[str, list[int]] = {}
    for row in changed:
        if row.state == JobState.PROCESSING:
            owners.setdefault(row.claimed_by, []).append(row.id)
    for owner, ids in owners.items():
        notify_cancel(conn, owner, ids)


# requested_cancels: which of this worker's leased rows an operator asked to stop.
# Index: ix_workerpool_jobs_claimed_by.
def requested_cancels(conn: Connection, worker: str) -> set[int]:
    stmt = select(jobs.c.id).where(
        jobs.c.claimed_by == worker,
        jobs.c.state == literal_column(f"'{JobState.PROCESSING}'"),
        jobs.c.cancel_request.isnot(None),
    )
    return set(conn.execute(stmt).scalars())


# running_with: the rows a worker runs now besides one. Index: ix_workerpool_jobs_claimed_by.
def running_with(conn: Connection, job_id: int) -> tuple[Any, list[Any]] | None:
    """``(queue, task, claimed_by)`` of a running job and ``(id, task)`` of the other jobs its
    worker runs now; None when it is not running."""
    row = conn.execute(
        select(jobs.c.queue, jobs.c.task, jobs.c.claimed_by).where(
            jobs.c.id == job_id, jobs.c.state == literal_column(f"'{JobState.PROCESSING}'")
        )
    ).first()
    if row is None:
        return None
    others = conn.execute(
        select(jobs.c.id, jobs.c.task)
        .where(
            jobs.c.claimed_by == row.claimed_by,
            jobs.c.id != job_id,
            jobs.c.state == literal_column(f"'{JobState.PROCESSING}'"),
        )
        .order_by(jobs.c.id)
    )
    return row, list(others)


# run_now: a scheduled row (pending or failed, run_at ahead) → due now; its former run_at.
# Index: pk_workerpool_jobs.
def run_now(conn: Connection, job_id: int) -> Any | None:
    """``queue, task, was`` of the row made due, or None when it is not scheduled."""
    before = select(jobs.c.run_at).where(jobs.c.id == job_id).scalar_subquery()
    stmt = (
        update(jobs)
        .where(jobs.c.id == job_id, jobs.c.state.in_(list(DUE_STATES)), jobs.c.run_at > func.now())
        .values(run_at=func.now())
        .returning(jobs.c.queue, jobs.c.task, before.label("was"))
    )
    return conn.execute(stmt).first()


#: The row waits for other jobs (after= or a sequence).
_DEPENDS = exists(select(dependencies.c.job_id).where(dependencies.c.job_id == jobs.c.id))


# replay_cancelled: a cancelled row that depends on nothing and belongs to no batch → pending
# now, attempts reset, the cancel request cleared, lineage appended; unless its live key is
# held by a newer job. Index: pk_workerpool_jobs (the key's: uq_workerpool_jobs_key).
def replay_cancelled(conn: Connection, job_id: int, by: str) -> Any | None:
    """``id, queue, task`` of the row put back in line, or None (see :func:`why_not_replayed`)."""
    holder = jobs.alias("holder")
    key_taken = and_(
        jobs.c.key_scope == literal_column("'live'"),
        exists(
            select(holder.c.id).where(
                holder.c.key == jobs.c.key, holder.c.id != jobs.c.id, holds_its_key(holder)
            )
        ),
    )
    entry = func.jsonb_build_object(
        "at",
        func.now(),
        "attempts",
        jobs.c.attempts,
        "cancelled",
        true(),
        "finished_at",
        jobs.c.finished_at,
        "by",
        literal(by, Text),
    )
    stmt = (
        update(jobs)
        .where(
            jobs.c.id == job_id,
            jobs.c.state == literal_column(f"'{JobState.CANCELLED}'"),
            jobs.c.batch_id.is_(None),
            ~_DEPENDS,
            ~key_taken,
        )
        .values(
            state=JobState.PENDING,
            attempts=0,
            run_at=func.now(),
            finished_at=None,
            claimed_by=None,
            claimed_at=None,
            cancel_request=None,
            replays=jobs.c.replays.op("||")(func.jsonb_build_array(entry)),
        )
        .returning(jobs.c.id, jobs.c.queue, jobs.c.task)
    )
    return conn.execute(stmt).first()


# why_not_replayed: what kept a job from replay_cancelled. Index: pk_workerpool_jobs.
def why_not_replayed(conn: Connection, job_id: int) -> str | None:
    """A sentence, or None when no job has this id."""
    row = conn.execute(
        select(jobs.c.state, jobs.c.batch_id, _DEPENDS.label("depends")).where(jobs.c.id == job_id)
    ).first()
    if row is None:
        return None
    if row.state != JobState.CANCELLED:
        return f"job {job_id} is {row.state}: only a cancelled job is retried here"
    if row.batch_id is not None:
        return (
            f"job {job_id} belongs to batch {row.batch_id}, whose outcome is settled:"
            " enqueue it anew"
        )
    if row.depends:
        return (
            f"job {job_id} depends on other jobs (after= or a sequence): replay the job"
            " it waited for, which reopens it"
        )
    return f"job {job_id}'s key is held by a newer job"


# cancel_requests: the request (by, message) each of these cancelled rows carries. Index:
# pk_workerpool_jobs.
def cancel_requests(conn: Connection, ids: Sequence[int]) -> dict[int, Any]:
    stmt = select(jobs.c.id, jobs.c.cancel_request).where(jobs.c.id == func.any(_IDS))
    return {row.id: row.cancel_request or {} for row in conn.execute(stmt, {"ids": list(ids)})}


# finish_cancelled: one leased row → cancelled, its request written into the history.
# Index: the lease fence (pk_workerpool_jobs or ix_workerpool_jobs_claimed_by).
def finish_cancelled(conn: Connection, lease: Lease) -> bool:
    request = func.coalesce(jobs.c.cancel_request, cancel_request("worker", "cancelled"))
    stmt = (
        update(jobs)
        .where(fence(lease))
        .values(state=JobState.CANCELLED, finished_at=func.now(), errors=history(request))
    )
    return conn.execute(stmt).rowcount == 1


# -- pause and resume ---------------------------------------------------------------------------


# set_paused: pause or resume a queue, and tell its workers. Index: pk_workerpool_queues.
def set_paused(conn: Connection, queue: str, paused: bool, by: str) -> None:
    values = (
        {"paused": true(), "paused_at": func.now(), "paused_by": by}
        if paused
        else {"paused": false(), "paused_at": None, "paused_by": None}
    )
    stmt = insert(queues).values(queue=queue, **values)
    conn.execute(stmt.on_conflict_do_update(index_elements=[queues.c.queue], set_=values))
    verb = "pause" if paused else "resume"
    conn.execute(select(func.pg_notify(NOTIFY_CHANNEL, f"{CONTROL}{verb} {queue}")))


# is_paused: whether this queue is paused (no row: it runs). Index: pk_workerpool_queues.
_IS_PAUSED = select(queues.c.paused).where(queues.c.queue == bindparam("queue"))


def is_paused(conn: Connection, queue: str) -> bool:
    return bool(conn.execute(_IS_PAUSED, {"queue": queue}).scalar())


# list_queue_states: every queue with a state row. Index: none (one row per queue).
def list_queue_states(conn: Connection) -> list[Any]:
    return list(conn.execute(select(queues).order_by(queues.c.queue)).all())


# known_queues: queues with rows in the jobs table. Index: ix_workerpool_jobs_due (a skip scan
# would be better; this runs only for an operator's pause of an unknown name).
def known_queues(conn: Connection) -> set[str]:
    return set(conn.execute(select(jobs.c.queue).distinct()).scalars())


def queue_names(conn: Connection, live_window: float) -> set[str]:
    """The queues an operator may name: those live workers serve (seen within ``live_window``
    seconds), those with a state row, and those with rows."""
    live = {
        row.queue
        for row in list_workers(conn)
        if row.age <= live_window and not row.queue.startswith("@")
    }
    states = {row.queue for row in list_queue_states(conn)}
    return live | states | known_queues(conn)
