"""The history table: finished jobs moved out of the jobs table, its partitions, its reads.

The maintenance child moves done and cancelled rows into ``workerpool_jobs_history`` in batches
(:func:`move`: one statement, a DELETE feeding an INSERT, so a move interrupted at any instant
rolls back whole: no row lost, none in both tables). One replica at a time moves and keeps the
partitions: every such transaction first takes :data:`HISTORY_LOCK` (one per schema) with
``pg_try_advisory_xact_lock``, and a replica that does not get it skips its turn.

Rows that stay in the jobs table (docs/storage.md): dead ones (the dead-letter queue replays
them in place), rows still holding their key (the unique index on the jobs table stays the one
arbiter of a key, and the enqueue reads nothing else), members of a batch still open (its
outcome counts its cancelled members), cancelled dependents (a replayed parent reopens them),
and rows of tasks with their own ``result_ttl`` (pruned by row, as before).

Readers of one job read both tables in one statement (``UNION ALL``), or the jobs table and then
the history: a row's move commits whole, so the second read sees it if the first did not.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, text

from ..model.history import Partition
from ..model.states import PRUNED_STATES, JobState
from .schema import batches, dependencies, finished_minutes, history, jobs

JOBS = jobs.name
HISTORY = history.name
MINUTES = finished_minutes.name
COLUMNS = ", ".join(column.name for column in jobs.columns)
#: The advisory lock of the mover and partition keeper (one replica at a time).
HISTORY_LOCK = 0x776B_6869_7374  # 'wkhist'


def _states(states: Sequence[str]) -> str:
    return ", ".join(f"'{state}'" for state in states)


def union(columns: str, where: str) -> str:
    """``SELECT columns ... WHERE where`` over the jobs table and the history, as one relation
    (each branch keeps its own indexes; the planner pushes conditions into both)."""
    return (
        f"(SELECT {columns} FROM {JOBS} WHERE {where}"
        f" UNION ALL SELECT {columns} FROM {HISTORY} WHERE {where})"
    )


# try_lock: whether this transaction is the one mover of its schema's history: another
# schema's key is HISTORY_LOCK mixed with its name (the default schema's is HISTORY_LOCK, as
# it always was, so replicas of two versions still exclude each other). Index: none.
_TRY_LOCK = text(
    "SELECT pg_try_advisory_xact_lock(CAST(:key AS bigint) # CASE current_schema()"
    " WHEN 'public' THEN 0 ELSE CAST(hashtext(current_schema()) AS bigint) END)"
)


def try_lock(conn: Connection) -> bool:
    return bool(conn.execute(_TRY_LOCK, {"key": HISTORY_LOCK}).scalar_one())


# ---------------------------------------------------------------------------------------------
# partitions


# partitions: the history's partitions and their bounds. Index: none (the catalog).
_PARTITIONS = text(r"""
SELECT c.relname AS name, CAST(b[1] AS timestamptz) AS lower, CAST(b[2] AS timestamptz) AS upper
FROM pg_inherits AS i JOIN pg_class AS c ON c.oid = i.inhrelid
CROSS JOIN LATERAL regexp_match(pg_get_expr(c.relpartbound, c.oid),
                                'FROM \(''([^'']*)''\) TO \(''([^'']*)''\)') AS b
WHERE i.inhparent = CAST(:parent AS regclass)
ORDER BY 2
""")


def partitions(conn: Connection) -> list[Partition]:
    rows = conn.execute(_PARTITIONS, {"parent": HISTORY})
    return [Partition(row.name, row.lower, row.upper) for row in rows]


# create_partition, drop_partition: through the owner's functions (migration 0017), so the
# least-privilege worker role keeps the partitions without CREATE on the schema or owning the
# history (docs/roles.md). Index: none (DDL).
_CREATE_PARTITION = text("SELECT workerpool_history_create_partition(:lower, :upper)")
_DROP_PARTITION = text("SELECT workerpool_history_drop_partition(:name)")


def create_partition(conn: Connection, part: Partition) -> None:
    """Create an empty table and attach it: ATTACH holds SHARE UPDATE EXCLUSIVE on the history
    (reads and moves go on), where CREATE ... PARTITION OF would hold ACCESS EXCLUSIVE. The
    partitioned indexes are built on it as it attaches (empty: instant). The function names
    the table as :func:`workerpool.model.history.partition` does."""
    conn.execute(_CREATE_PARTITION, {"lower": part.lower, "upper": part.upper})


def drop_partition(conn: Connection, part: Partition) -> None:
    """The retention: the partition's rows go with its files, no row deleted, nothing left to
    vacuum. Holds ACCESS EXCLUSIVE on the history until commit (the caller's lock_timeout
    bounds the wait behind a running read)."""
    conn.execute(_DROP_PARTITION, {"name": part.name})


# ---------------------------------------------------------------------------------------------
# the move


#: A done or cancelled row ``j`` that may move (see the module docstring for what stays). Of
#: such rows, those in the unique index (KEY_HELD) are the ones whose key scope is forever
#: (NULL) or ``for``.
MOVABLE = f"""
(j.key IS NULL OR j.key_scope IN ('live', 'expired'))
  AND (j.batch_id IS NULL OR NOT EXISTS (
    SELECT 1 FROM {batches.name} AS b WHERE b.id = j.batch_id AND b.finished_at IS NULL))
  AND (j.state = '{JobState.DONE}' OR NOT EXISTS (
    SELECT 1 FROM {dependencies.name} AS e WHERE e.job_id = j.id))
"""

# move: up to :limit movable rows finished in [:floor, now() - :delay) → the history, counted
# in the finished minutes, in one statement. Index: ix_workerpool_jobs_finished (the batch,
# oldest first), pk_workerpool_jobs (the delete), then each row's partition and its indexes,
# pk_workerpool_finished_minutes (the counts).
_MOVE = text(f"""
WITH doomed AS (
  SELECT j.id FROM {JOBS} AS j
  WHERE j.state IN ({_states(PRUNED_STATES)})
    AND j.finished_at >= :floor AND j.finished_at < now() - make_interval(secs => :delay)
    AND j.task <> ALL(CAST(:kept AS text[]))
    AND {MOVABLE.strip()}
  ORDER BY j.finished_at LIMIT :limit
  FOR UPDATE SKIP LOCKED
), moved AS (
  DELETE FROM {JOBS} WHERE id = ANY(ARRAY(SELECT id FROM doomed)) RETURNING {COLUMNS}
), counted AS (
  INSERT INTO {MINUTES} AS m (minute, queue, state, count)
  SELECT date_trunc('minute', finished_at), queue, state, count(*) FROM moved GROUP BY 1, 2, 3
  ON CONFLICT (minute, queue, state) DO UPDATE SET count = m.count + EXCLUDED.count
)
INSERT INTO {HISTORY} ({COLUMNS}) SELECT {COLUMNS} FROM moved
""")


def move(
    conn: Connection, *, floor: datetime, delay: float, limit: int, kept: Sequence[str] = ()
) -> int:
    """Move up to ``limit`` rows finished since ``floor`` and at least ``delay`` seconds ago
    (not of the ``kept`` tasks); returns how many moved."""
    params = {"floor": floor, "delay": delay, "limit": limit, "kept": sorted(kept)}
    return conn.execute(_MOVE, params).rowcount


# prune_minutes: the counts of minutes past the retention (their partitions are gone or going).
# Index: pk_workerpool_finished_minutes.
_PRUNE_MINUTES = text(f"""
DELETE FROM {MINUTES} WHERE minute < now() - make_interval(secs => :older)
""")


def prune_minutes(conn: Connection, older_than: float) -> int:
    """Delete the finished counts of minutes more than ``older_than`` seconds ago."""
    return conn.execute(_PRUNE_MINUTES, {"older": older_than}).rowcount


# restore: one cancelled row moved back from the history into the jobs table (an operator
# retries it), its minute's count taken back, in one statement. Index:
# ix_workerpool_jobs_history_id (per partition), pk_workerpool_finished_minutes,
# pk_workerpool_jobs.
_RESTORE = text(f"""
WITH back AS (
  DELETE FROM {HISTORY} WHERE id = :id AND state = '{JobState.CANCELLED}' RETURNING {COLUMNS}
), uncounted AS (
  UPDATE {MINUTES} AS m SET count = m.count - 1 FROM back
  WHERE m.minute = date_trunc('minute', back.finished_at) AND m.queue = back.queue
    AND m.state = back.state
)
INSERT INTO {JOBS} ({COLUMNS}) SELECT {COLUMNS} FROM back
""")


def restore(conn: Connection, job_id: int) -> bool:
    """Move cancelled job ``job_id`` back from the history; False if it is not there."""
    return conn.execute(_RESTORE, {"id": job_id}).rowcount == 1


# ---------------------------------------------------------------------------------------------
# reads


# summary: the history's size, from each partition's statistics (never a count: autovacuum
# keeps reltuples; -1, never analysed, reads as 0). Index: none (the catalog).
_SUMMARY = text("""
SELECT count(*) AS partitions, coalesce(sum(greatest(c.reltuples, 0)), 0)::bigint AS rows
FROM pg_inherits AS i JOIN pg_class AS c ON c.oid = i.inhrelid
WHERE i.inhparent = CAST(:parent AS regclass)
""")


def summary(conn: Connection, moved: int = 0) -> dict[str, Any]:
    """``{"partitions", "rows_estimate", "oldest", "newest"}`` (the bounds of the partitions).
    ``moved``: the rows the finished minutes counted as they moved, a floor for the estimate
    (the statistics of partitions not yet analyzed say 0)."""
    row = conn.execute(_SUMMARY, {"parent": HISTORY}).one()
    parts = partitions(conn)
    return {
        "partitions": int(row.partitions),
        "rows_estimate": max(int(row.rows), moved),
        "oldest": parts[0].lower if parts else None,
        "newest": parts[-1].upper if parts else None,
    }


# moved_counts: the jobs moved to the history, by queue and state, as the mover counted them
# (pruned with the history). Index: pk_workerpool_finished_minutes (read whole: at most one row
# per minute of the retention, queue and final state).
_MOVED_COUNTS = text(
    f"SELECT queue, state, sum(count)::bigint AS n FROM {MINUTES} GROUP BY queue, state"
)


def moved_counts(conn: Connection) -> dict[tuple[str, str], int]:
    return {(row.queue, row.state): int(row.n) for row in conn.execute(_MOVED_COUNTS)}


# read_moved: one moved job, every column. Index: ix_workerpool_jobs_history_id (per partition).
_READ_MOVED = text(f"SELECT * FROM {HISTORY} WHERE id = :id")


def read_moved(conn: Connection, job_id: int) -> Any | None:
    return conn.execute(_READ_MOVED, {"id": job_id}).first()


# moved_states: the state of each of these jobs found in the history. Index:
# ix_workerpool_jobs_history_id (per partition).
_MOVED_STATES = text(f"""
SELECT id, state, task FROM {HISTORY} WHERE id = ANY(CAST(:ids AS bigint[]))
""")


def moved_states(conn: Connection, ids: Sequence[int]) -> list[Any]:
    if not ids:
        return []
    return list(conn.execute(_MOVED_STATES, {"ids": list(ids)}))


__all__ = [
    "COLUMNS",
    "HISTORY_LOCK",
    "MINUTES",
    "MOVABLE",
    "create_partition",
    "drop_partition",
    "move",
    "moved_counts",
    "moved_states",
    "partitions",
    "prune_minutes",
    "read_moved",
    "restore",
    "summary",
    "try_lock",
    "union",
]
