"""Signals: ``pool.signal`` keeps the first signal of a name and wakes the jobs waiting for it;
``job.wait_for`` reads it, or puts its job in ``waiting``.

A sender and a job that starts to wait can race: each statement would see the database as it
was before the other committed, the job would wait for a signal already sent, and nobody would
wake it. Both take the same transaction-level advisory lock on the signal's name first
(:func:`lock`), so whichever comes second runs its statement after the first committed, under
READ COMMITTED, and sees it. The maintenance sweep (:func:`sweep`) is the safety net: it wakes
waiting jobs whose signal exists or whose deadline passed, so a lost wake-up costs latency,
never a stuck job.

Index: pk_workerpool_signals (a signal by name), ix_workerpool_jobs_signal (the jobs waiting
for a name; the sweep reads the whole index: only waiting jobs are in it).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    Connection,
    bindparam,
    case,
    cast,
    func,
    literal,
    or_,
    select,
    text,
    update,
)
from sqlalchemy.dialects.postgresql import JSONB, insert
from sqlalchemy.types import Text

from ..model.errors import MAX_DELAY
from ..model.job import Lease
from ..model.states import JobState
from ..model.steps import WAIT, SignalRead
from .cancelled import or_cancelled
from .enqueue import NOTIFY_CHANNEL
from .leases import fence
from .outcomes import after
from .schema import TZ, jobs, signals
from .steps import NULL, with_step


# lock: serialise a signal's sender with the jobs that start to wait for it. Index: none.
def lock(conn: Connection, name: str) -> None:
    """The advisory lock of signal ``name``, held until the transaction ends."""
    conn.execute(_LOCK, {"name": name})


_LOCK = text("SELECT pg_advisory_xact_lock(hashtext('workerpool_signals'), hashtext(:name))")


# read_signal: one signal and whether a wait's deadline passed. Index: pk_workerpool_signals.
def read_signal(conn: Connection, name: str, deadline: str | None) -> SignalRead:
    """Signal ``name`` as ``job.wait_for`` reads it; ``deadline``: the wait's stored deadline
    (an ISO timestamp, None: no limit), compared with the database clock."""
    row = conn.execute(_READ, {"name": name, "deadline": deadline}).one()
    return SignalRead(sent=row.sent, payload=row.payload, expired=bool(row.expired))


_READ = select(
    select(signals.c.payload)
    .where(signals.c.name == bindparam("name"))
    .scalar_subquery()
    .label("payload"),
    select(signals.c.name).where(signals.c.name == bindparam("name")).exists().label("sent"),
    (func.now() >= cast(bindparam("deadline", type_=Text), TZ)).label("expired"),
)


def get(conn: Connection, name: str) -> Any:
    """The kept signal ``name`` (payload, sent_at), or None. Index: pk_workerpool_signals."""
    return conn.execute(
        select(signals.c.payload, signals.c.sent_at).where(signals.c.name == name)
    ).one_or_none()


# insert_signal: keep the first signal of a name. Index: pk_workerpool_signals.
def insert_signal(conn: Connection, name: str, payload_json: str) -> datetime | None:
    """Keep signal ``name`` unless one was sent; its ``sent_at``, or None if it existed."""
    stmt = (
        insert(signals)
        .values(name=name, payload=cast(literal(payload_json, Text), JSONB))
        .on_conflict_do_nothing(index_elements=[signals.c.name])
        .returning(signals.c.sent_at)
    )
    return conn.execute(stmt).scalar()


def notify(conn: Connection, queues: set[str]) -> None:
    """Wake the workers of ``queues`` (sent on commit; a hint, polling stays the guarantee)."""
    if queues:
        conn.execute(select(func.pg_notify(NOTIFY_CHANNEL, ",".join(sorted(queues)))))


# wake: the jobs waiting for a signal → pending now. Index: ix_workerpool_jobs_signal.
def wake(conn: Connection, name: str) -> dict[int, str]:
    """Make the jobs waiting for signal ``name`` due now; returns ``{id: queue}`` of them."""
    stmt = (
        update(jobs)
        .where(jobs.c.signal == name, jobs.c.state == JobState.WAITING)
        .values(state=JobState.PENDING, signal=None, run_at=func.now())
        .returning(jobs.c.id, jobs.c.queue)
    )
    return {row.id: row.queue for row in conn.execute(stmt)}


def send(conn: Connection, name: str, payload_json: str) -> tuple[datetime | None, dict[int, str]]:
    """``pool.signal``: keep the first signal of ``name`` and wake its waiters, in ``conn``'s
    transaction. Returns ``(sent_at, {woken id: queue})``; ``sent_at`` is None when a signal
    of that name exists (then nothing was written)."""
    lock(conn, name)
    sent_at = insert_signal(conn, name, payload_json)
    if sent_at is None:
        return None, {}
    woken = wake(conn, name)
    notify(conn, set(woken.values()))
    return sent_at, woken


# wait: one leased row → waiting for a signal (pending at once if it exists), attempt refunded,
# the wait a step begun. Index: the lease fence (pk_workerpool_jobs or
# ix_workerpool_jobs_claimed_by), then pk_workerpool_signals.
def wait(conn: Connection, lease: Lease, name: str, timeout: float | None) -> str | None:
    """``job.wait_for`` found no signal: the job waits for it, holding no lease and with its
    attempt given back, until the signal is sent or its deadline passes (``run_at``: the
    deadline; the maintenance sweep makes it due then). A wait an earlier run began keeps its
    deadline. Under the signal's lock, so a signal sent meanwhile is seen: then the job is due
    again at once.

    Returns the new state (``cancelled`` if an operator asked), None when the lease was lost."""
    lock(conn, name)
    sent = select(signals.c.name).where(signals.c.name == name).exists()
    begun = jobs.c.steps.op("->")(name)
    limit = MAX_DELAY if timeout is None else timeout
    deadline = func.coalesce(cast(begun.op("->>")("deadline"), TZ), after(limit))
    entry = func.jsonb_build_object(
        "kind",
        WAIT,
        "signal",
        name,
        "value",
        NULL,
        "attempt",
        jobs.c.attempts,
        "started_at",
        func.now(),
        "deadline",
        NULL if timeout is None else deadline,
    )
    stmt = (
        update(jobs)
        .where(fence(lease))
        .values(
            **or_cancelled(
                {
                    "state": case((sent, JobState.PENDING.value), else_=JobState.WAITING.value),
                    "signal": case((sent, None), else_=name),
                    "run_at": case((sent, func.now()), else_=deadline),
                    "attempts": jobs.c.attempts - 1,
                    "crashes": 0,  # an ordinary outcome: no longer a suspect
                    "steps": with_step(func.coalesce(begun, entry), name),
                }
            )
        )
        .returning(jobs.c.state)
    )
    return conn.execute(stmt).scalar()


# sweep: waiting jobs whose signal exists or whose deadline passed → pending now.
# Index: ix_workerpool_jobs_signal (every job waiting for a signal), pk_workerpool_signals.
def sweep(conn: Connection) -> dict[str, int]:
    """The safety net of the wake-up: jobs still waiting for a signal that was sent (a wake
    missed), and jobs whose wait's deadline passed (their ``wait_for`` then raises
    ``TimeoutError``). Returns ``{queue: jobs made due}`` and wakes their workers."""
    sent = select(signals.c.name).where(signals.c.name == jobs.c.signal).exists()
    stmt = (
        update(jobs)
        .where(
            jobs.c.signal.isnot(None),
            jobs.c.state == JobState.WAITING,
            or_(sent, jobs.c.run_at <= func.now()),
        )
        .values(state=JobState.PENDING, signal=None, run_at=func.now())
        .returning(jobs.c.queue)
    )
    counts: dict[str, int] = {}
    for queue in conn.execute(stmt).scalars():
        counts[queue] = counts.get(queue, 0) + 1
    notify(conn, set(counts))
    return counts


# prune: signals sent more than the retention ago (a job that starts to wait for one later
# waits for a new one). Index: none (the table holds one row per name; a scan in batches).
_PRUNE = text(f"""
DELETE FROM {signals.name} WHERE name = ANY(ARRAY(
  SELECT name FROM {signals.name} WHERE sent_at < now() - make_interval(secs => :older)
  LIMIT :limit))
""")


def prune(conn: Connection, older_than: float, limit: int) -> int:
    """Delete up to ``limit`` signals sent more than ``older_than`` seconds ago."""
    return conn.execute(_PRUNE, {"older": older_than, "limit": limit}).rowcount
