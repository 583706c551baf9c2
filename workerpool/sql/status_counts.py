"""How many jobs there are, bounded whatever the table holds: what ``workerpool status`` shows.

An exact count of a 10M-row history is a scan of 10M rows (seconds). So the states a worker
still has to act on (pending, failed, processing) and the dead are counted exactly up to a cap,
each on its own partial index; the history (done, cancelled) and any count past its cap come
from the planner's estimate, which costs a plan and no row, and are reported as estimates.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, text

from ..model.states import DUE_STATES, JobState
from .schema import QUEUE_STATE_STATISTICS, jobs

#: Below this many rows (the planner's estimate) status counts every row exactly: it is cheap.
EXACT_BELOW = 50_000
#: Rows counted at most per queue and group (waiting, processing); past it, an estimate.
COUNT_CAP = 10_000
#: Dead rows counted at most in all (an index-only scan of the dead index); past it, estimates.
DEAD_CAP = 100_000

_DUE = ", ".join(f"'{state}'" for state in DUE_STATES)  # the due index's predicate, as text

# status_queues: the queues that have due, processing or dead rows, and the ones the planner
# knows to be common. Index: ix_workerpool_jobs_due and ix_workerpool_jobs_leased (a skip scan:
# one probe per distinct queue), ix_workerpool_jobs_dead (index-only), pg_stats.
_QUEUES = text(
    f"""
    WITH RECURSIVE due(queue) AS (
        (SELECT queue FROM {jobs.name} WHERE state IN ({_DUE}) ORDER BY queue LIMIT 1)
        UNION ALL
        SELECT (SELECT j.queue FROM {jobs.name} AS j WHERE j.state IN ({_DUE})
                AND j.queue > due.queue ORDER BY j.queue LIMIT 1)
        FROM due WHERE due.queue IS NOT NULL),
    leased(queue) AS (
        (SELECT queue FROM {jobs.name} WHERE state = 'processing' ORDER BY queue LIMIT 1)
        UNION ALL
        SELECT (SELECT j.queue FROM {jobs.name} AS j WHERE j.state = 'processing'
                AND j.queue > leased.queue ORDER BY j.queue LIMIT 1)
        FROM leased WHERE leased.queue IS NOT NULL)
    SELECT queue FROM due WHERE queue IS NOT NULL
    UNION SELECT queue FROM leased WHERE queue IS NOT NULL
    UNION SELECT queue FROM (SELECT queue FROM {jobs.name} WHERE state = 'dead'
                             LIMIT :dead_cap) AS dead
    UNION SELECT unnest(most_common_vals::text::text[]) FROM pg_stats
          WHERE tablename = '{jobs.name}' AND attname = 'queue'
            AND schemaname = current_schema()
    """
)


def status_queues(conn: Connection) -> set[str]:
    """Queues with live or dead rows, and those common in the planner's statistics."""
    return set(conn.execute(_QUEUES, {"dead_cap": DEAD_CAP}).scalars())


# live_counts: per queue, pending and failed (up to the cap together), processing and waiting
# (each up to the cap). Index: ix_workerpool_jobs_due (read in its order, stopping at the cap;
# the state comes from the heap, at most cap rows), ix_workerpool_jobs_leased and
# ix_workerpool_jobs_waiting (index-only).
_LIVE = text(
    f"""
    SELECT q.queue, c.state, c.n
    FROM unnest(CAST(:queues AS text[])) AS q(queue)
    CROSS JOIN LATERAL (
        SELECT x.state, count(*) AS n
        FROM (SELECT state FROM {jobs.name} WHERE queue = q.queue AND state IN ({_DUE})
              ORDER BY priority DESC, run_at, id LIMIT :cap) AS x
        GROUP BY x.state
        UNION ALL
        SELECT 'processing', count(*)
        FROM (SELECT 1 FROM {jobs.name} WHERE queue = q.queue AND state = 'processing'
              ORDER BY claimed_at LIMIT :cap) AS y
        UNION ALL
        SELECT 'waiting', count(*)
        FROM (SELECT 1 FROM {jobs.name} WHERE queue = q.queue AND state = 'waiting'
              ORDER BY id LIMIT :cap) AS z) AS c
    """
)


def live_counts(
    conn: Connection, queues: Sequence[str], cap: int = COUNT_CAP
) -> dict[str, tuple[dict[str, int], set[str]]]:
    """queue → ({pending, failed, processing, waiting}, the states whose count reached ``cap``).

    Pending and failed are capped together; a capped count is a floor, not the count.
    """
    counts = {
        q: dict.fromkeys(
            (JobState.PENDING, JobState.FAILED, JobState.PROCESSING, JobState.WAITING), 0
        )
        for q in queues
    }
    for queue, state, count in conn.execute(_LIVE, {"queues": list(queues), "cap": cap}):
        counts[queue][state] = int(count)
    out = {}
    for queue, by_state in counts.items():
        capped = set()
        if by_state[JobState.PENDING] + by_state[JobState.FAILED] >= cap:
            capped |= {JobState.PENDING, JobState.FAILED}
        for state in (JobState.PROCESSING, JobState.WAITING):
            if by_state[state] >= cap:
                capped.add(state)
        out[queue] = (by_state, capped)
    return out


# dead_counts: dead rows per queue and reason, up to DEAD_CAP rows in all.
# Index: ix_workerpool_jobs_dead (index-only: queue and dead_reason are included columns).
_DEAD = text(
    f"""
    SELECT queue, dead_reason, count(*) FROM
      (SELECT queue, dead_reason FROM {jobs.name} WHERE state = 'dead' LIMIT :cap) AS d
    GROUP BY queue, dead_reason
    """
)


def dead_counts(conn: Connection, cap: int = DEAD_CAP) -> dict[str, dict[str, int]] | None:
    """queue → reason → dead rows; None when there are ``cap`` or more (estimate instead)."""
    out: dict[str, dict[str, int]] = {}
    total = 0
    for queue, reason, count in conn.execute(_DEAD, {"cap": cap}):
        out.setdefault(queue, {})[reason] = int(count)
        total += int(count)
    return None if total >= cap else out


# estimate: the planner's row estimate for one queue and state (no row is read).
# Index: whichever the planner picks; only the plan is made.
_ESTIMATE = text(
    f"EXPLAIN (FORMAT JSON) SELECT 1 FROM {jobs.name}"
    " WHERE queue = CAST(:queue AS text) AND state = CAST(:state AS text)"
)
_ESTIMATE_REASON = text(
    f"EXPLAIN (FORMAT JSON) SELECT 1 FROM {jobs.name} WHERE queue = CAST(:queue AS text)"
    " AND state = 'dead' AND dead_reason = CAST(:reason AS text)"
)


# mcv_estimates: rows per (queue, state) from the multivariate statistics' most common
# combinations (migration 0008) times the table's row count. Index: none (two catalog rows).
_MCV = text(
    """
    SELECT s.most_common_vals[i][1], s.most_common_vals[i][2],
           round(s.most_common_freqs[i] * greatest(c.reltuples, 0))::bigint
    FROM pg_stats_ext AS s
    JOIN pg_class AS c ON c.relname = s.tablename
         AND c.relnamespace = CAST(s.schemaname AS regnamespace),
         generate_subscripts(s.most_common_vals, 1) AS i
    WHERE s.statistics_name = :name AND s.schemaname = current_schema()
    """
)


def mcv_estimates(conn: Connection) -> dict[tuple[str, str], int] | None:
    """``(queue, state) → rows`` as ANALYZE last saw them; a pair it did not see is not among
    them (fewer rows than its sample can tell). None when the statistics were never gathered."""
    rows = conn.execute(_MCV, {"name": QUEUE_STATE_STATISTICS}).all()
    return {(queue, state): int(count) for queue, state, count in rows} or None


_ESTIMATE_TABLE = text(f"EXPLAIN (FORMAT JSON) SELECT 1 FROM {jobs.name}")


def estimate(conn: Connection, queue: str, state: str, reason: str | None = None) -> int:
    """The planner's estimate of the rows of ``queue`` in ``state`` (and dead ``reason``)."""
    if reason is None:
        plan = conn.execute(_ESTIMATE, {"queue": queue, "state": state}).scalar_one()
    else:
        plan = conn.execute(_ESTIMATE_REASON, {"queue": queue, "reason": reason}).scalar_one()
    return _plan_rows(plan)


def estimates(conn: Connection, pairs: Sequence[tuple[str, str]]) -> dict[tuple[str, str], int]:
    """Rows per (queue, state): from the (queue, state) statistics when ANALYZE gathered them,
    else the planner's estimate of each pair. No table row is read."""
    mcv = mcv_estimates(conn)
    return {pair: mcv.get(pair, 0) if mcv is not None else estimate(conn, *pair) for pair in pairs}


def table_estimate(conn: Connection) -> int:
    """The planner's estimate of the whole table's rows (from its size if never analyzed)."""
    return _plan_rows(conn.execute(_ESTIMATE_TABLE).scalar_one())


def _plan_rows(plan: Any) -> int:
    if isinstance(plan, str):
        plan = json.loads(plan)
    rows = int(plan[0]["Plan"]["Plan Rows"])
    # An estimate of 1 is the planner's floor for "none that it knows of".
    return 0 if rows <= 1 else rows


__all__ = [
    "COUNT_CAP",
    "DEAD_CAP",
    "EXACT_BELOW",
    "dead_counts",
    "estimate",
    "live_counts",
    "mcv_estimates",
    "status_queues",
    "table_estimate",
]
