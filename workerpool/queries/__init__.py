"""Every statement that touches workerpool_jobs. Each state change is one named function.

All times come from the database clock (``now()``); the caller's clock is never stored. Every
write that finishes or changes a claimed job is fenced on its lease (``claimed_by`` and
``attempts``) and reports whether it applied, so a process that lost its lease can never overwrite
the new owner's result.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from operator import itemgetter
from typing import Any, NamedTuple

from sqlalchemy import (
    BigInteger,
    Connection,
    Integer,
    and_,
    bindparam,
    case,
    cast,
    column,
    func,
    literal,
    literal_column,
    select,
    text,
    true,
    union_all,
    update,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB, insert
from sqlalchemy.types import Text

from .errors import MAX_DELAY, IdempotencyConflict
from .schema import STATES, cron, jobs, workers

NOTIFY_CHANNEL = "workerpool_jobs"
LIVE_STATES = ("pending", "processing", "failed")

#: Columns a worker needs to run a claimed job (not the error history: it can be large).
CLAIM_COLUMNS = (
    jobs.c.id,
    jobs.c.queue,
    jobs.c.task,
    jobs.c.payload,
    jobs.c.payload_version,
    jobs.c.priority,
    jobs.c.attempts,
    jobs.c.max_attempts,
    jobs.c.key,
    jobs.c.checkpoint,
    jobs.c.run_at,
    jobs.c.claimed_at,
)


@dataclass(frozen=True)
class Lease:
    """Proof of ownership of a claimed row: who claimed it and on which attempt."""

    job_id: int
    attempt: int
    worker: str


class NewJob(NamedTuple):
    """A validated row to insert (built by WorkerPool, never by users).

    A NamedTuple, not a frozen dataclass: built once per enqueued job, and a frozen dataclass's
    ``__init__`` costs ~1.8 us against ~0.3 us.
    """

    queue: str
    task: str
    payload_json: str
    payload_version: int
    priority: int
    max_attempts: int
    key: str | None
    run_at: datetime | None
    delay: float | None


def seconds(value: float) -> timedelta:
    return timedelta(seconds=value)


def _after(delay_seconds: float):
    """``now() + delay`` on the database clock (delays are bounded by ``MAX_DELAY``)."""
    bounded = min(max(0.0, delay_seconds), MAX_DELAY)
    return func.now() + bindparam("delay", seconds(bounded), unique=True)


def _errors_append(entry: Mapping[str, Any]):
    """``errors || [{"attempt": attempts} + entry + {"at": now()}]``.

    The time comes from the database clock; the attempt from the row unless the entry names it
    (bulk releases and sweeps write one entry to rows at different attempts).
    """
    stamped = (
        func.jsonb_build_object("attempt", jobs.c.attempts)
        .op("||")(cast(literal(json.dumps(entry, default=str), Text), JSONB))
        .op("||")(func.jsonb_build_object("at", func.now()))
    )
    return jobs.c.errors.op("||")(func.jsonb_build_array(stamped))


def _fence(lease: Lease):
    return and_(
        jobs.c.id == lease.job_id,
        jobs.c.state == "processing",
        jobs.c.claimed_by == lease.worker,
        jobs.c.attempts == lease.attempt,
    )


#: ``(job_id, attempt)`` leases as two array parameters: one statement text whatever the batch
#: size (prepared once, nothing to build per call), instead of one bound pair per lease.
_LEASE_IDS = bindparam("lease_ids", type_=ARRAY(BigInteger))
_LEASES = (
    func.unnest(_LEASE_IDS, bindparam("lease_attempts", type_=ARRAY(Integer)))
    .table_valued("id", "attempt")
    .render_derived(name="lease")
)
_FENCE_MANY = and_(
    jobs.c.id == func.any(_LEASE_IDS),  # primary-key lookups, whatever else is in flight
    jobs.c.id == _LEASES.c.id,
    jobs.c.attempts == _LEASES.c.attempt,
    jobs.c.state == "processing",
    jobs.c.claimed_by == bindparam("lease_worker", type_=Text),
)


def _lease_params(worker: str, leases: Sequence[tuple[int, int]]) -> dict[str, Any]:
    return {
        "lease_worker": worker,
        "lease_ids": [job_id for job_id, _ in leases],
        "lease_attempts": [attempt for _, attempt in leases],
    }


# ---------------------------------------------------------------------------------------------
# enqueue


#: One statement per batch (DESIGN §5). The rows travel as one JSON document (far cheaper to send
#: and parse than one array per column). Ids are drawn from the sequence in input order: the
#: identity default is evaluated in the projection above the ``WITH ORDINALITY`` scan, which the
#: planner reads in ``ord`` order (it needs no sort), so the returned ids sorted ascending line up
#: with the inserted input rows whatever order RETURNING uses. A batch without keys cannot
#: conflict and skips ``ON CONFLICT`` (speculative insertion costs ~10 % of the statement); a
#: batch with keys returns each inserted row's key so skipped rows can be told apart. The NOTIFY,
#: when asked for, rides in the same statement (delivered on commit; only if a row was inserted).
_INSERT_SQL = """
WITH inserted AS (
  INSERT INTO {table} (queue, task, payload, payload_version, priority, max_attempts, key, run_at)
  SELECT queue, task, payload, payload_version, priority, max_attempts, key,
         COALESCE(run_at, now() + make_interval(secs => COALESCE(delay, 0)))
  FROM ROWS FROM (json_to_recordset(CAST(:rows AS json)) AS (
         queue text, task text, payload jsonb, payload_version int, priority smallint,
         max_attempts int, key text, run_at timestamptz, delay float8))
       WITH ORDINALITY
       AS t(queue, task, payload, payload_version, priority, max_attempts, key, run_at, delay, ord)
  ORDER BY ord{on_conflict}
  RETURNING id{returning}
){notified}
SELECT inserted.id{returning} FROM inserted{join_notified}
"""


def _insert_statement(*, keyed: bool, notify: bool) -> Any:
    return text(_INSERT_SQL.format(
        table=jobs.name,
        on_conflict="\n  ON CONFLICT (key) DO NOTHING" if keyed else "",
        returning=", key" if keyed else "",
        notified=", notified AS MATERIALIZED (SELECT pg_notify(:channel, :queues) AS sent)"
        if notify else "",
        join_notified=" CROSS JOIN notified" if notify else "",
    ))


_INSERT_STATEMENTS = {
    (keyed, notify): _insert_statement(keyed=keyed, notify=notify)
    for keyed in (False, True) for notify in (False, True)
}


def insert_jobs(conn: Connection, rows: Sequence[NewJob], *, notify: bool = False) -> list[int]:
    """Insert ``rows`` in one statement; a row whose key exists returns the existing id.

    With ``notify=True`` the same statement also sends the wake-up NOTIFY for the rows' queues
    (see :func:`notify`). Raises IdempotencyConflict (nothing written by this call once the
    caller's transaction rolls back) when an existing key holds a different task or payload.
    """
    if not rows:
        return []
    keyed = _keyed(rows)
    returned = conn.execute(_INSERT_STATEMENTS[keyed, notify], _insert_params(rows, notify)).all()
    return _ids_in_input_order(conn, rows, returned, keyed=keyed)


def insert_job_chunks(
    conn: Connection, chunks: Iterable[Sequence[NewJob]], *, notify: bool = False
) -> list[int]:
    """:func:`insert_jobs` for each chunk, all sent in one pipeline (psycopg's pipeline mode).

    The server inserts one chunk while the caller checks and builds the next (``chunks`` may be
    a generator that validates as it goes), and the statements share one network flight. Run it
    inside a transaction or savepoint: a chunk that fails to build raises after earlier chunks
    reached the server, and only the rollback takes them back.
    """
    driver = conn.connection.driver_connection
    sent: list[tuple[Sequence[NewJob], bool, Any]] = []
    with driver.pipeline():
        for rows in chunks:
            keyed = _keyed(rows)
            cursor = driver.cursor()
            cursor.execute(_driver_sql(conn.dialect, keyed, notify), _insert_params(rows, notify))
            sent.append((rows, keyed, cursor))
    ids: list[int] = []
    for rows, keyed, cursor in sent:
        ids += _ids_in_input_order(conn, rows, cursor.fetchall(), keyed=keyed)
    return ids


def can_pipeline(conn: Connection) -> bool:
    """Whether ``conn`` runs on psycopg 3, whose pipeline :func:`insert_job_chunks` needs (a
    caller's connection may come from an engine on another driver)."""
    return hasattr(conn.connection.driver_connection, "pipeline")


def _keyed(rows: Sequence[NewJob]) -> bool:
    return any(row.key is not None for row in rows)


def _insert_params(rows: Sequence[NewJob], notify: bool) -> dict[str, Any]:
    params: dict[str, Any] = {"rows": _rows_document(rows)}
    if notify:
        params.update(channel=NOTIFY_CHANNEL, queues=_queue_names(row.queue for row in rows))
    return params


@functools.lru_cache(maxsize=8)
def _driver_sql(dialect: Any, keyed: bool, notify: bool) -> str:
    """The insert as the driver's own SQL text (``%(name)s`` parameters), compiled once."""
    return str(_INSERT_STATEMENTS[keyed, notify].compile(dialect=dialect))


def _ids_in_input_order(
    conn: Connection, rows: Sequence[NewJob], returned: Sequence[Any], *, keyed: bool
) -> list[int]:
    """Each row's job id from what the insert returned: ``(id,)`` rows, or ``(id, key)``."""
    if not keyed:
        ids = sorted(row[0] for row in returned)  # ascending id = input order
        if len(ids) != len(rows):
            raise RuntimeError(f"inserted {len(ids)} of {len(rows)} rows without keys")
        return ids
    ids_keys = sorted(returned, key=itemgetter(0))  # ascending id = input order
    new_ids = _line_up(rows, ids_keys)
    missing = {row.key for row, got in zip(rows, new_ids, strict=True) if got is None}
    if missing:
        existing = _existing_by_key(conn, missing)
        for index, row in enumerate(rows):
            if new_ids[index] is None:
                new_ids[index] = _match_existing(row, existing.get(row.key))
    return new_ids  # type: ignore[return-value]


def _line_up(rows: Sequence[NewJob], returned: Sequence[Any]) -> list[int | None]:
    """Each input row's new id, walking the inserted ``(id, key)`` pairs in id order; None for a
    row whose key was already taken by an earlier job (looked up afterwards)."""
    result: list[int | None] = []
    in_batch: dict[str, int] = {}
    pairs = iter(returned)
    pending = next(pairs, None)
    for row in rows:
        if row.key is not None and row.key in in_batch:
            result.append(in_batch[row.key])  # the same job twice in one batch
        elif pending is not None and pending[1] == row.key:
            result.append(pending[0])
            if row.key is not None:
                in_batch[row.key] = pending[0]
            pending = next(pairs, None)
        elif row.key is None:
            raise RuntimeError("inserted rows came back out of input order")
        else:
            result.append(None)
    if pending is not None:
        raise RuntimeError("inserted rows came back out of input order")
    return result


def insert_one(conn: Connection, row: NewJob, *, notify_queue: bool) -> int:
    """Insert one job (and NOTIFY) in a single round trip; an existing key returns its job's id."""
    inserted = conn.execute(_INSERT_ONE_NOTIFY if notify_queue else _INSERT_ONE, {
        "queue": row.queue, "task": row.task, "payload": row.payload_json,
        "payload_version": row.payload_version, "priority": row.priority,
        "max_attempts": row.max_attempts, "key": row.key, "run_at": row.run_at,
        "delay": row.delay, "channel": NOTIFY_CHANNEL,
    }).scalar()
    if inserted is not None:
        return inserted
    return _match_existing(row, _existing_by_key(conn, {row.key}).get(row.key))


_INSERT_ONE_SQL = (
    f"INSERT INTO {jobs.name} (queue, task, payload, payload_version, priority, max_attempts, key,"
    " run_at) VALUES (:queue, :task, CAST(:payload AS jsonb), :payload_version, :priority,"
    " :max_attempts, :key, COALESCE(CAST(:run_at AS timestamptz),"
    " now() + make_interval(secs => COALESCE(CAST(:delay AS float8), 0))))"
    " ON CONFLICT (key) DO NOTHING RETURNING id"
)
_INSERT_ONE = text(_INSERT_ONE_SQL)
_INSERT_ONE_NOTIFY = text(
    f"WITH inserted AS ({_INSERT_ONE_SQL}) "
    "SELECT (SELECT id FROM inserted), pg_notify(:channel, :queue)"
)


def _rows_document(rows: Sequence[NewJob]) -> str:
    """The batch as one JSON array; each payload is already-validated JSON text, spliced in."""
    return "[" + ",".join(map(_row_json, rows)) + "]"


_ROW_JSON = (
    '{"queue":%s,"task":%s,"payload":%s,"payload_version":%d,"priority":%d,"max_attempts":%d,'
    '"key":%s,"run_at":%s,"delay":%s}'
)
#: The common row: absent fields read as NULL in ``json_to_recordset``, and a shorter document
#: is cheaper to build, send and parse.
_PLAIN_ROW_JSON = (
    '{"queue":%s,"task":%s,"payload":%s,"payload_version":%d,"priority":%d,"max_attempts":%d}'
)


def _row_json(row: NewJob) -> str:
    if row.key is None and row.run_at is None and row.delay is None:
        return _PLAIN_ROW_JSON % (
            _json_name(row.queue), _json_name(row.task), row.payload_json,
            row.payload_version, row.priority, row.max_attempts,
        )
    return _ROW_JSON % (
        _json_name(row.queue),
        _json_name(row.task),
        row.payload_json,
        row.payload_version,
        row.priority,
        row.max_attempts,
        "null" if row.key is None else json.dumps(row.key, ensure_ascii=False),
        "null" if row.run_at is None else json.dumps(row.run_at.isoformat()),
        "null" if row.delay is None else json.dumps(row.delay),
    )


@functools.lru_cache(maxsize=1024)
def _json_name(name: str) -> str:
    """Queue and task names as JSON strings (few distinct values: computed once each)."""
    return json.dumps(name)


def _existing_by_key(conn: Connection, keys: set[str]) -> dict[str, Any]:
    stmt = select(jobs.c.key, jobs.c.id, jobs.c.task, jobs.c.payload).where(
        jobs.c.key.in_(sorted(keys))
    )
    return {row.key: row for row in conn.execute(stmt)}


def _match_existing(row: NewJob, existing: Any) -> int:
    if existing is None:  # the holder of the key vanished between insert and read (pruned)
        raise IdempotencyConflict(f"key {row.key!r} is held by a job that just disappeared; retry")
    if existing.task != row.task or existing.payload != json.loads(row.payload_json):
        raise IdempotencyConflict(
            f"key {row.key!r} already belongs to job {existing.id} ({existing.task}) "
            "with a different payload"
        )
    return existing.id


#: Subscribe a listener connection to the wake-up notifications (a hint: workers also poll).
LISTEN = f"LISTEN {NOTIFY_CHANNEL}"


def notify(conn: Connection, queues: Iterable[str]) -> None:
    """Wake listening workers when the transaction commits. A hint only: workers also poll."""
    conn.execute(select(func.pg_notify(NOTIFY_CHANNEL, _queue_names(queues))))


def _queue_names(queues: Iterable[str]) -> str:
    return ",".join(sorted(set(queues)))


# ---------------------------------------------------------------------------------------------
# the claim


def _state_in(*states: str):
    """``state IN (...)`` with the states written as literals, not parameters.

    The partial indexes are defined on these literals. A parameter would hide them from a
    generic plan, so PostgreSQL would plan the prepared claim afresh on every call (~0.2 ms,
    more than executing it); with literals it reuses one plan.
    """
    assert set(states) <= set(STATES), states  # constants of this module, never input
    values = [literal_column(f"'{state}'") for state in states]
    return jobs.c.state == values[0] if len(values) == 1 else jobs.c.state.in_(values)


def claim_statement(
    *,
    queue: str,
    worker: str,
    limit: int,
    task_versions: Mapping[str, int],
    stale_after: float,
):
    """DESIGN §3: one UPDATE fed by two CTE-fenced ``SKIP LOCKED`` arms, each on its own index."""
    known = and_(
        jobs.c.task == func.any(bindparam("tasks", list(task_versions), type_=ARRAY(Text))),
        jobs.c.payload_version
        <= case(dict(task_versions), value=jobs.c.task, else_=literal(0)),
        jobs.c.attempts < jobs.c.max_attempts,
    )
    stale = (
        select(jobs.c.id)
        .where(
            jobs.c.queue == queue,
            _state_in("processing"),
            jobs.c.claimed_at < func.now() - bindparam("stale_after", seconds(stale_after)),
            known,
        )
        .order_by(jobs.c.claimed_at)
        .limit(limit)
        .with_for_update(skip_locked=True)
        .cte("stale")
    )
    due = (
        select(jobs.c.id)
        .where(
            jobs.c.queue == queue,
            _state_in("pending", "failed"),
            jobs.c.run_at <= func.now(),
            known,
        )
        .order_by(jobs.c.priority.desc(), jobs.c.run_at, jobs.c.id)
        .limit(limit)
        .with_for_update(skip_locked=True)
        .cte("due")
    )
    picked = union_all(select(stale.c.id), select(due.c.id)).limit(limit).cte("picked")
    return (
        update(jobs)
        .where(jobs.c.id == picked.c.id)
        .values(
            state="processing",
            attempts=jobs.c.attempts + 1,
            claimed_by=worker,
            claimed_at=func.now(),
        )
        .returning(*CLAIM_COLUMNS)
    )


def claim(
    conn: Connection,
    *,
    queue: str,
    worker: str,
    limit: int,
    task_versions: Mapping[str, int],
    stale_after: float,
) -> list[Any]:
    """Claim up to ``limit`` rows for ``worker``; returns them with attempts already counted."""
    if limit <= 0 or not task_versions:
        return []
    versions = tuple(sorted(task_versions.items()))
    statement = _claim_statement_for(queue, worker, limit, versions, stale_after)
    return list(conn.execute(statement).all())


@functools.lru_cache(maxsize=256)
def _claim_statement_for(
    queue: str, worker: str, limit: int, versions: tuple[tuple[str, int], ...], stale_after: float
):
    """A worker claims with the same arguments on every pass: build the expression once.

    Building it costs about 0.5 ms of Python per call (most of a claim's client-side time);
    statements are immutable, so one object serves every thread of the process.
    """
    return claim_statement(queue=queue, worker=worker, limit=limit,
                           task_versions=dict(versions), stale_after=stale_after)


# ---------------------------------------------------------------------------------------------
# outcomes (all fenced on the lease)


def complete(conn: Connection, worker: str, leases: Sequence[tuple[int, int]]) -> set[int]:
    """Mark ``(job_id, attempt)`` leases done in one statement; returns the ids that applied."""
    if not leases:
        return set()
    return set(conn.execute(_COMPLETE, _lease_params(worker, leases)).scalars())


_COMPLETE = (
    update(jobs)
    .where(_FENCE_MANY)
    .values(state="done", finished_at=func.now())
    .returning(jobs.c.id)
)


def fail(conn: Connection, lease: Lease, error: Mapping[str, Any], delay: float) -> str | None:
    """A failed attempt: ``failed`` until ``now()+delay``, or ``dead/exhausted`` at the cap.

    Returns the new state, or None when the lease was lost (nothing written).
    """
    exhausted = jobs.c.attempts >= jobs.c.max_attempts
    stmt = (
        update(jobs)
        .where(_fence(lease))
        .values(
            state=case((exhausted, "dead"), else_="failed"),
            dead_reason=case((exhausted, "exhausted"), else_=None),
            run_at=case((exhausted, jobs.c.run_at), else_=_after(delay)),
            finished_at=case((exhausted, func.now()), else_=None),
            errors=_errors_append(error),
        )
        .returning(jobs.c.state)
    )
    return conn.execute(stmt).scalar()


def mark_permanent(conn: Connection, lease: Lease, error: Mapping[str, Any]) -> bool:
    """``Permanent``: dead at once with ``dead_reason='permanent'``."""
    stmt = (
        update(jobs)
        .where(_fence(lease))
        .values(
            state="dead",
            dead_reason="permanent",
            finished_at=func.now(),
            errors=_errors_append(error),
        )
    )
    return conn.execute(stmt).rowcount == 1


def snooze(conn: Connection, lease: Lease, delay: float) -> bool:
    """``RetryLater``: pending again at ``now()+delay``; the attempt is given back."""
    stmt = (
        update(jobs)
        .where(_fence(lease))
        .values(state="pending", attempts=jobs.c.attempts - 1, run_at=_after(delay))
    )
    return conn.execute(stmt).rowcount == 1


#: A released job waits this long before anyone may claim it again: its handler may still be
#: running in the exiting process, which is gone by then (the supervisor SIGKILLs what is left
#: 2 s after the drain deadline). Without it another replica could run the job twice at once.
RELEASE_HOLD = 3.0


def give_back(conn: Connection, lease: Lease, error: Mapping[str, Any]) -> bool:
    """Drain: pending again shortly, attempt refunded, interruption recorded, checkpoint kept."""
    stmt = (
        update(jobs)
        .where(_fence(lease))
        .values(
            state="pending",
            attempts=jobs.c.attempts - 1,
            run_at=_after(RELEASE_HOLD),
            errors=_errors_append(error),
        )
    )
    return conn.execute(stmt).rowcount == 1


def renew(conn: Connection, worker: str, leases: Sequence[tuple[int, int]]) -> set[int]:
    """Extend the leases still held by ``worker``; returns the ids renewed."""
    if not leases:
        return set()
    return set(conn.execute(_RENEW, _lease_params(worker, leases)).scalars())


_RENEW = update(jobs).where(_FENCE_MANY).values(claimed_at=func.now()).returning(jobs.c.id)


def save_checkpoint(conn: Connection, lease: Lease, checkpoint_json: str) -> bool:
    """Durable progress for the job, written only while the lease holds."""
    stmt = (
        update(jobs)
        .where(_fence(lease))
        .values(checkpoint=cast(literal(checkpoint_json, Text), JSONB))
    )
    return conn.execute(stmt).rowcount == 1


# ---------------------------------------------------------------------------------------------
# recovery


#: A crashed process's jobs come back spread over ``random() * min(cap, 0.5 s * 2^(attempts-1))``:
#: jobs that died together (a poison message and its innocent neighbours in one process) are
#: then rarely claimed together again, so the neighbours do not spend their attempts with it.
ORPHAN_SPREAD_CAP = 30.0


def _orphan_spread():
    window = func.least(ORPHAN_SPREAD_CAP, 0.5 * func.power(2.0, jobs.c.attempts - 1))
    return func.now() + func.make_interval(0, 0, 0, 0, 0, 0, func.random() * window)


def _orphan_values(error: Mapping[str, Any]) -> dict[str, Any]:
    exhausted = jobs.c.attempts >= jobs.c.max_attempts
    return {
        "state": case((exhausted, "dead"), else_="pending"),
        "dead_reason": case((exhausted, "abandoned"), else_=None),
        "finished_at": case((exhausted, func.now()), else_=None),
        "run_at": case((exhausted, jobs.c.run_at), else_=_orphan_spread()),
        "errors": _errors_append(error),
    }


def reclaim_from_dead_worker(conn: Connection, worker: str, error: Mapping[str, Any]) -> list[Any]:
    """A process died: its rows go back to ``pending`` (attempt stays spent) or ``dead/abandoned``.

    Returns ``(id, queue, task, state, attempts)`` of every row changed.
    """
    stmt = (
        update(jobs)
        .where(jobs.c.state == "processing", jobs.c.claimed_by == worker)
        .values(**_orphan_values(error))
        .returning(jobs.c.id, jobs.c.queue, jobs.c.task, jobs.c.state, jobs.c.attempts)
    )
    return list(conn.execute(stmt))


def sweep_abandoned(
    conn: Connection, queue: str, stale_after: float, error: Mapping[str, Any]
) -> list[Any]:
    """Stale leases with no attempts left: the claim will never take them, so dead-letter them."""
    stmt = (
        update(jobs)
        .where(
            jobs.c.queue == queue,
            jobs.c.state == "processing",
            jobs.c.claimed_at < func.now() - bindparam("stale_after", seconds(stale_after)),
            jobs.c.attempts >= jobs.c.max_attempts,
        )
        .values(state="dead", dead_reason="abandoned", finished_at=func.now())
        .values(errors=_errors_append(error))
        .returning(jobs.c.id, jobs.c.queue, jobs.c.task, jobs.c.state, jobs.c.attempts)
    )
    return list(conn.execute(stmt))


# ---------------------------------------------------------------------------------------------
# live worker processes


def register_worker(
    conn: Connection, worker: str, *, host: str, pid: int, queue: str, tasks: Mapping[str, int]
) -> None:
    """A child process announces itself (one row per process boot)."""
    stmt = insert(workers).values(id=worker, host=host, pid=pid, queue=queue, tasks=dict(tasks))
    conn.execute(stmt.on_conflict_do_update(index_elements=[workers.c.id],
                                            set_={"last_seen": func.now()}))


def beat_worker(conn: Connection, worker: str) -> bool:
    """The process is alive; returns False if its row was pruned (it should re-register)."""
    stmt = update(workers).where(workers.c.id == worker).values(last_seen=func.now())
    return conn.execute(stmt).rowcount == 1


def unregister_worker(conn: Connection, worker: str) -> None:
    conn.execute(workers.delete().where(workers.c.id == worker))


def prune_workers(conn: Connection, older_than: float) -> list[str]:
    """Forget processes not seen for ``older_than`` seconds; returns their ids."""
    stmt = (
        workers.delete()
        .where(workers.c.last_seen < func.now() - bindparam("older", seconds(older_than)))
        .returning(workers.c.id)
    )
    return list(conn.execute(stmt).scalars())


def database_now(conn: Connection) -> datetime:
    return conn.execute(select(func.now())).scalar_one()


# ---------------------------------------------------------------------------------------------
# cron, maintenance, dead-letter queue and status (issue 5)


def ensure_crons(conn: Connection, specs: Sequence[tuple[str, str, str, str]]) -> None:
    """Create the schedule row of each ``(name, queue, expression, timezone)`` not seen before."""
    if not specs:
        return
    rows = [{"name": n, "queue": q, "expression": e, "timezone": tz} for n, q, e, tz in specs]
    conn.execute(insert(cron).values(rows).on_conflict_do_nothing(index_elements=[cron.c.name]))


def lock_crons(conn: Connection, names: Sequence[str]) -> list[Any]:
    """Lock the schedule rows no other scheduler holds; each comes with its last job's state.

    ``SKIP LOCKED``: a row another replica is scheduling right now is its business this pass.
    """
    locked = (
        select(cron)
        .where(cron.c.name.in_(list(names)))
        .order_by(cron.c.name)
        .with_for_update(skip_locked=True)
        .cte("locked")
    )
    stmt = select(locked, jobs.c.state.label("last_job_state")).outerjoin(
        jobs, jobs.c.id == locked.c.last_job_id
    )
    return list(conn.execute(stmt))


def reset_cron(
    conn: Connection, name: str, *, queue: str, expression: str, timezone: str, next_tick: datetime
) -> None:
    """A new or changed schedule: its first tick is ``next_tick``."""
    stmt = (
        update(cron)
        .where(cron.c.name == name)
        .values(queue=queue, expression=expression, timezone=timezone, next_tick=next_tick,
                updated_at=func.now())
    )
    conn.execute(stmt)


def advance_cron(
    conn: Connection,
    name: str,
    *,
    queue: str,
    tick: datetime,
    next_tick: datetime,
    job_id: int | None = None,
    skipped: bool = False,
) -> None:
    """Tick ``tick`` is handled: it became job ``job_id``, or was skipped (counted if
    ``skipped``)."""
    values: dict[str, Any] = {
        "queue": queue, "last_tick": tick, "next_tick": next_tick, "updated_at": func.now()}
    if job_id is not None:
        values["last_job_id"] = job_id
    if skipped:
        values["skipped"] = cron.c.skipped + 1
    conn.execute(update(cron).where(cron.c.name == name).values(**values))


def prune_finished(conn: Connection, older_than: float, limit: int) -> int:
    """Delete up to ``limit`` done/cancelled rows finished more than ``older_than`` seconds ago.

    Dead rows are never pruned: they stay until an operator purges them.
    """
    return conn.execute(prune_finished_statement(older_than, limit)).rowcount


def prune_finished_statement(older_than: float, limit: int):
    doomed = (
        select(jobs.c.id)
        .where(
            jobs.c.state.in_(("done", "cancelled")),
            jobs.c.finished_at < func.now() - bindparam("older", seconds(older_than)),
        )
        .order_by(jobs.c.finished_at)
        .limit(limit)
        .with_for_update(skip_locked=True)
        .cte("doomed")
    )
    # = ANY(ARRAY(...)): probes the primary key; a join to the CTE may hash the whole table
    ids = func.array(select(doomed.c.id).scalar_subquery())
    return jobs.delete().where(jobs.c.id == func.any(ids))


def dead_where(
    *,
    queue: str | None = None,
    task: str | None = None,
    reason: str | None = None,
    since: datetime | timedelta | None = None,
    older_than: timedelta | None = None,
    ids: Sequence[int] | None = None,
):
    """The WHERE clause selecting dead rows by the operator's filters (all optional, ANDed)."""
    clauses = [jobs.c.state == "dead"]
    if queue is not None:
        clauses.append(jobs.c.queue == queue)
    if task is not None:
        clauses.append(jobs.c.task == task)
    if reason is not None:
        clauses.append(jobs.c.dead_reason == reason)
    if isinstance(since, timedelta):
        clauses.append(jobs.c.finished_at >= func.now() - bindparam("since_age", since))
    elif since is not None:
        clauses.append(jobs.c.finished_at >= bindparam("since", since))
    if older_than is not None:
        clauses.append(jobs.c.finished_at < func.now() - bindparam("older_than", older_than))
    if ids is not None:
        clauses.append(jobs.c.id == func.any(bindparam("ids", list(ids), type_=ARRAY(BigInteger))))
    return and_(*clauses)


DEAD_COLUMNS = (
    jobs.c.id,
    jobs.c.queue,
    jobs.c.task,
    jobs.c.payload,
    jobs.c.payload_version,
    jobs.c.dead_reason,
    jobs.c.attempts,
    jobs.c.max_attempts,
    jobs.c.key,
    jobs.c.created_at,
    jobs.c.finished_at,
    jobs.c.replays,
    func.jsonb_array_length(jobs.c.errors).label("error_count"),
    jobs.c.errors.op("->")(-1).label("last_error"),
)


def list_dead(conn: Connection, where, limit: int | None) -> list[Any]:
    """Dead rows matching ``where``, most recently dead first (errors: count and last only)."""
    stmt = select(*DEAD_COLUMNS).where(where).order_by(jobs.c.finished_at.desc(), jobs.c.id.desc())
    return list(conn.execute(stmt.limit(limit) if limit else stmt))


def count_dead(conn: Connection, where) -> int:
    return conn.execute(select(func.count()).select_from(jobs).where(where)).scalar_one()


def dead_ids(conn: Connection, where) -> list[int]:
    return list(conn.execute(select(jobs.c.id).where(where).order_by(jobs.c.id)).scalars())


def dead_tasks(conn: Connection, where) -> dict[str, int]:
    """How many matching dead rows each task has."""
    stmt = select(jobs.c.task, func.count()).where(where).group_by(jobs.c.task)
    return {task: count for task, count in conn.execute(stmt)}


def replay_dead(conn: Connection, ids: Sequence[int], by: str) -> list[Any]:
    """Dead rows back to ``pending`` now with attempts reset; errors kept; lineage appended.

    Each row's ``replays`` gets ``{at, attempts, dead_reason, finished_at, by}``. Rows that are no
    longer dead are left alone (replaying twice is a no-op). Returns ``(id, queue)`` replayed.
    """
    entry = func.jsonb_build_object(
        "at", func.now(),
        "attempts", jobs.c.attempts,
        "dead_reason", jobs.c.dead_reason,
        "finished_at", jobs.c.finished_at,
        "by", literal(by, Text),
    )
    stmt = (
        update(jobs)
        .where(dead_where(ids=ids))
        .values(
            state="pending",
            dead_reason=None,
            attempts=0,
            run_at=func.now(),
            finished_at=None,
            claimed_by=None,
            claimed_at=None,
            replays=jobs.c.replays.op("||")(func.jsonb_build_array(entry)),
        )
        .returning(jobs.c.id, jobs.c.queue)
    )
    return list(conn.execute(stmt))


def purge_dead(conn: Connection, ids: Sequence[int]) -> list[int]:
    """Delete these rows if they are still dead; returns the ids deleted."""
    stmt = jobs.delete().where(dead_where(ids=ids)).returning(jobs.c.id)
    return list(conn.execute(stmt).scalars())


def state_counts(conn: Connection) -> list[Any]:
    """``(queue, state, dead_reason, count)`` over the whole table."""
    stmt = select(jobs.c.queue, jobs.c.state, jobs.c.dead_reason, func.count().label("count"))
    return list(conn.execute(stmt.group_by(jobs.c.queue, jobs.c.state, jobs.c.dead_reason)))


def oldest_due_ages(conn: Connection) -> dict[str, float]:
    """Per queue: seconds the oldest due (pending or failed, ``run_at`` passed) row has waited."""
    age = func.extract("epoch", func.now() - func.min(jobs.c.run_at))
    stmt = (
        select(jobs.c.queue, age)
        .where(jobs.c.state.in_(("pending", "failed")), jobs.c.run_at <= func.now())
        .group_by(jobs.c.queue)
    )
    return {queue: float(seconds_) for queue, seconds_ in conn.execute(stmt)}


def unrunnable(conn: Connection, known: Mapping[str, Mapping[str, int]]) -> list[Any]:
    """Waiting rows of the queues in ``known`` that no listed task version can run.

    ``known``: queue → task → newest payload version a worker knows. Returns
    ``(queue, task, payload_version, count, known_version)``; ``known_version`` None = unknown task.
    """
    if not known:
        return []
    stmt = text(
        f"""
        WITH known AS (
            SELECT q.key AS queue, t.key AS task, t.value::int AS version
            FROM jsonb_each(CAST(:known AS jsonb)) AS q, jsonb_each_text(q.value) AS t)
        SELECT j.queue, j.task, j.payload_version, count(*) AS count,
               max(k.version) AS known_version
        FROM {jobs.name} AS j
        LEFT JOIN known AS k ON k.queue = j.queue AND k.task = j.task
        WHERE j.state IN ('pending', 'failed') AND j.queue = ANY(:queues)
        GROUP BY j.queue, j.task, j.payload_version
        HAVING max(k.version) IS NULL OR j.payload_version > max(k.version)
        ORDER BY j.queue, j.task, j.payload_version
        """
    )
    params = {"known": json.dumps({q: dict(t) for q, t in known.items()}), "queues": list(known)}
    return list(conn.execute(stmt, params))


def list_workers(conn: Connection) -> list[Any]:
    """Every registered process with the seconds since it was last seen (database clock)."""
    age = func.extract("epoch", func.now() - workers.c.last_seen).label("age")
    stmt = select(workers, age).order_by(workers.c.queue, workers.c.host, workers.c.pid)
    return list(conn.execute(stmt))


def list_crons(conn: Connection) -> list[Any]:
    """Every schedule row with its last job's state."""
    stmt = (
        select(cron, jobs.c.state.label("last_job_state"))
        .outerjoin(jobs, jobs.c.id == cron.c.last_job_id)
        .order_by(cron.c.name)
    )
    return list(conn.execute(stmt))


# ---------------------------------------------------------------------------------------------
# worker runtime: time limits


def _milliseconds(value: float) -> str:
    return f"{max(1, round(value * 1000))}ms"


def bound_transaction(
    conn: Connection, *, statement_timeout: float, lock_timeout: float, idle_timeout: float
) -> None:
    """Time limits (seconds) for the rest of this transaction only.

    ``set_config(..., is_local => true)`` is ``SET LOCAL``: nothing outlives the transaction, so
    it is safe behind PgBouncer in transaction pooling mode. A statement that runs too long
    (57014), waits too long for a lock (55P03) or a transaction left idle (25P03) errors out
    instead of hanging the worker.
    """
    conn.execute(_BOUND_TRANSACTION, time_limits(
        statement_timeout=statement_timeout, lock_timeout=lock_timeout, idle_timeout=idle_timeout))


def time_limits(*, statement_timeout: float, lock_timeout: float,
                idle_timeout: float) -> dict[str, str]:
    """The three limits (seconds) as PostgreSQL settings: ``{name: "<n>ms"}``."""
    return {
        "statement_timeout": _milliseconds(statement_timeout),
        "lock_timeout": _milliseconds(lock_timeout),
        "idle_in_transaction_session_timeout": _milliseconds(idle_timeout),
    }


#: Built once: this runs at the start of every worker transaction.
_BOUND_TRANSACTION = text(
    "SELECT set_config('statement_timeout', :statement_timeout, true),"
    " set_config('lock_timeout', :lock_timeout, true),"
    " set_config('idle_in_transaction_session_timeout', :idle_in_transaction_session_timeout,"
    " true)"
)




# ---------------------------------------------------------------------------------------------
# read-outs (the demo's live view and summary)


def count_by_queue_and_state(conn: Connection) -> list[Any]:
    """``(queue, state, count)`` for every queue and state that has rows."""
    stmt = (
        select(jobs.c.queue, jobs.c.state, func.count().label("count"))
        .group_by(jobs.c.queue, jobs.c.state)
        .order_by(jobs.c.queue, jobs.c.state)
    )
    return list(conn.execute(stmt))


def job_outcomes(conn: Connection) -> list[Any]:
    """One row per job, without payloads or error histories: where each job ended and how."""
    stmt = select(
        jobs.c.id,
        jobs.c.queue,
        jobs.c.task,
        jobs.c.key,
        jobs.c.state,
        jobs.c.dead_reason,
        jobs.c.attempts,
        jobs.c.max_attempts,
        jobs.c.checkpoint,
        jobs.c.claimed_at,
        jobs.c.finished_at,
    ).order_by(jobs.c.id)
    return list(conn.execute(stmt))


def count_errors_by_type(conn: Connection) -> list[Any]:
    """``(queue, type, count)`` over every entry of every job's error history."""
    elements = func.jsonb_array_elements(jobs.c.errors)
    entry = elements.table_valued(column("entry", JSONB)).render_derived()
    kind = entry.c.entry["type"].astext.label("type")
    stmt = (
        select(jobs.c.queue, kind, func.count().label("count"))
        .select_from(jobs.join(entry, true()))
        .group_by(jobs.c.queue, kind)
        .order_by(jobs.c.queue, func.count().desc())
    )
    return list(conn.execute(stmt))

# ---------------------------------------------------------------------------------------------
# prefetch: claimed jobs a worker gives back before any handler started them


def return_unstarted(conn: Connection, worker: str, leases: Sequence[tuple[int, int]]) -> set[int]:
    """Give back prefetched jobs that never started: ``pending``, attempt refunded, no error.

    ``run_at`` is kept, so each job keeps its place in line (it is already due). Fenced on the
    leases like every finishing write; returns the ids given back.
    """
    if not leases:
        return set()
    return set(conn.execute(_RETURN_UNSTARTED, _lease_params(worker, leases)).scalars())


_RETURN_UNSTARTED = (
    update(jobs)
    .where(_FENCE_MANY)
    .values(state="pending", attempts=jobs.c.attempts - 1)
    .returning(jobs.c.id)
)

__all__ = [
    "DEAD_COLUMNS",
    "Lease",
    "NewJob",
    "bound_transaction",
    "claim",
    "claim_statement",
    "complete",
    "count_by_queue_and_state",
    "count_errors_by_type",
    "beat_worker",
    "database_now",
    "fail",
    "insert_jobs",
    "job_outcomes",
    "mark_permanent",
    "notify",
    "prune_workers",
    "register_worker",
    "give_back",
    "reclaim_from_dead_worker",
    "renew",
    "save_checkpoint",
    "snooze",
    "sweep_abandoned",
    "unregister_worker",
    # issue 5: cron, maintenance, dead-letter queue, status
    "advance_cron",
    "count_dead",
    "dead_ids",
    "dead_tasks",
    "dead_where",
    "ensure_crons",
    "list_crons",
    "list_dead",
    "list_workers",
    "lock_crons",
    "oldest_due_ages",
    "prune_finished",
    "prune_finished_statement",
    "purge_dead",
    "replay_dead",
    "reset_cron",
    "state_counts",
    "unrunnable",
    # prefetch
    "return_unstarted",
]
