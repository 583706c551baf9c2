"""The claim of a queue with limits: global concurrency, rate limits, per-key limits, in SQL.

Every limit is a count of rows, taken by the claim itself: the queue's ``processing`` rows
(``global_concurrency``), its rows started within the window (``rate_limit``), and per
concurrency key the same two (a task's ``concurrency_limit`` and ``key_rate_limit``). No
counter is kept anywhere, so a killed child's slot is free as soon as its rows leave
``processing`` (the crash release, or the stale recovery for a lost host).

Counts taken by two claims at once would both see the same free slot. So a limited claim first
locks its queue's row in ``workerpool_queues`` (a row lock: it works behind PgBouncer, unlike an
advisory lock) and then counts in a second statement, whose snapshot is taken after the lock is
granted and therefore sees every claim committed before it. Finishing writes take no lock:
they only lower the counts, and a count that is a moment old is then only too cautious.

Jobs over a limit are not claimed, so they spend no attempt; the scan skips the rows of keys
that are at their limit and goes on to other keys (no head-of-line blocking). A queue without
limits never comes here: its claim is ``claim.claim_statement``, unchanged.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    Connection,
    and_,
    bindparam,
    case,
    exists,
    func,
    literal,
    literal_column,
    or_,
    select,
    union_all,
    update,
)
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.types import Integer

from ..limits import ClaimLimits, KeyLimit
from ..schema import jobs, queues
from ..states import DUE_STATES, JobState
from .planner import state_in

# lock_queue: serialise the limited claims of one queue. Index: pk_workerpool_queues.
_LOCK = (select(queues.c.queue).where(queues.c.queue == bindparam("queue"))
         .with_for_update(key_share=True))  # FOR NO KEY UPDATE: blocks only other claims' lock
# ensure_queue_row: the row the lock needs. Index: pk_workerpool_queues.
_ENSURE = (insert(queues).values(queue=bindparam("queue"))
           .on_conflict_do_nothing(index_elements=[queues.c.queue]))


def lock_queue(conn: Connection, queue: str) -> None:
    """Take the queue's claim lock until the transaction ends (creating its row if missing)."""
    if conn.execute(_LOCK, {"queue": queue}).first() is None:
        conn.execute(_ENSURE, {"queue": queue})
        conn.execute(_LOCK, {"queue": queue})


# publish_limits: record a queue's limits for `workerpool status`. Index: pk_workerpool_queues.
def publish_limits(conn: Connection, queue: str, limits: dict[str, Any] | None) -> None:
    """What the workers of ``queue`` enforce (None: nothing), for ``workerpool status``."""
    if limits is None:
        conn.execute(update(queues).where(queues.c.queue == queue, queues.c.limits.isnot(None))
                     .values(limits=None))
        return
    stmt = insert(queues).values(queue=queue, limits=limits)
    conn.execute(stmt.on_conflict_do_update(index_elements=[queues.c.queue],
                                            set_={"limits": stmt.excluded.limits}))


# limited_claim: due rows within every limit of the queue, in claim order, after lock_queue.
# Index: ix_workerpool_jobs_due (and _suspects), ix_workerpool_jobs_leased (running),
# ix_workerpool_jobs_started (rate), ix_workerpool_jobs_running_key and _started_key (per key).
def limited_claim_statement(*, queue: str, worker: str, limit: int, known: Any,
                            limits: ClaimLimits, alone: bool) -> Any:
    """The claim of ``claim.claim_statement`` with the queue's limits in its arms."""
    budget = _budget(queue, limits, limit).cte("budget")
    room = select(budget.c.n).scalar_subquery()
    headroom = _key_headroom(queue, limits.keys)
    due = _arm(queue, known, room, headroom, suspects=False)
    if alone:
        suspect = _arm(queue, known, 1, headroom, suspects=True)
        arms = union_all(select(suspect.c.id),
                         select(due.c.id).where(~exists(select(suspect.c.id))))
        picked = arms.limit(room).cte("picked")
    else:
        picked = due
    return (
        update(jobs)
        # the state again: a per-key arm locks nothing, and a row cancelled meanwhile is left
        .where(jobs.c.id == picked.c.id, state_in(*DUE_STATES))
        .values(state=JobState.PROCESSING, attempts=jobs.c.attempts + 1, claimed_by=worker,
                claimed_at=func.now(), started_at=_NOW)
    )


def _budget(queue: str, limits: ClaimLimits, limit: int) -> Any:
    """How many jobs this claim may start: its free slots, within the queue-wide limits."""
    parts: list[Any] = [literal(limit, Integer)]
    if limits.global_concurrency:
        running = _count_upto(limits.global_concurrency, lambda held: (
            held.c.queue == queue, held.c.state == _PROCESSING))
        parts.append(limits.global_concurrency - running)
    if limits.rate:
        window = _seconds(limits.rate.window)
        started = _count_upto(limits.rate.count, lambda held: (
            held.c.queue == queue, held.c.started_at > _NOW - window))
        parts.append(limits.rate.count - started)
    return select(func.greatest(func.least(*parts), 0).label("n"))


_PROCESSING = literal_column(f"'{JobState.PROCESSING}'")  # the partial indexes' literal
#: The time a start is stamped with and windows end at: this statement's start, which comes
#: after the queue lock was granted (``now()`` is the transaction's: before the wait, so two
#: claims' stamps could disagree with the order they counted in).
_NOW = func.statement_timestamp()


def _count_upto(bound: int, where: Any) -> Any:
    """``count(*)`` of the rows matching ``where(held)``, read no further than ``bound``: a
    limit only needs to know whether it is reached, and a queue with 5,000 running jobs would
    otherwise count them all on every claim."""
    held = jobs.alias("held")
    rows = (select(literal_column("1")).select_from(held).where(*where(held)).limit(bound)
            .correlate_except(held))  # the candidate row is the outer query's
    return select(func.count()).select_from(rows.subquery()).scalar_subquery()


def _seconds(seconds: float) -> Any:
    return literal_column(f"interval '{int(seconds)} seconds'")  # a window of limits.WINDOWS


def _key_headroom(queue: str, keys: tuple[KeyLimit, ...]) -> Any:
    """Per candidate row: how many more jobs its concurrency key may start now (NULL: no limit
    for its task). Correlated to the candidate row; each count is one small index range."""
    if not keys:
        return None
    parts = []
    concurrency = {k.task: k.concurrency for k in keys if k.concurrency}
    if concurrency:
        running = _count_upto(max(concurrency.values()), lambda held: (
            held.c.queue == queue, held.c.concurrency_key == jobs.c.concurrency_key,
            held.c.state == _PROCESSING))
        parts.append(case(concurrency, value=jobs.c.task) - running)
    rates = {k.task: k.rate for k in keys if k.rate}
    if rates:
        window = case({task: rate.window for task, rate in rates.items()}, value=jobs.c.task)
        started = _count_upto(max(rate.count for rate in rates.values()), lambda held: (
            held.c.queue == queue, held.c.concurrency_key == jobs.c.concurrency_key,
            held.c.started_at > _NOW - window * _seconds(1)))
        parts.append(case({task: rate.count for task, rate in rates.items()},
                          value=jobs.c.task) - started)
    return parts[0] if len(parts) == 1 else func.least(*parts)


def _arm(queue: str, known: Any, scan: Any, headroom: Any, *, suspects: bool) -> Any:
    """Due rows in claim order that fit the limits, up to ``scan`` of them.

    With per-key limits, a row is taken when its key has room and it is among its key's first
    ``headroom`` due rows (``_first_of_its_key``): exact per key, and nothing is sorted, so the
    arm stops after ``scan`` rows like the plain one, skipping the rows of full keys.
    """
    crashes = jobs.c.crashes > literal_column("0") if suspects else (
        jobs.c.crashes == literal_column("0"))
    columns = [jobs.c.id, jobs.c.concurrency_key]
    where = [jobs.c.queue == queue, state_in(*DUE_STATES), jobs.c.run_at <= func.now(), crashes,
             known, scan > 0]
    order = (jobs.c.priority.desc(), jobs.c.run_at, jobs.c.id)
    name = "suspect" if suspects else "due"
    if headroom is None:  # it takes exactly what it reads: lock it, as the plain claim does
        return (select(*columns).where(*where).order_by(*order).limit(scan)
                .with_for_update(skip_locked=True).cte(name))
    # each row's headroom once (OFFSET 0 keeps the subquery, so the filter reads the column
    # instead of repeating its counts), in index order
    walk = select(*columns, headroom.label("headroom")).where(*where).order_by(*order).offset(
        0).subquery(f"{name}_walk")
    fits = or_(walk.c.concurrency_key.is_(None), walk.c.headroom.is_(None),
               and_(walk.c.headroom > 0, walk.c.id.in_(_first_of_its_key(queue, walk))))
    return select(walk.c.id).where(fits).limit(scan).cte(name)


def _first_of_its_key(queue: str, walk: Any) -> Any:
    """The first ``headroom`` due rows of the walked row's key, in claim order: the ones its
    key has room for (two rows of one key in one claim cannot both take its last slot)."""
    ahead = jobs.alias("ahead")
    return (select(ahead.c.id)
            .where(ahead.c.queue == queue, ahead.c.concurrency_key == walk.c.concurrency_key,
                   state_in(*DUE_STATES, table=ahead), ahead.c.run_at <= func.now())
            .order_by(ahead.c.priority.desc(), ahead.c.run_at, ahead.c.id)
            .limit(walk.c.headroom)
            .correlate_except(ahead))
