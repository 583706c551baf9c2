"""What operators run: the dead-letter queue (list, replay, purge), status, and read-outs."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import (
    BigInteger,
    Connection,
    and_,
    bindparam,
    column,
    exists,
    func,
    literal,
    literal_column,
    select,
    text,
    true,
    update,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB
from sqlalchemy.types import Text

from ..model.states import DUE_STATES, JobState
from .job_logs import delete_logs
from .schema import cron, jobs, workers
from .tags import carries
from .unique_keys import holds_its_key

# ---------------------------------------------------------------------------------------------
# the dead-letter queue


def dead_where(
    *,
    queue: str | None = None,
    task: str | None = None,
    reason: str | None = None,
    since: datetime | timedelta | None = None,
    older_than: timedelta | None = None,
    ids: Sequence[int] | None = None,
    tags: Sequence[str] | None = None,
    key: str | None = None,
):
    """The WHERE clause selecting dead rows by the operator's filters (all optional, ANDed).

    The state is a literal, not a bind parameter: it must match the dead index's predicate in
    every plan, generic ones included, or listing the dead becomes a scan of the history.
    """
    clauses = [jobs.c.state == literal_column(f"'{JobState.DEAD}'")]
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
    if tags:
        clauses.append(carries(tags))
    if key is not None:
        clauses.append(jobs.c.key == key)
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
    jobs.c.tags,
    func.jsonb_array_length(jobs.c.errors).label("error_count"),
    jobs.c.errors.op("->")(-1).label("last_error"),
)


# list_dead: matching dead rows, newest first. Index: ix_workerpool_jobs_dead (read newest
# first, up to the limit); pk_workerpool_jobs when ids are given.
def list_dead(conn: Connection, where, limit: int | None) -> list[Any]:
    """Dead rows matching ``where``, most recently dead first (errors: count and last only)."""
    stmt = select(*DEAD_COLUMNS).where(where).order_by(jobs.c.finished_at.desc(), jobs.c.id.desc())
    return list(conn.execute(stmt.limit(limit) if limit else stmt))


# count_dead: how many dead rows match.
# Index: ix_workerpool_jobs_dead (index-only: the filters are its columns), pk_workerpool_jobs.
def count_dead(conn: Connection, where) -> int:
    return conn.execute(select(func.count()).select_from(jobs).where(where)).scalar_one()


# dead_ids: the matching dead rows' ids, ascending.
# Index: ix_workerpool_jobs_dead, pk_workerpool_jobs with ids.
def dead_ids(conn: Connection, where) -> list[int]:
    return list(conn.execute(select(jobs.c.id).where(where).order_by(jobs.c.id)).scalars())


# dead_tasks: matching dead rows counted per task.
# Index: ix_workerpool_jobs_dead, pk_workerpool_jobs with ids.
def dead_tasks(conn: Connection, where) -> dict[str, int]:
    """How many matching dead rows each task has."""
    stmt = select(jobs.c.task, func.count()).where(where).group_by(jobs.c.task)
    return {task: count for task, count in conn.execute(stmt)}


# replay_dead: dead rows → pending now, attempts reset, lineage appended. Index: pk_workerpool_jobs.
def replay_dead(conn: Connection, ids: Sequence[int], by: str) -> list[Any]:
    """Dead rows back to ``pending`` now with attempts reset; errors kept; lineage appended.

    Each row's ``replays`` gets ``{at, attempts, dead_reason, finished_at, by}``. Rows that are no
    longer dead are left alone (replaying twice is a no-op), and so are rows whose ``live`` key
    a newer job holds (live again, the key would have two holders). Returns ``(id, queue,
    task, sequence)`` replayed.
    """
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
        "dead_reason",
        jobs.c.dead_reason,
        "finished_at",
        jobs.c.finished_at,
        "by",
        literal(by, Text),
    )
    stmt = (
        update(jobs)
        .where(dead_where(ids=ids), ~key_taken)
        .values(
            state=JobState.PENDING,
            dead_reason=None,
            attempts=0,
            run_at=func.now(),
            finished_at=None,
            claimed_by=None,
            claimed_at=None,
            replays=jobs.c.replays.op("||")(func.jsonb_build_array(entry)),
        )
        .returning(jobs.c.id, jobs.c.queue, jobs.c.task, jobs.c.sequence)
    )
    return list(conn.execute(stmt))


# purge_dead: delete these rows if still dead, and their attempt logs. Indexes:
# pk_workerpool_jobs, ix_workerpool_job_logs_job_id.
def purge_dead(conn: Connection, ids: Sequence[int]) -> list[int]:
    """Delete these rows if they are still dead (and their attempt logs); returns the ids."""
    stmt = jobs.delete().where(dead_where(ids=ids)).returning(jobs.c.id)
    purged = list(conn.execute(stmt).scalars())
    if purged:
        delete_logs(conn, purged)
    return purged


# ---------------------------------------------------------------------------------------------
# status


# state_counts: rows per queue, state and dead reason. Index: none (counts the whole table).
def state_counts(conn: Connection) -> list[Any]:
    """``(queue, state, dead_reason, count)`` over the whole table."""
    stmt = select(jobs.c.queue, jobs.c.state, jobs.c.dead_reason, func.count().label("count"))
    return list(conn.execute(stmt.group_by(jobs.c.queue, jobs.c.state, jobs.c.dead_reason)))


# oldest_due_ages: per queue, how long the oldest due row has waited. Index: ix_workerpool_jobs_due.
def oldest_due_ages(conn: Connection) -> dict[str, float]:
    """Per queue: seconds the oldest due (pending or failed, ``run_at`` passed) row has waited."""
    age = func.extract("epoch", func.now() - func.min(jobs.c.run_at))
    stmt = (
        select(jobs.c.queue, age)
        .where(jobs.c.state.in_(DUE_STATES), jobs.c.run_at <= func.now())
        .group_by(jobs.c.queue)
    )
    return {queue: float(seconds_) for queue, seconds_ in conn.execute(stmt)}


# suspect_counts: per queue, due-or-waiting rows held by a process that died (they run alone).
# Index: ix_workerpool_jobs_suspects.
def suspect_counts(conn: Connection) -> dict[str, int]:
    """Per queue: how many pending or failed jobs are suspects (``crashes > 0``)."""
    stmt = text(
        f"SELECT queue, count(*) FROM workerpool_jobs WHERE state IN ({_DUE_LITERALS})"
        " AND crashes > 0 GROUP BY queue"
    )
    return {queue: int(count) for queue, count in conn.execute(stmt)}


#: ``'pending', 'failed'`` as SQL literals: the text below must match the due index's predicate.
_DUE_LITERALS = ", ".join(f"'{state}'" for state in DUE_STATES)


#: Waiting rows read at most per queue by unrunnable (in claim order): bounded on any backlog.
UNRUNNABLE_CAP = 10_000


# unrunnable: waiting rows that no known task version can run, per queue, task and version,
# among each queue's first UNRUNNABLE_CAP waiting rows in claim order.
# Index: ix_workerpool_jobs_due (read in its order, stopping at the cap).
def unrunnable(
    conn: Connection, known: Mapping[str, Mapping[str, int]], cap: int = UNRUNNABLE_CAP
) -> list[Any]:
    """Waiting rows of the queues in ``known`` that no listed task version can run, counted
    among each queue's next ``cap`` waiting rows (those the claim would reach first).

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
        FROM unnest(CAST(:queues AS text[])) AS q(queue)
        CROSS JOIN LATERAL (
            SELECT queue, task, payload_version FROM {jobs.name}
            WHERE queue = q.queue AND state IN ({_DUE_LITERALS})
            ORDER BY priority DESC, run_at, id LIMIT :cap) AS j
        LEFT JOIN known AS k ON k.queue = j.queue AND k.task = j.task
        GROUP BY j.queue, j.task, j.payload_version
        HAVING max(k.version) IS NULL OR j.payload_version > max(k.version)
        ORDER BY j.queue, j.task, j.payload_version
        """
    )
    params = {
        "known": json.dumps({q: dict(t) for q, t in known.items()}),
        "queues": list(known),
        "cap": cap,
    }
    return list(conn.execute(stmt, params))


# list_workers: every registered process and how long since it was seen. Index: none (small).
def list_workers(conn: Connection) -> list[Any]:
    """Every registered process with the seconds since it was last seen (database clock)."""
    age = func.extract("epoch", func.now() - workers.c.last_seen).label("age")
    stmt = select(workers, age).order_by(workers.c.queue, workers.c.host, workers.c.pid)
    return list(conn.execute(stmt))


# list_crons: every schedule with its last job's state. Index: pk_workerpool_jobs (the last job).
def list_crons(conn: Connection) -> list[Any]:
    """Every schedule row with its last job's state."""
    stmt = (
        select(cron, jobs.c.state.label("last_job_state"))
        .outerjoin(jobs, jobs.c.id == cron.c.last_job_id)
        .order_by(cron.c.name)
    )
    return list(conn.execute(stmt))


# ---------------------------------------------------------------------------------------------
# read-outs (the demo's live view and summary): they read the whole table


# count_by_queue_and_state: rows per queue and state. Index: none.
def count_by_queue_and_state(conn: Connection) -> list[Any]:
    """``(queue, state, count)`` for every queue and state that has rows."""
    stmt = (
        select(jobs.c.queue, jobs.c.state, func.count().label("count"))
        .group_by(jobs.c.queue, jobs.c.state)
        .order_by(jobs.c.queue, jobs.c.state)
    )
    return list(conn.execute(stmt))


# job_outcomes: one row per job, where it ended and how. Index: pk_workerpool_jobs (id order).
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


# count_errors_by_type: error-history entries per queue and type. Index: none.
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
# metrics


#: Rows counted at most per queue and state by queue_depths: beyond it the gauge reads the cap.
DEPTH_CAP = 10_000

# queue_depths: per queue, capped counts of queued (pending or failed), processing, blocked
# (state 'waiting') and suspect rows, and the oldest due run_at. Index: ix_workerpool_jobs_due
# (queued: index-only, read in its own order up to the cap; the oldest due row: one probe per
# distinct priority, a skip scan), ix_workerpool_jobs_leased (processing),
# ix_workerpool_jobs_waiting (blocked), ix_workerpool_jobs_suspects (suspects).
#: Pending and failed are counted together: only together do they match the due index's
#: predicate, so telling them apart would read the heap (a full scan when failed rows are rare).
_DEPTHS = text(
    f"""
    SELECT q.queue,
      (SELECT count(*) FROM (SELECT 1 FROM {jobs.name} WHERE queue = q.queue
         AND state IN ({_DUE_LITERALS}) ORDER BY priority DESC, run_at, id LIMIT :cap) AS x
      ) AS queued,
      (SELECT count(*) FROM (SELECT 1 FROM {jobs.name} WHERE queue = q.queue
         AND state = 'processing' ORDER BY claimed_at LIMIT :cap) AS x) AS processing,
      (SELECT count(*) FROM (SELECT 1 FROM {jobs.name} WHERE queue = q.queue
         AND state = 'waiting' ORDER BY id LIMIT :cap) AS x) AS blocked,
      (SELECT count(*) FROM (SELECT 1 FROM {jobs.name} WHERE queue = q.queue
         AND state IN ({_DUE_LITERALS}) AND crashes > 0 ORDER BY priority DESC, run_at, id
         LIMIT :cap) AS x) AS suspects,
      (WITH RECURSIVE p(priority) AS (
          (SELECT priority FROM {jobs.name} WHERE queue = q.queue AND state IN ({_DUE_LITERALS})
           ORDER BY priority DESC LIMIT 1)
          UNION ALL
          SELECT (SELECT j.priority FROM {jobs.name} AS j WHERE j.queue = q.queue
                    AND j.state IN ({_DUE_LITERALS}) AND j.priority < p.priority
                  ORDER BY j.priority DESC LIMIT 1)
          FROM p WHERE p.priority IS NOT NULL)
       SELECT min((SELECT j.run_at FROM {jobs.name} AS j WHERE j.queue = q.queue
                     AND j.state IN ({_DUE_LITERALS}) AND j.priority = p.priority
                   ORDER BY j.priority DESC, j.run_at LIMIT 1))
       FROM p WHERE p.priority IS NOT NULL) AS oldest_run_at,
      now() AS now
    FROM unnest(CAST(:queues AS text[])) AS q(queue)
    """
)


def queue_depths(
    conn: Connection, queues: Sequence[str], cap: int = DEPTH_CAP
) -> dict[str, dict[str, Any]]:
    """Per queue: ``queued`` (pending or failed), ``processing``, ``blocked`` (in the state
    ``waiting``: for parents or a sequence), ``suspects`` (each counted up to ``cap``),
    ``oldest_due`` (seconds the oldest due job has waited, 0 if none is due), ``cap``.

    Bounded whatever the table holds: at most ``cap`` index entries per count, and one index
    probe per distinct priority for the oldest due row.
    """
    rows = conn.execute(_DEPTHS, {"queues": list(queues), "cap": cap})
    out: dict[str, dict[str, Any]] = {}
    for row in rows:
        oldest = row.oldest_run_at
        age = max(0.0, (row.now - oldest).total_seconds()) if oldest is not None else 0.0
        out[row.queue] = {
            "queued": row.queued,
            "processing": row.processing,
            "blocked": row.blocked,
            "suspects": row.suspects,
            "oldest_due": age,
            "cap": cap,
        }
    return out


# for users' test suites (workerpool.testing)

#: What ``workerpool.testing.enqueued`` can match on, each compared for equality.
MATCHABLE = ("queue", "state", "key", "payload", "priority", "max_attempts", "attempts")


# find_jobs: rows of one task (or any) whose fields equal ``match``, in id order.
# Index: uq_workerpool_jobs_key with a key; otherwise a scan (test databases are small).
def find_jobs(conn: Connection, task: str | None, match: Mapping[str, Any]) -> list[Any]:
    stmt = select(
        jobs.c.id,
        jobs.c.queue,
        jobs.c.task,
        jobs.c.payload,
        jobs.c.key,
        jobs.c.state,
        jobs.c.priority,
        jobs.c.attempts,
        jobs.c.max_attempts,
        jobs.c.run_at,
    ).order_by(jobs.c.id)
    if task is not None:
        stmt = stmt.where(jobs.c.task == task)
    for name, value in match.items():
        stmt = stmt.where(jobs.c[name] == value)  # payload: bound as jsonb, compared as jsonb
    return list(conn.execute(stmt))


# job_queues: the queues these jobs are in (inline mode drains those).
# Index: pk_workerpool_jobs.
def job_queues(conn: Connection, ids: Sequence[int]) -> list[str]:
    stmt = select(jobs.c.queue).where(jobs.c.id.in_(list(ids))).distinct().order_by(jobs.c.queue)
    return list(conn.execute(stmt).scalars())


# make_due: waiting rows → due now, so a test runs retries without their backoff.
# Index: pk_workerpool_jobs.
def make_due(conn: Connection, ids: Sequence[int]) -> int:
    stmt = (
        update(jobs)
        .where(jobs.c.id.in_(list(ids)), jobs.c.state.in_(list(DUE_STATES)))
        .values(run_at=func.now())
    )
    return conn.execute(stmt).rowcount
