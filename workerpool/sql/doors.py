"""The doors in: SQL's ``workerpool_enqueue`` (migration 0022), the registered tasks it reads,
and the bounds of bounded queues (``workerpool_queue_room``, the one definition of "full").

Each refusal of those functions carries its own SQLSTATE; :func:`refusal` turns it back into
the exception Python's enqueue raises for the same input.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, delete, func, select, text
from sqlalchemy import exc as sa_exc
from sqlalchemy.dialects.postgresql import insert

from ..model.errors import IdempotencyConflict, InvalidJob, PayloadError, QueueFull, UnknownTask
from .schema import queue_bounds, tasks

#: The SQLSTATEs of migration 0022's refusals, and what each is in Python.
QUEUE_FULL = "WP001"
UNKNOWN_TASK = "WP002"
KEY_TAKEN = "WP003"
BAD_ARGUMENT = "22023"
#: JSON that jsonb does not take (``\u0000``, a lone surrogate), and a bad cast of an argument.
BAD_JSON = ("22P05", "22P02", "22007", "22008", "22003")
_REFUSALS: dict[str, type[Exception]] = {
    QUEUE_FULL: QueueFull,
    UNKNOWN_TASK: UnknownTask,
    KEY_TAKEN: IdempotencyConflict,
    BAD_ARGUMENT: InvalidJob,
    **dict.fromkeys(BAD_JSON, PayloadError),
}


def refusal(exc: BaseException) -> Exception | None:
    """The named exception for a refusal of the doors' functions (``exc`` from psycopg or
    SQLAlchemy), with the server's one line; None for any other error."""
    error = exc.orig if isinstance(exc, sa_exc.DBAPIError) else exc
    kind = _REFUSALS.get(getattr(error, "sqlstate", None) or "")
    if kind is None:
        return None
    diag = getattr(error, "diag", None)
    line = getattr(diag, "message_primary", None) or str(error).splitlines()[0]
    return kind(line)


@contextmanager
def refusals() -> Iterator[None]:
    """Raise a door's refusal as its named exception (the database error as its cause)."""
    try:
        yield
    except Exception as exc:
        named = refusal(exc)
        if named is None:
            raise
        raise named from exc


# ---------------------------------------------------------------------------------------------
# bounded queues


_ROOM = text("SELECT workerpool_queue_room(:queue, :adding, :max_pending)")


# check_room: QueueFull unless ``adding`` more jobs fit under the bound. Index:
# pk_workerpool_queue_credits; when the credit is spent, ix_workerpool_jobs_due and
# ix_workerpool_jobs_waiting, each read to the bound at most.
def check_room(conn: Connection, queue: str, adding: int, max_pending: int) -> int:
    """The room left in ``queue`` once ``adding`` jobs are in; QueueFull if they do not fit
    (raised here, not by the server: a caller's transaction stays usable).

    Counts the queue's waiting jobs less the credit granted to autocommit enqueues and not yet
    taken (``workerpool_queue_room``, migration 0023), writing and locking nothing. Jobs of
    concurrent transactions that have not committed are not counted: producers that enqueue at
    once may pass the bound by what they hold uncommitted, never by more."""
    params = {"queue": queue, "adding": adding, "max_pending": max_pending}
    room = int(conn.execute(_ROOM, params).scalar_one())
    if room < 0:
        raise queue_full(queue, adding, max_pending, room)
    return room


def queue_full(queue: str, adding: int, max_pending: int, room: int) -> QueueFull:
    """The refusal of ``adding`` jobs where the room check found ``room`` < 0. What it counted
    includes the credit still reserved for autocommit enqueues (a hundredth of the bound at
    most), so the message says so."""
    waiting = max_pending - adding - room
    return QueueFull(
        f"queue {queue} is full: {waiting} jobs waiting to run or reserved, bound {max_pending}, "
        f"refused {adding} more",
        queue,
    )


# set_bound: a queue's bound, from the CLI or its workers. Index: pk_workerpool_queue_bounds.
def set_bound(conn: Connection, queue: str, max_pending: int, set_by: str | None) -> None:
    stmt = insert(queue_bounds).values(queue=queue, max_pending=max_pending, set_by=set_by)
    conn.execute(
        stmt.on_conflict_do_update(
            index_elements=[queue_bounds.c.queue],
            set_={
                "max_pending": stmt.excluded.max_pending,
                "set_by": stmt.excluded.set_by,
                "set_at": func.now(),
            },
        )
    )


# clear_bound: the queue is unbounded again. Index: pk_workerpool_queue_bounds.
def clear_bound(conn: Connection, queue: str) -> bool:
    """Whether the queue had a bound."""
    return conn.execute(delete(queue_bounds).where(queue_bounds.c.queue == queue)).rowcount > 0


# read_bounds: every bounded queue. Index: none (one row per bounded queue).
def read_bounds(conn: Connection) -> dict[str, int]:
    rows = conn.execute(select(queue_bounds.c.queue, queue_bounds.c.max_pending))
    return {row.queue: row.max_pending for row in rows}


# ---------------------------------------------------------------------------------------------
# registered tasks


# register_tasks: the tasks a worker runs, for the doors. Index: pk_workerpool_tasks.
def register_tasks(conn: Connection, rows: Sequence[Mapping[str, Any]]) -> None:
    """Insert or refresh each task's row (the last worker to start wins: a deploy's new code)."""
    if not rows:
        return
    stmt = insert(tasks).values([dict(row) for row in rows])
    changed = ("queue", "max_attempts", "priority", "payload_version", "payload_limit", "params")
    conn.execute(
        stmt.on_conflict_do_update(
            index_elements=[tasks.c.task],
            set_={**{name: stmt.excluded[name] for name in changed}, "registered_at": func.now()},
        )
    )


# read_tasks: every registered task with its queue's bound, by name, for the dashboard.
# Index: none (one row per task: a scan of a small table, joined on pk_workerpool_queue_bounds).
def read_tasks(conn: Connection) -> list[Any]:
    """Each ``workerpool_tasks`` row and ``max_pending`` (None: its queue is unbounded)."""
    joined = tasks.outerjoin(queue_bounds, queue_bounds.c.queue == tasks.c.queue)
    stmt = select(tasks, queue_bounds.c.max_pending).select_from(joined).order_by(tasks.c.task)
    return list(conn.execute(stmt))


# publish: what a worker (or ``pool.register_tasks``) tells the doors. Indexes: the two pks.
def publish(
    conn: Connection,
    task_rows: Sequence[Mapping[str, Any]],
    bounds: Mapping[str, int],
    set_by: str | None,
) -> None:
    """The tasks, and the bounds the code declares (a bound set by hand on a queue whose code
    declares none stays as it is)."""
    register_tasks(conn, task_rows)
    for queue, max_pending in bounds.items():
        set_bound(conn, queue, max_pending, set_by)


# ---------------------------------------------------------------------------------------------
# enqueue through the SQL door (HTTP's)


_ENQUEUE = text(
    "SELECT workerpool_enqueue(:task, CAST(:payload AS jsonb), queue => :queue, key => :key,"
    " run_at => :run_at, priority => :priority, max_attempts => :max_attempts,"
    " tags => CAST(:tags AS text[]))"
)


# enqueue: one job through workerpool_enqueue, its checks and its bound. Index: those of the
# function (pk_workerpool_tasks, pk_workerpool_queue_bounds, uq_workerpool_jobs_key).
def enqueue(
    conn: Connection,
    task: str,
    payload_json: str,
    *,
    queue: str | None = None,
    key: str | None = None,
    run_at: datetime | None = None,
    priority: int | None = None,
    max_attempts: int | None = None,
    tags: Sequence[str] | None = None,
) -> int:
    """The job's id; a refusal raises its named exception (nothing written)."""
    params = {
        "task": task,
        "payload": payload_json,
        "queue": queue,
        "key": key,
        "run_at": run_at,
        "priority": priority,
        "max_attempts": max_attempts,
        "tags": None if tags is None else list(tags),
    }
    with refusals():
        return int(conn.execute(_ENQUEUE, params).scalar_one())
