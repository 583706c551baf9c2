"""Jobs that wait for other jobs: edges written at enqueue, dependents released by their
parents' final writes, the sweep that repairs what a crash could leave, and the reads of a
workflow.

Enqueue (:func:`lock_parents`, :func:`.sequences.sequence_tail`, :func:`attach`): before the
dependent is written, its parents are locked in id order and marked ``has_dependents`` by one
UPDATE. A
parent's final write holds its row lock until it commits, so either the enqueue waits for that
commit and reads the final state (done: the dependent is due at once; dead or cancelled:
refused), or the parent's final write waits for the enqueue's commit and then, updating the
newest version of the row, returns ``has_dependents`` true: its transaction releases the new
dependent (``sql.settled``). A flag read by a separate probe in the completing statement would
not do: it reads the statement's snapshot, taken before the wait. The flag also spares every
job without dependents any lookup: the completing write returns it with the row.

Release (:func:`release`, called by ``sql.settled`` in the parent's transaction): the waiting
dependents of the finished parents are locked (id order), then their edges are read in a
separate statement, which under READ COMMITTED sees every parent that committed before the lock
was granted. Two parents ending at once in two transactions thus serialize on the dependent:
the second sees the first's outcome. :func:`workerpool.model.dependencies.verdict` decides.

Indexes: ``ix_workerpool_job_dependencies_parent_id`` (a parent's dependents),
``pk_workerpool_job_dependencies`` (a dependent's parents), ``ix_workerpool_jobs_sequence`` (a
sequence's newest job), ``ix_workerpool_jobs_waiting`` (the sweep), ``pk_workerpool_jobs``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

from sqlalchemy import Connection, text

from ..model.dependencies import (
    CANCEL,
    DEPENDENCY_FAILED,
    DUE,
    HOLD,
    SEQUENCE,
    Edge,
    verdict,
)
from ..model.notices import CancelNotice
from ..model.states import LIVE_STATES, JobState
from . import audit
from .enqueue import NOTIFY_CHANNEL
from .history import moved_states, union
from .schema import SEQUENCE_HELD, dependencies, history, jobs

EDGES = dependencies.name
JOBS = jobs.name
HISTORY = history.name
HISTORY = history.name


class Parent(NamedTuple):
    """A parent as the enqueue locked it."""

    id: int
    state: str
    task: str


class Link(NamedTuple):
    """What :func:`attach` writes for one new job: its edges ``(parent_id, kind, if_failed)``,
    whether it waits, its sequence, its workflow and its step's name there."""

    job_id: int
    edges: tuple[tuple[int, str, str], ...]
    wait: bool
    sequence: str | None = None
    workflow_id: int | None = None
    step: str | None = None


# ---------------------------------------------------------------------------------------------
# enqueue


# lock_parents: the parents, locked in id order and marked. Index: pk_workerpool_jobs.
_LOCK_PARENTS = text(f"""
WITH locked AS (
  SELECT id FROM {JOBS} WHERE id = ANY(CAST(:ids AS bigint[])) ORDER BY id FOR NO KEY UPDATE)
UPDATE {JOBS} AS j SET has_dependents = true FROM locked WHERE j.id = locked.id
RETURNING j.id, j.state, j.task
""")


def lock_parents(conn: Connection, ids: Iterable[int]) -> dict[int, Parent]:
    """The parents that exist, locked until this transaction ends (see the module header).

    A parent not in the jobs table may have moved to the history: it is final there (done or
    cancelled) and never changes again, so it needs no lock. The move commits whole, and the
    lock above waits for a move holding the row: a parent the lock missed is in the history
    by the time the second statement reads it."""
    wanted = sorted(set(ids))
    if not wanted:
        return {}
    rows = conn.execute(_LOCK_PARENTS, {"ids": wanted})
    found = {row.id: Parent(row.id, row.state, row.task) for row in rows}
    missing = [job_id for job_id in wanted if job_id not in found]
    found |= {row.id: Parent(row.id, row.state, row.task) for row in moved_states(conn, missing)}
    return found


# attach: the new jobs' state (waiting), sequence and workflow, and their edges, in one
# statement. Index: pk_workerpool_jobs (the update), the edges' primary key (the insert).
_ATTACH = text(f"""
WITH attached AS (
  UPDATE {JOBS} AS j
  SET state = CASE WHEN l.wait THEN '{JobState.WAITING}' ELSE j.state END,
      sequence = l.sequence, workflow_id = l.workflow_id, workflow_step = l.step
  FROM unnest(CAST(:ids AS bigint[]), CAST(:waits AS boolean[]), CAST(:sequences AS text[]),
              CAST(:workflows AS bigint[]), CAST(:steps AS text[]))
    AS l(id, wait, sequence, workflow_id, step)
  WHERE j.id = l.id
  RETURNING j.id)
INSERT INTO {EDGES} (job_id, parent_id, kind, if_failed)
SELECT * FROM unnest(CAST(:jobs AS bigint[]), CAST(:parents AS bigint[]),
                     CAST(:kinds AS text[]), CAST(:policies AS text[]))
ON CONFLICT DO NOTHING
""")


def attach(conn: Connection, links: Sequence[Link]) -> None:
    """Write ``links`` for jobs just inserted in this transaction (one statement)."""
    if not links:
        return
    edges = [(x.job_id, *edge) for x in links for edge in x.edges]
    conn.execute(
        _ATTACH,
        {
            "ids": [x.job_id for x in links],
            "waits": [x.wait for x in links],
            "sequences": [x.sequence for x in links],
            "workflows": [x.workflow_id for x in links],
            "steps": [x.step for x in links],
            "jobs": [e[0] for e in edges],
            "parents": [e[1] for e in edges],
            "kinds": [e[2] for e in edges],
            "policies": [e[3] for e in edges],
        },
    )


# ---------------------------------------------------------------------------------------------
# release


# Waiting dependents of these parents, locked in id order. Index: the parent index, then
# pk_workerpool_jobs.
_LOCK_DEPENDENTS = text(f"""
SELECT id FROM {JOBS}
WHERE id IN (SELECT job_id FROM {EDGES} WHERE parent_id = ANY(CAST(:ids AS bigint[])))
  AND state = '{JobState.WAITING}' AND signal IS NULL
ORDER BY id FOR UPDATE
""")
# Every edge of these dependents, with each parent's state now (NULL: pruned).
# Index: pk_workerpool_job_dependencies, pk_workerpool_jobs.
_EDGES_OF = text(f"""
SELECT e.job_id, e.parent_id, e.kind, e.if_failed, p.state AS parent_state
FROM {EDGES} AS e LEFT JOIN {JOBS} AS p ON p.id = e.parent_id
WHERE e.job_id = ANY(CAST(:ids AS bigint[]))
""")
_MAKE_DUE = text(f"""
WITH due AS (
  UPDATE {JOBS} SET state = '{JobState.PENDING}', run_at = now()
  WHERE id = ANY(CAST(:ids AS bigint[])) AND state = '{JobState.WAITING}'
  RETURNING queue),
notified AS MATERIALIZED (
  SELECT pg_notify('{NOTIFY_CHANNEL}', string_agg(DISTINCT queue, ',')) FROM due
  WHERE :notify HAVING count(*) > 0)
SELECT (SELECT count(*) FROM due) AS n, (SELECT count(*) FROM notified) AS sent
""")
_CANCEL = text(f"""
UPDATE {JOBS} AS j
SET state = '{JobState.CANCELLED}', finished_at = now(),
    errors = j.errors || jsonb_build_array(jsonb_build_object(
      'attempt', j.attempts, 'at', now(), 'type', '{DEPENDENCY_FAILED}', 'parent', c.parent,
      'message', 'cancelled: parent job ' || c.parent || ' ended ' || c.parent_state,
      'traceback', NULL, 'worker', NULL, 'swept', CAST(:swept AS boolean)))
FROM unnest(CAST(:ids AS bigint[]), CAST(:parents AS bigint[]), CAST(:states AS text[]))
  AS c(id, parent, parent_state)
WHERE j.id = c.id AND j.state = '{JobState.WAITING}'
RETURNING j.id, j.batch_id, j.state, j.queue, j.task, j.attempts, c.parent, c.parent_state
""")


class Released(NamedTuple):
    """What one :func:`release` did: dependents made due, and the rows it cancelled (final
    outcomes themselves: their waiters, batches and dependents follow)."""

    due: int
    cancelled: list[Any]


def release(conn: Connection, parent_ids: Sequence[int], *, notify: bool = True) -> Released:
    """Resolve the waiting dependents of ``parent_ids``, which just reached a final state in
    this transaction: due when every parent is done (or failed where the edge says run),
    cancelled when a parent failed and the edge says cancel, else still waiting."""
    locked = list(conn.execute(_LOCK_DEPENDENTS, {"ids": list(parent_ids)}).scalars())
    if not locked:
        return Released(0, [])
    return resolve(conn, locked, notify=notify)


# A sequence's job that ended cancelled (or dead, releasing) hands its place in the line to
# the jobs behind it: they inherit its own sequence parents that still hold the line, so the
# next job waits for the one before the failed one. Index: pk_workerpool_job_dependencies.
_INHERIT = text(f"""
INSERT INTO {EDGES} (job_id, parent_id, kind, if_failed)
SELECT d.job_id, g.parent_id, '{SEQUENCE}', g.if_failed
FROM unnest(CAST(:jobs AS bigint[]), CAST(:failed AS bigint[])) AS d(job_id, parent_id)
JOIN {EDGES} AS g ON g.job_id = d.parent_id AND g.kind = '{SEQUENCE}'
JOIN {JOBS} AS p ON p.id = g.parent_id
WHERE p.state IN ({", ".join(f"'{s}'" for s in LIVE_STATES)})
   OR (p.state = '{JobState.DEAD}' AND g.if_failed = '{HOLD}')
ON CONFLICT DO NOTHING
RETURNING parent_id
""")
# The inherited parents are marked like any parent at enqueue (see the module header).
_MARK = text(f"""
WITH locked AS (
  SELECT id FROM {JOBS} WHERE id = ANY(CAST(:ids AS bigint[])) ORDER BY id FOR NO KEY UPDATE)
UPDATE {JOBS} AS j SET has_dependents = true FROM locked WHERE j.id = locked.id
""")


def _read_edges(conn: Connection, locked: Sequence[int]) -> dict[int, list[Edge]]:
    edges: dict[int, list[Edge]] = {}
    for row in conn.execute(_EDGES_OF, {"ids": list(locked)}):
        edges.setdefault(row.job_id, []).append(Edge(*row))
    return edges


def _inherit(conn: Connection, edges: dict[int, list[Edge]]) -> bool:
    """Sequence edges to a job that failed and released the line: take over its own sequence
    parents that still hold it. Returns whether any edge was added."""
    failed = [
        (e.job_id, e.parent_id)
        for found in edges.values()
        for e in found
        if e.kind == SEQUENCE
        and e.if_failed != HOLD
        and e.parent_state in (JobState.DEAD, JobState.CANCELLED)
    ]
    if not failed:
        return False
    parents = list(
        conn.execute(
            _INHERIT, {"jobs": [f[0] for f in failed], "failed": [f[1] for f in failed]}
        ).scalars()
    )
    if parents:
        conn.execute(_MARK, {"ids": sorted(set(parents))})
    return bool(parents)


# A job the sweep made due keeps a trace of it in its history (the release missed it).
_SWEPT = text(f"""
UPDATE {JOBS} SET errors = errors || jsonb_build_array(jsonb_build_object(
  'attempt', attempts, 'at', now(), 'type', 'DependencySweep', 'traceback', NULL,
  'worker', NULL, 'message', 'made due by the maintenance sweep: its parents had all ended'))
WHERE id = ANY(CAST(:ids AS bigint[])) AND state = '{JobState.PENDING}'
""")


def resolve(
    conn: Connection, locked: Sequence[int], *, notify: bool = True, swept: bool = False
) -> Released:
    """Decide for waiting jobs this transaction has locked (a fresh read of their edges).
    ``swept``: the maintenance sweep decides, and says so in each job's history."""
    edges = _read_edges(conn, locked)
    if _inherit(conn, edges):
        edges = _read_edges(conn, locked)  # after the marks: the parents' states now
    due: list[int] = []
    cancel: list[tuple[int, int, str]] = []
    for job_id in locked:
        decided, parent = verdict(edges.get(job_id, []))
        if decided == DUE:
            due.append(job_id)
        elif decided == CANCEL and parent is not None:
            state = next(e.parent_state for e in edges[job_id] if e.parent_id == parent)
            cancel.append((job_id, parent, str(state)))
    made_due = 0
    if due:
        made_due = conn.execute(_MAKE_DUE, {"ids": due, "notify": notify}).one().n
        if swept and made_due:
            conn.execute(_SWEPT, {"ids": due})
    cancelled: list[Any] = []
    if cancel:
        cancelled = list(
            conn.execute(
                _CANCEL,
                {
                    "ids": [c[0] for c in cancel],
                    "parents": [c[1] for c in cancel],
                    "states": [c[2] for c in cancel],
                    "swept": swept,
                },
            )
        )
        _audit_cancels(conn, cancelled)
    return Released(made_due, cancelled)


#: Who cancels a dependent whose parent failed, in its notice and in the audit trail.
SYSTEM_ACTOR = "workerpool"


def _audit_cancels(conn: Connection, cancelled: Sequence[Any]) -> None:
    """One audit entry per failed parent, naming it and the dependents it cancelled."""
    by_parent: dict[tuple[int, str], list[int]] = {}
    for row in cancelled:
        by_parent.setdefault((row.parent, row.parent_state), []).append(row.id)
    for (parent, state), ids in sorted(by_parent.items()):
        audit.record(
            conn,
            SYSTEM_ACTOR,
            "cancel",
            f"job:{parent}:dependents",
            {
                "reason": f"parent job {parent} ended {state}",
                "parent": parent,
                "count": len(ids),
                "ids": sorted(ids)[: audit.AUDIT_IDS],
            },
        )


def cancel_notice(row: Any) -> CancelNotice:
    """What the ``on_cancel`` hooks get for a dependent :func:`resolve` cancelled."""
    return CancelNotice(
        row.id,
        row.queue,
        row.task,
        row.attempts,
        SYSTEM_ACTOR,
        f"parent job {row.parent} ended {row.parent_state}",
    )


# with_dependents: which of these rows are marked as someone's parent. Index: pk_workerpool_jobs.
_HAS_DEPENDENTS = text(f"""
SELECT id FROM {JOBS} WHERE id = ANY(CAST(:ids AS bigint[])) AND has_dependents
""")


def with_dependents(conn: Connection, ids: Sequence[int]) -> list[int]:
    if not ids:
        return []
    return list(conn.execute(_HAS_DEPENDENTS, {"ids": list(ids)}).scalars())


# ---------------------------------------------------------------------------------------------
# replay: a dead parent runs again


# The dependents a failed parent cancelled (their last error entry names it), re-opened as
# waiting, and transitively theirs. Index: the parent index, pk_workerpool_jobs.
_REOPEN = text(f"""
WITH RECURSIVE cancelled(id) AS (
  SELECT e.job_id FROM {EDGES} AS e JOIN {JOBS} AS j ON j.id = e.job_id
  WHERE e.parent_id = ANY(CAST(:ids AS bigint[])) AND j.state = '{JobState.CANCELLED}'
    AND j.errors -> -1 ->> 'type' = '{DEPENDENCY_FAILED}'
    AND (j.errors -> -1 ->> 'parent')::bigint = e.parent_id
  UNION
  SELECT e.job_id FROM cancelled AS c JOIN {EDGES} AS e ON e.parent_id = c.id
  JOIN {JOBS} AS j ON j.id = e.job_id
  WHERE j.state = '{JobState.CANCELLED}' AND j.errors -> -1 ->> 'type' = '{DEPENDENCY_FAILED}'
    AND (j.errors -> -1 ->> 'parent')::bigint = e.parent_id)
UPDATE {JOBS} AS j SET state = '{JobState.WAITING}', finished_at = NULL
FROM cancelled AS c WHERE j.id = c.id AND j.state = '{JobState.CANCELLED}'
RETURNING j.id
""")


def reopen_dependents(conn: Connection, parent_ids: Sequence[int]) -> list[int]:
    """After a replay of dead ``parent_ids`` (pending again): the jobs cancelled because of
    them, transitively, wait again (their error entry stays, as history). Returns their ids."""
    if not parent_ids:
        return []
    return sorted(conn.execute(_REOPEN, {"ids": list(parent_ids)}).scalars())


# ---------------------------------------------------------------------------------------------
# the sweep


# Waiting jobs whose parents all reached a final state: the release missed them (it never
# should). Index: ix_workerpool_jobs_waiting, then each one's edges.
_STRANDED = text(f"""
SELECT w.id FROM {JOBS} AS w
WHERE w.state = '{JobState.WAITING}' AND w.signal IS NULL
  AND EXISTS (SELECT 1 FROM {EDGES} AS e WHERE e.job_id = w.id)
  AND NOT EXISTS (
    SELECT 1 FROM {EDGES} AS e JOIN {JOBS} AS p ON p.id = e.parent_id
    WHERE e.job_id = w.id
      AND (p.state IN ('{JobState.PENDING}', '{JobState.PROCESSING}', '{JobState.FAILED}',
                       '{JobState.WAITING}')
           OR (p.state = '{JobState.DEAD}' AND e.if_failed = 'hold')))
ORDER BY w.id LIMIT :limit
FOR UPDATE OF w SKIP LOCKED
""")


def sweep(conn: Connection, limit: int = 1000) -> Released:
    """Resolve waiting jobs nothing will release any more; the caller runs ``sql.settled`` on
    the rows it cancelled."""
    stranded = list(conn.execute(_STRANDED, {"limit": limit}).scalars())
    if not stranded:
        return Released(0, [])
    return resolve(conn, stranded, swept=True)


# prune_orphans: the edges of jobs that are gone (pruned, purged, or in a dropped history
# partition): nothing reads an edge whose waiting job is in neither table. A pass scans at most
# ``limit`` edges after ``after`` (the dependents' ids, in order) and the caller carries the
# position to the next pass, so a pass costs the same however many edges there are. Index:
# pk_workerpool_job_dependencies (the scan and the delete), pk_workerpool_jobs and
# ix_workerpool_jobs_history_id (the probes).
_ORPHANS = text(f"""
WITH scanned AS (
  SELECT job_id FROM {EDGES} WHERE job_id > :after ORDER BY job_id LIMIT :limit
), gone AS (
  SELECT DISTINCT s.job_id FROM scanned AS s
  WHERE NOT EXISTS (SELECT 1 FROM {JOBS} AS j WHERE j.id = s.job_id)
    AND NOT EXISTS (SELECT 1 FROM {HISTORY} AS h WHERE h.id = s.job_id)
), deleted AS (
  DELETE FROM {EDGES} WHERE job_id IN (SELECT job_id FROM gone) RETURNING 1
)
SELECT (SELECT max(job_id) FROM scanned), (SELECT count(*) FROM scanned),
       (SELECT count(*) FROM deleted)
""")


def prune_orphans(conn: Connection, after: int, limit: int) -> tuple[int, int]:
    """Delete the edges of gone jobs among the next ``limit`` edges past dependent ``after``;
    returns where the next pass starts (0 once the scan reached the end) and how many went."""
    last, scanned, deleted = conn.execute(_ORPHANS, {"after": after, "limit": limit}).one()
    return (0 if scanned < limit else last), deleted


# ---------------------------------------------------------------------------------------------
# reads


_PARENT_IDS = f"SELECT parent_id FROM {EDGES} WHERE job_id = :id AND kind = 'after'"
# parent_results: each done parent's result, moved ones included. Index:
# pk_workerpool_job_dependencies, pk_workerpool_jobs, ix_workerpool_jobs_history_id.
_PARENT_RESULTS = text(f"""
SELECT p.id, p.result
FROM {union("id, result", f"id IN ({_PARENT_IDS}) AND state = '{JobState.DONE}'")} AS p
ORDER BY p.id
""")


def parent_results(conn: Connection, job_id: int) -> dict[int, Any]:
    """Each done parent's result by id (a parent that failed, or was pruned, is absent)."""
    return {row.id: row.result for row in conn.execute(_PARENT_RESULTS, {"id": job_id})}


_PARENTS_OF = text(f"""
SELECT e.parent_id, e.kind, e.if_failed, p.state, p.task, p.queue
FROM {EDGES} AS e LEFT JOIN
  {union("id, state, task, queue", f"id IN (SELECT parent_id FROM {EDGES} WHERE job_id = :id)")}
  AS p ON p.id = e.parent_id
WHERE e.job_id = :id ORDER BY e.parent_id
""")


def parents_of(conn: Connection, job_id: int) -> list[Any]:
    """A job's parents with their state now (None: pruned)."""
    return list(conn.execute(_PARENTS_OF, {"id": job_id}))


_WORKFLOW = text(f"""
SELECT * FROM {
    union(
        "id, task, queue, state, sequence, workflow_step, created_at, finished_at",
        "workflow_id = :id",
    )
} AS w
ORDER BY id LIMIT :limit
""")
_WORKFLOW_EDGES = text(f"""
SELECT job_id, parent_id, kind FROM {EDGES}
WHERE job_id = ANY(CAST(:ids AS bigint[])) ORDER BY job_id, parent_id
""")


def workflow(conn: Connection, workflow_id: int, limit: int = 500) -> tuple[list[Any], list[Any]]:
    """A workflow's jobs (at most ``limit``, in id order) and the edges among them."""
    nodes = list(conn.execute(_WORKFLOW, {"id": workflow_id, "limit": limit}))
    ids = [row.id for row in nodes]
    edges = list(conn.execute(_WORKFLOW_EDGES, {"ids": ids})) if ids else []
    return nodes, edges


# list_workflows: the newest workflows (below the cursor), each with its jobs counted by state
# (at most :cap jobs a workflow read) and when it began. A workflow's id is its first job's, so
# its newest ids are the newest workflows. Index: ix_workerpool_jobs_workflow and each history
# partition's ix_workerpool_jobs_history_workflow, read backwards to :limit distinct ids, then
# the same per workflow.
_LIST_WORKFLOWS = text(f"""
WITH ids AS (
  SELECT workflow_id FROM (
    (SELECT DISTINCT workflow_id FROM {JOBS} WHERE workflow_id < :before
     ORDER BY workflow_id DESC LIMIT :limit)
    UNION
    (SELECT DISTINCT workflow_id FROM {HISTORY} WHERE workflow_id < :before
     ORDER BY workflow_id DESC LIMIT :limit)
  ) AS both_tables ORDER BY workflow_id DESC LIMIT :limit
)
SELECT ids.workflow_id AS id, j.state, count(*) AS count, min(j.created_at) AS created_at
FROM ids CROSS JOIN LATERAL (
  SELECT state, created_at FROM {union("state, created_at", "workflow_id = ids.workflow_id")}
    AS w LIMIT :cap) AS j
GROUP BY 1, 2
ORDER BY 1 DESC
""")


def list_workflows(conn: Connection, before: int | None, limit: int, cap: int) -> list[Any]:
    """``(id, state, count, created_at)`` rows of up to ``limit`` workflows below ``before``."""
    return list(
        conn.execute(_LIST_WORKFLOWS, {"before": before or 2**63 - 1, "limit": limit, "cap": cap})
    )


# sequence_line: a sequence's jobs still in its line (live, or dead and holding it), head first.
# Index: ix_workerpool_jobs_sequence.
_SEQUENCE_LINE = text(f"""
SELECT id, task, queue, state, created_at FROM {JOBS}
WHERE sequence = :sequence AND {SEQUENCE_HELD} ORDER BY id LIMIT :limit
""")


def sequence_line(conn: Connection, sequence: str, limit: int = 500) -> list[Any]:
    """The jobs of ``sequence`` in its line, in enqueue order (at most ``limit``)."""
    return list(conn.execute(_SEQUENCE_LINE, {"sequence": sequence, "limit": limit}))


# waiting_counts: per queue, waiting jobs by what they wait for (a sequence edge, or parents
# only). Index: ix_workerpool_jobs_waiting, capped per queue.
_WAITING_COUNTS = text(f"""
SELECT q.queue,
  count(*) FILTER (WHERE w.by_sequence) AS sequence,
  count(*) FILTER (WHERE NOT w.by_sequence) AS parents
FROM unnest(CAST(:queues AS text[])) AS q(queue)
CROSS JOIN LATERAL (
  SELECT EXISTS (SELECT 1 FROM {EDGES} AS e WHERE e.job_id = j.id
                 AND e.kind = '{SEQUENCE}') AS by_sequence
  FROM {JOBS} AS j WHERE j.queue = q.queue AND j.state = '{JobState.WAITING}'
    AND j.signal IS NULL
  ORDER BY j.id LIMIT :cap) AS w
GROUP BY q.queue
""")


def waiting_counts(
    conn: Connection, queues: Sequence[str], cap: int = 10_000
) -> dict[str, dict[str, int]]:
    """queue → {"parents": n, "sequence": n}: waiting jobs by what holds them (capped)."""
    out = {q: {"parents": 0, "sequence": 0} for q in queues}
    for row in conn.execute(_WAITING_COUNTS, {"queues": list(queues), "cap": cap}):
        out[row.queue] = {"parents": int(row.parents), "sequence": int(row.sequence)}
    return out


__all__ = [
    "SYSTEM_ACTOR",
    "Link",
    "Parent",
    "Released",
    "attach",
    "cancel_notice",
    "lock_parents",
    "parent_results",
    "parents_of",
    "release",
    "reopen_dependents",
    "resolve",
    "sweep",
    "waiting_counts",
    "with_dependents",
    "workflow",
]
