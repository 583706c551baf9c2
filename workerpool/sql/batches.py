"""Batches: opened with their members, finished exactly once by the last member's outcome.

A batch is a row of ``workerpool_batches``; its members are jobs carrying its ``batch_id``. No
counter is kept (a crash between a member's outcome and its count would leave one wrong for
ever): whether a batch is over is read from its members, by the transaction that settles one.

:func:`settle` runs in the transaction that wrote final outcomes (done, dead, cancelled), after
those writes, for the batches they touched:

1. it locks the batch rows still open (``SELECT ... FOR UPDATE``, in id order, so two settlers
   never wait for each other in a cycle);
2. then, in a separate statement (READ COMMITTED takes a fresh snapshot per statement, so once
   the lock is granted it sees what the previous holder committed), it finishes each locked
   batch none of whose members is still live: marks it finished (``WHERE finished_at IS
   NULL``) and inserts its callback jobs, with the batch's payload and ``batch_id``.

Two members settling at the same moment in two transactions cannot each conclude that the other
is still running: the second to get the lock waits for the first to commit, and then sees its
write. The callback jobs are therefore inserted once, in the transaction of the last member's
outcome, or not at all when that transaction rolls back (then the member is not settled either).
:func:`sweep` finishes open batches whose members have all settled: a safety net that a correct
outcome path never needs (it records ``fired_by = 'sweep'``).

Only rows with a batch pay: the outcome path calls :func:`settle` only when a row it finished
names a batch. The member lookups use ``ix_workerpool_jobs_batch`` (batch, state, id): "is any
member live" is three index probes, whatever the batch's size.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

from sqlalchemy import BigInteger, Connection, bindparam, func, select, text

from ..model.states import LIVE_STATES, JobState
from .compiled import driver_sql
from .enqueue import NOTIFY_CHANNEL
from .history import union
from .schema import KEY_HELD, batches, jobs


def _states(states: Iterable[str]) -> str:
    return ", ".join(f"'{state}'" for state in states)


class Opened(NamedTuple):
    """A batch as :func:`open_batch` found it: new, or reopened by its key."""

    id: int
    created: bool
    finished: bool
    callbacks: Any  # as stored (reopened) or as given (new)
    payload: Any


class Fired(NamedTuple):
    """A batch :func:`settle` finished: its outcome and the callback jobs it inserted."""

    batch_id: int
    outcome: str
    callback_ids: list[int]


# ---------------------------------------------------------------------------------------------
# opening


# open_batch: a new batch row, or the one holding ``key`` (locked until this transaction ends).
# Index: uq_workerpool_batches_key (ON CONFLICT, and the reopen).
_INSERT = text(f"""
INSERT INTO {batches.name} (key, on_complete, on_success, on_failure, callbacks, payload)
VALUES (:key, :on_complete, :on_success, :on_failure, CAST(:callbacks AS jsonb),
        CAST(:payload AS jsonb))
ON CONFLICT (key) WHERE key IS NOT NULL DO NOTHING
RETURNING id
""")
_REOPEN = text(f"""
SELECT id, callbacks, payload, finished_at FROM {batches.name} WHERE key = :key FOR UPDATE
""")


def open_batch(
    conn: Connection,
    *,
    key: str | None,
    on_complete: str | None,
    on_success: str | None,
    on_failure: str | None,
    callbacks_json: str,
    payload_json: str,
) -> Opened:
    """Insert a batch row; with a ``key`` already held, lock and return that batch instead
    (whoever inserts the key first wins on the unique index; the other waits and reopens it)."""
    params = {
        "key": key,
        "on_complete": on_complete,
        "on_success": on_success,
        "on_failure": on_failure,
        "callbacks": callbacks_json,
        "payload": payload_json,
    }
    for _ in range(2):
        batch_id = conn.execute(_INSERT, params).scalar()
        if batch_id is not None:
            return Opened(batch_id, True, False, callbacks_json, payload_json)
        row = conn.execute(_REOPEN, {"key": key}).first()
        if row is not None:  # else deleted (pruned) meanwhile: insert again
            return Opened(row.id, False, row.finished_at is not None, row.callbacks, row.payload)
    raise RuntimeError(f"batch key {key!r} changed hands twice during one open; retry")


# outside_batch: which of these jobs are not members of ``batch_id`` (keys held by jobs
# outside it). Index: pk_workerpool_jobs.
_OUTSIDE = text(f"""
SELECT id FROM {jobs.name}
WHERE id = ANY(CAST(:ids AS bigint[])) AND batch_id IS DISTINCT FROM :batch_id
""")


def outside_batch(conn: Connection, batch_id: int, ids: Sequence[int]) -> set[int]:
    if not ids:
        return set()
    return set(conn.execute(_OUTSIDE, {"ids": list(ids), "batch_id": batch_id}).scalars())


# members_by_key: the members of ``batch_id`` holding these keys. Index: uq_workerpool_jobs_key.
_BY_KEY = text(f"""
SELECT key, id FROM {jobs.name}
WHERE key = ANY(CAST(:keys AS text[])) AND {KEY_HELD} AND batch_id = :batch_id
""")


def members_by_key(conn: Connection, batch_id: int, keys: Iterable[str]) -> dict[str, int]:
    rows = conn.execute(_BY_KEY, {"keys": sorted(set(keys)), "batch_id": batch_id})
    return {row.key: row.id for row in rows}


# ---------------------------------------------------------------------------------------------
# finishing


# lock_open: the open ones of these batches, locked in id order. Index: pk_workerpool_batches.
_LOCK_OPEN = text(f"""
SELECT id FROM {batches.name}
WHERE id = ANY(CAST(:ids AS bigint[])) AND finished_at IS NULL
ORDER BY id FOR UPDATE
""")

# finish: every given (locked) open batch none of whose members is live → finished, its
# callbacks inserted (and their queues woken). Index: pk_workerpool_batches, then
# ix_workerpool_jobs_batch (three probes for live members, two for dead or cancelled ones).
# The woken queues are grouped, not ``string_agg(DISTINCT ...)``: since PostgreSQL 16 an
# aggregate's DISTINCT is a Sort node in the plan (a hash aggregate needs none).
_FINISH = text(f"""
WITH settled AS (
  SELECT b.id, b.payload, b.callbacks,
         EXISTS (SELECT 1 FROM {jobs.name} j WHERE j.batch_id = b.id
                 AND j.state IN ({_states((JobState.DEAD, JobState.CANCELLED))})) AS failed
  FROM {batches.name} b
  WHERE b.id = ANY(CAST(:ids AS bigint[])) AND b.finished_at IS NULL
    AND NOT EXISTS (SELECT 1 FROM {jobs.name} j WHERE j.batch_id = b.id
                    AND j.state IN ({_states(LIVE_STATES)}))
), fired AS (
  INSERT INTO {jobs.name} (queue, task, payload, payload_version, priority, max_attempts,
                           concurrency_key, batch_id)
  SELECT c.queue, c.task, s.payload, c.payload_version, c.priority, c.max_attempts,
         c.concurrency_key, s.id
  FROM settled s CROSS JOIN LATERAL jsonb_to_recordset(s.callbacks) AS c(
         "on" text, queue text, task text, payload_version int, priority smallint,
         max_attempts int, concurrency_key text)
  WHERE c."on" = 'complete' OR (c."on" = 'failure') = s.failed
  RETURNING id, batch_id, queue
), finished AS (
  UPDATE {batches.name} b
  SET finished_at = clock_timestamp(),
      outcome = CASE WHEN s.failed THEN 'failure' ELSE 'success' END,
      fired_by = :fired_by,
      callback_ids = ARRAY(SELECT f.id FROM fired f WHERE f.batch_id = b.id)
  FROM settled s WHERE b.id = s.id
  RETURNING b.id, b.outcome, b.callback_ids
), woken AS (
  SELECT pg_notify('{NOTIFY_CHANNEL}', string_agg(queue, ',')) AS sent
  FROM (SELECT queue FROM fired GROUP BY queue) AS fired_queues HAVING count(*) > 0
)
SELECT finished.id, finished.outcome, finished.callback_ids, (SELECT count(*) FROM woken) AS woke
FROM finished
""")


def settle(conn: Connection, batch_ids: Iterable[int], fired_by: str = "outcome") -> list[Fired]:
    """Finish those of ``batch_ids`` whose members have all settled (see the module docstring).

    Call it in the transaction that settled members of these batches, after their writes.
    Returns the batches it finished; nothing is sent for batches already finished.

    The finishing statement takes the same ids as the lock (it skips the finished ones itself),
    so on psycopg 3 both go in one pipeline: one round trip, and still two statements, the
    second planned and run (with its own snapshot) only once the first holds its locks.
    """
    ids = sorted(set(batch_ids))
    if not ids:
        return []
    driver = getattr(getattr(conn, "connection", None), "driver_connection", None)
    if not hasattr(driver, "pipeline"):  # another driver: one statement after the other
        locked = list(conn.execute(_LOCK_OPEN, {"ids": ids}).scalars())
        return finish(conn, locked, fired_by) if locked else []
    params = {"ids": ids, "fired_by": fired_by}
    with driver.pipeline():
        lock = driver.cursor()
        lock.execute(driver_sql(conn.dialect, _LOCK_OPEN)[0], params)
        finishing = driver.cursor()
        finishing.execute(driver_sql(conn.dialect, _FINISH)[0], params)
    lock.fetchall()
    return _fired(finishing.fetchall())


def finish(conn: Connection, locked: Sequence[int], fired_by: str) -> list[Fired]:
    """The second statement of :func:`settle`: ``locked`` are batch ids this transaction holds
    locked (a fresh snapshot sees every member outcome committed before the lock)."""
    return _fired(conn.execute(_FINISH, {"ids": list(locked), "fired_by": fired_by}).all())


def _fired(rows: Iterable[Any]) -> list[Fired]:
    """``(id, outcome, callback_ids, woke)`` rows as Fired, by id (the statement has no ORDER
    BY: a sort node, however small, is what the plan tests forbid)."""
    return sorted(Fired(row[0], row[1], sorted(row[2] or [])) for row in rows)


# sweep: open batches not locked by anyone → finished when every member has settled (a safety
# net: the outcome path finishes them). Index: ix_workerpool_batches_open.
_SWEEP_LOCK = text(f"""
SELECT id FROM {batches.name} WHERE finished_at IS NULL
ORDER BY id LIMIT :limit FOR UPDATE SKIP LOCKED
""")


def sweep(conn: Connection, limit: int = 1000) -> list[Fired]:
    """Finish open batches whose members have all settled but which nobody finished. A batch
    locked right now is skipped: the transaction holding it is settling it."""
    locked = list(conn.execute(_SWEEP_LOCK, {"limit": limit}).scalars())
    return finish(conn, locked, "sweep") if locked else []


# prune: finished batches older than the retention. Index: ix_workerpool_batches_finished.
_PRUNE = text(f"""
DELETE FROM {batches.name} WHERE id = ANY(ARRAY(
  SELECT id FROM {batches.name}
  WHERE finished_at < now() - make_interval(secs => :older)
  ORDER BY finished_at LIMIT :limit FOR UPDATE SKIP LOCKED))
""")


def prune(conn: Connection, older_than: float, limit: int) -> int:
    """Delete up to ``limit`` batches finished more than ``older_than`` seconds ago (their
    members are pruned by their own retention; a dead member replayed later finds no batch)."""
    return conn.execute(_PRUNE, {"older": older_than, "limit": limit}).rowcount


# ---------------------------------------------------------------------------------------------
# reading


# read_batch: one batch row. Index: pk_workerpool_batches.
_READ = select(batches).where(batches.c.id == bindparam("batch_id", type_=BigInteger))


def read_batch(conn: Connection, batch_id: int) -> Any:
    return conn.execute(_READ, {"batch_id": batch_id}).first()


# member_counts: a batch's members by state (its callbacks left out), moved ones included.
# Index: ix_workerpool_jobs_batch (the batch's own entries, index-only when the table is
# vacuumed), ix_workerpool_jobs_history_batch per partition.
_MEMBER = "batch_id = :batch_id AND id <> ALL(CAST(:callbacks AS bigint[]))"
_COUNTS = text(f"""
SELECT state, count(*) AS n FROM {union("state", _MEMBER)} AS m
GROUP BY state
""")


def member_counts(
    conn: Connection, batch_id: int, callback_ids: Sequence[int] = ()
) -> dict[str, int]:
    rows = conn.execute(_COUNTS, {"batch_id": batch_id, "callbacks": list(callback_ids)})
    return {row.state: row.n for row in rows}


# member_page: a batch's members in one state, by id after ``after`` (a keyset page), moved
# ones included. Index: ix_workerpool_jobs_batch (batch, state, id): the page is a range of it;
# the same of ix_workerpool_jobs_history_batch per partition, merged.
_PAGE = text(f"""
SELECT id, state, result, key
FROM {union("id, state, result, key", f"{_MEMBER} AND state = :state AND id > :after")} AS m
ORDER BY id LIMIT :limit
""")


def member_page(
    conn: Connection,
    batch_id: int,
    state: str,
    after: int,
    limit: int,
    callback_ids: Sequence[int] = (),
) -> list[Any]:
    return list(
        conn.execute(
            _PAGE,
            {
                "batch_id": batch_id,
                "state": state,
                "after": after,
                "limit": limit,
                "callbacks": list(callback_ids),
            },
        )
    )


# open_batches: the oldest open batches (status, dashboard). Index: ix_workerpool_batches_open.
def open_batches(conn: Connection, limit: int = 20) -> list[Any]:
    stmt = (
        select(batches).where(batches.c.finished_at.is_(None)).order_by(batches.c.id).limit(limit)
    )
    return list(conn.execute(stmt))


# finished_batches: the latest finished batches (dashboard). Index:
# ix_workerpool_batches_finished, read backwards.
def finished_batches(conn: Connection, limit: int = 20) -> list[Any]:
    stmt = (
        select(batches)
        .where(batches.c.finished_at.isnot(None))
        .order_by(batches.c.finished_at.desc())
        .limit(limit)
    )
    return list(conn.execute(stmt))


# opened_after: batches committed since the last one seen (the opened counter). Index:
# pk_workerpool_batches.
def opened_after(conn: Connection, last_seen: int | None) -> tuple[int, int | None]:
    """``(how many batches have an id above last_seen, the highest id)``; with no
    ``last_seen`` yet, none are counted: the highest id is where counting starts."""
    if last_seen is None:
        return 0, conn.execute(select(func.max(batches.c.id))).scalar()
    count, highest = conn.execute(
        select(func.count(), func.max(batches.c.id)).where(batches.c.id > last_seen)
    ).one()
    return count, highest if highest is not None else last_seen


# count_open: how many batches are open. Index: ix_workerpool_batches_open.
def count_open(conn: Connection) -> int:
    return conn.execute(
        select(func.count()).select_from(batches).where(batches.c.finished_at.is_(None))
    ).scalar_one()


# callback_states: the state of each callback job (``workerpool batch show``), moved ones
# included. Index: pk_workerpool_jobs, ix_workerpool_jobs_history_id per partition.
_CALLBACK_STATES = text(f"""
SELECT id, state FROM {union("id, state", "id = ANY(CAST(:ids AS bigint[]))")} AS c
""")


def callback_states(conn: Connection, ids: Sequence[int]) -> dict[int, str]:
    if not ids:
        return {}
    return {row.id: row.state for row in conn.execute(_CALLBACK_STATES, {"ids": list(ids)})}


__all__ = [
    "Fired",
    "Opened",
    "callback_states",
    "count_open",
    "finish",
    "finished_batches",
    "member_counts",
    "member_page",
    "members_by_key",
    "open_batch",
    "open_batches",
    "outside_batch",
    "prune",
    "read_batch",
    "settle",
    "sweep",
]
