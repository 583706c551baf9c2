"""The claim of a queue with limits: global concurrency, rate limits, per-key limits, in SQL.

Every concurrency limit is a count of rows, taken by the claim itself: the queue's
``processing`` rows (``global_concurrency``) and per concurrency key the same (a task's
``concurrency_limit``); a key's rate (``key_rate_limit``) counts its rows started within the
window. No count of running jobs is kept anywhere, so a killed child's slot is free as soon as
its rows leave ``processing`` (the crash release, or the stale recovery for a lost host). A
queue's ``rate_limit`` counts claims in :mod:`.limits_rates`, which the claim adds to in the
same statement: starts only ever add to it, so there is nothing for a crash to undo.

Counts taken by two claims at once would both see the same free slot. So a limited claim first
locks its queue's row in ``workerpool_queues`` (a row lock: it works behind PgBouncer, unlike an
advisory lock) and then counts in a second statement, whose snapshot is taken after the lock is
granted and therefore sees every claim committed before it. The lock is shared while the
limits are out of the whole fleet's reach (``_safe``), exclusive otherwise. Finishing writes
take no lock: they only lower the counts, and a count a moment old is then only too cautious.

Jobs over a limit are not claimed, so they spend no attempt; the scan skips the rows of keys
that are at their limit and goes on to other keys (no head-of-line blocking). A queue without
limits never comes here: its claim is ``claim.claim_statement``, unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
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
    select,
    union_all,
    update,
)
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.types import Integer

from ..model.limits import ClaimLimits
from ..model.states import DUE_STATES, JobState
from . import limits_keys, limits_rates
from .limits_keys import NOW, count_upto
from .planner import one_of, state_in
from .schema import jobs, queues, workers

#: The lock also sets, for the rest of its transaction, that the claim after it keeps its
#: generic plan. Left to choose, PostgreSQL plans every execution of a prepared claim afresh
#: (a generic plan prices the arms' ``LIMIT $n`` at a tenth of the backlog, so it never looks
#: cheaper than a custom one): about 1 ms of the server's CPU per per-key claim, more than
#: running it. Transaction-local, so the worker's other statements keep PostgreSQL's choice (a
#: lease fence's generic plan rescans its ``unnest`` per row: 6 ms per ``complete`` of 150
#: instead of 1.7).
_GENERIC = func.set_config("plan_cache_mode", "force_generic_plan", True)

# lock_queue: serialise the limited claims of one queue (or, shared, wait for those that are).
# Index: pk_workerpool_queues.
_LOCK = (
    select(queues.c.queue, _GENERIC)
    .where(queues.c.queue == bindparam("queue"))
    .with_for_update(key_share=True)
)  # FOR NO KEY UPDATE: conflicts with both locks
_SHARE = (
    select(queues.c.queue, _GENERIC)
    .where(queues.c.queue == bindparam("queue"))
    .with_for_update(read=True)
)  # FOR SHARE: conflicts with FOR NO KEY UPDATE only
# ensure_queue_row: the row the lock needs. Index: pk_workerpool_queues.
_ENSURE = (
    insert(queues)
    .values(queue=bindparam("queue"))
    .on_conflict_do_nothing(index_elements=[queues.c.queue])
)


def lock_queue(conn: Connection, queue: str, *, shared: bool = False) -> None:
    """Take the queue's claim lock until the transaction ends (creating its row if missing),
    and keep the claim's generic plan (``_GENERIC``).

    ``shared``: the claim's limits cannot be reached by the whole fleet at once (``_safe``),
    so claims need not wait for each other; they still wait for, and hold off, an exclusive
    claim, whose counts must see their rows.
    """
    lock = _SHARE if shared else _LOCK
    if conn.execute(lock, {"queue": queue}).first() is None:
        conn.execute(_ENSURE, {"queue": queue})
        conn.execute(lock, {"queue": queue})


# publish_limits: record a queue's limits for `workerpool status`. Index: pk_workerpool_queues.
def publish_limits(conn: Connection, queue: str, limits: dict[str, Any] | None) -> None:
    """What the workers of ``queue`` enforce (None: nothing), for ``workerpool status``."""
    if limits is None:
        conn.execute(
            update(queues)
            .where(queues.c.queue == queue, queues.c.limits.isnot(None))
            .values(limits=None)
        )
        return
    stmt = insert(queues).values(queue=queue, limits=limits)
    conn.execute(
        stmt.on_conflict_do_update(
            index_elements=[queues.c.queue], set_={"limits": stmt.excluded.limits}
        )
    )


# limits_claim: due rows within every limit of the queue, in claim order, after lock_queue.
# Index: ix_workerpool_jobs_due (and _suspects), ix_workerpool_jobs_leased (running),
# pk_workerpool_rate_counts (rate); per key: ix_workerpool_jobs_running_key, _started_key and
# _due_key (the key spread).
def limited_claim_statement(
    *,
    queue: str,
    worker: str,
    limit: int,
    known: Callable[[Any], Any],
    limits: ClaimLimits,
    alone: bool,
    columns: tuple[Any, ...],
    shared: bool = False,
) -> Any:
    """The claim of ``claim.claim_statement`` with the queue's limits in its arms.

    ``known(table)``: the condition that this worker can run a row of ``table``. ``shared``:
    run under the shared lock, it claims only if the limits are still out of the fleet's reach
    (else nothing: the worker then claims under the exclusive lock). Each row returned says
    whether they were (``limits_safe``), for the worker's choice of lock next time, and
    ``columns``.
    """
    budget = _budget(queue, worker, limits, limit).cte("budget")
    room = select(budget.c.n).scalar_subquery()
    if shared:
        room = select(case((budget.c.safe, budget.c.n), else_=0)).scalar_subquery()
    due = _arm(queue, known, room, limits, limit, suspects=False)
    if limits.keys:
        spread = limits_keys.spread(
            queue, lambda row: _runnable(row, known, suspects=False), limits.keys, due, room
        )
        due = union_all(select(due.c.id), select(spread.c.id)).cte("due_or_spread")
    if alone:
        suspect = _arm(queue, known, room, limits, 1, suspects=True)
        arms = union_all(
            select(suspect.c.id), select(due.c.id).where(~exists(select(suspect.c.id)))
        )
    else:
        arms = select(due.c.id)
    # The budget applies here, above arms whose LIMIT is a constant: a LIMIT the planner cannot
    # read makes it guess a tenth of the table, and it then hash-joins the update with a scan
    # of every due row (26 ms instead of 1 at 100k pending).
    picked = arms.limit(room).cte("picked")
    # claimed_at on the clock the limits count with (a lease stamp a few ms later than now())
    # started_at: when this attempt started, as every claim records it; also what key rate
    # limits count
    values = {
        "state": JobState.PROCESSING,
        "attempts": jobs.c.attempts + 1,
        "claimed_by": worker,
        "claimed_at": NOW,
        "started_at": NOW,
    }
    claim = (
        update(jobs)
        # the state again: a per-key arm locks nothing, and a row cancelled meanwhile is left
        .where(one_of(picked), state_in(*DUE_STATES))
        .values(**values)
        .returning(select(budget.c.safe).scalar_subquery().label("limits_safe"), *columns)
    )
    if not limits.rate:
        return claim
    claimed = claim.cte("claimed")
    return select(claimed).add_cte(limits_rates.add(queue, limits.rate, claimed).cte("counted"))


def _budget(queue: str, worker: str, limits: ClaimLimits, limit: int) -> Any:
    """How many jobs this claim may start (its free slots, within the queue-wide limits), and
    whether the limits are out of reach of the whole fleet (``safe``, see ``_safe``)."""
    counts: dict[str, Any] = {}
    if limits.global_concurrency:
        cap = limits.global_concurrency
        counts["running"] = count_upto(
            cap, lambda held: (held.c.queue == queue, held.c.state == _PROCESSING)
        )
        counts["orphaned"] = count_upto(
            cap,
            lambda held: (
                held.c.queue == queue,
                held.c.state == _PROCESSING,
                held.c.claimed_by.not_in(_fleet_ids(queue)),
            ),
        )
    if limits.rate:
        counts["started"] = limits_rates.claimed(queue, limits.rate)
    # each count once (a column of its own), read by both the budget and the safety test
    counted = (
        select(*(count.label(name) for name, count in counts.items())).subquery("counted")
        if counts
        else None
    )
    parts: list[Any] = [literal(limit, Integer)]
    beyond: list[tuple[int, Any]] = []  # (limit, what counts against it beyond the fleet)
    if limits.global_concurrency:
        parts.append(limits.global_concurrency - counted.c.running)
        beyond.append((limits.global_concurrency, counted.c.orphaned))
    if limits.rate:
        parts.append(limits.rate.count - counted.c.started)
        beyond.append((limits.rate.count, counted.c.started))
    budget = select(
        func.greatest(func.least(*parts), 0).label("n"),
        _safe(queue, worker, beyond, bool(limits.keys)).label("safe"),
    )
    return budget.select_from(counted) if counts else budget


def _fleet_ids(queue: str) -> Any:
    return select(workers.c.id).where(workers.c.queue == queue)


def _safe(queue: str, worker: str, beyond: list[tuple[int, Any]], per_key: bool) -> Any:
    """Whether no interleaving of claims can pass a limit: every registered worker's capacity
    (the jobs it may hold) plus what counts beyond them (rows of no registered worker, or
    starts already in the window) stays within each limit.

    A worker holds at most its capacity, and has one claim in flight at a time, so what the
    fleet claims concurrently is bounded by the capacities (a worker that registers later sees
    this one; an exclusive claim waits for the shared ones and then counts their rows). A
    worker of unknown capacity, or the claimer not registered, makes it unsafe; so do per-key
    limits.
    """
    if per_key:
        return literal_column("false")
    fleet = (
        select(
            func.coalesce(func.sum(workers.c.capacity), 0).label("capacity"),
            func.bool_and(workers.c.capacity.isnot(None)).label("known"),
            func.bool_or(workers.c.id == worker).label("me"),
        )
        .where(workers.c.queue == queue)
        .subquery("fleet")
    )
    within = [fleet.c.capacity + count <= cap for cap, count in beyond]
    return select(and_(fleet.c.known, fleet.c.me, *within)).scalar_subquery()


_PROCESSING = literal_column(f"'{JobState.PROCESSING}'")  # the partial indexes' literal


def _runnable(row: Any, known: Callable[[Any], Any], *, suspects: bool) -> list[Any]:
    """Due now, of the arm's kind (suspect or not), and runnable by this worker."""
    crashes = (
        row.c.crashes > literal_column("0") if suspects else (row.c.crashes == literal_column("0"))
    )
    return [state_in(*DUE_STATES, table=row), row.c.run_at <= func.now(), crashes, known(row)]


def _arm(
    queue: str,
    known: Callable[[Any], Any],
    room: Any,
    limits: ClaimLimits,
    limit: int,
    *,
    suspects: bool,
) -> Any:
    """Due rows in claim order that fit the limits: up to ``limit`` (the claim's free slots),
    read only if the budget (``room``) is not 0."""
    where = [jobs.c.queue == queue, *_runnable(jobs, known, suspects=suspects), room > 0]
    name = "suspect" if suspects else "due"
    if limits.keys:
        walk_rows = limit * limits_keys.WALK_FACTOR + limits_keys.WALK_MIN
        return limits_keys.walk(name, where, limit, walk_rows, limits.keys, queue)
    # it takes what it reads (the budget may leave a few of them locked until the commit)
    return (
        select(jobs.c.id, jobs.c.concurrency_key)
        .where(*where)
        .order_by(jobs.c.priority.desc(), jobs.c.run_at, jobs.c.id)
        .limit(limit)
        .with_for_update(skip_locked=True)
        .cte(name)
    )
