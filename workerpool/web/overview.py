"""What the overview page shows, read in one short transaction with bounded statements.

Waiting, running and suspect rows are counted exactly up to a cap (index reads that stop at
it); done, dead, cancelled and failed rows, which can be millions, are the planner's estimates
(labelled so on the page) unless the whole table is small enough to count; the rows moved to
the history add their per-minute counts (kept by the mover: no read of the history). Finishes
per minute come from a range of the finished index.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import true

from .. import sql
from ..model.states import LIVE_WORKER_WINDOW, JobState
from ..ops.status import is_queue
from ..sql import dashboard_reads, doors, replica, status_counts
from ..sql.readouts import DEPTH_CAP
from .charts import Bar

#: Minutes the throughput and failure charts cover.
CHART_MINUTES = 30
#: Minutes the per-queue throughput column covers (the current one included).
RECENT_MINUTES = 5
ESTIMATED_STATES = (JobState.FAILED, JobState.DONE, JobState.DEAD, JobState.CANCELLED)
STATEMENT_TIMEOUT = 5.0
#: Up to this many rows in the table, every state is counted exactly (a read of at most this
#: many rows); beyond it, the finished states are the planner's estimates.
SMALL_TABLE = 20_000


@dataclass
class QueueRow:
    name: str
    queued: int = 0  # pending or failed: for a worker
    processing: int = 0
    blocked: int = 0  # in the state waiting: for parents, a sequence or a signal
    suspects: int = 0
    cap: int = 0
    oldest_due: float = 0.0
    estimates: dict[str, int] = field(default_factory=dict)
    paused: Any = None  # the workerpool_queues row when paused
    live_workers: int = 0
    max_pending: int | None = None  # a bounded queue's bound (docs/doors.md)
    per_minute: float = 0.0  # done, cancelled or dead a minute over the last RECENT_MINUTES


@dataclass
class Overview:
    now: datetime
    queues: list[QueueRow]
    hosts: dict[str, list[Any]]  # host → its live workers
    finished: list[Bar]
    failures: list[Bar]
    chart_capped: bool
    analyzed: datetime | None
    exact: bool  # the finished counts are exact (a small table), not estimates
    replica: Any = None  # the replica's ReplicaLag when the pool reads from one


def collect(pool: Any) -> Overview:
    with pool.engines.replica_errors(), pool.read_engine.begin() as conn:
        sql.bound_transaction(
            conn,
            statement_timeout=STATEMENT_TIMEOUT,
            lock_timeout=1.0,
            idle_timeout=STATEMENT_TIMEOUT,
        )
        now = sql.database_now(conn)
        workers = sql.list_workers(conn)
        paused = {row.queue: row for row in sql.list_queue_states(conn) if row.paused}
        bounds = doors.read_bounds(conn)
        names = sorted(
            set(pool.queues)
            | set(bounds)
            | {w.queue for w in workers if is_queue(w.queue)}
            | {row.queue for row in sql.list_queue_states(conn)}
            | dashboard_reads.common_queues(conn)
        )
        depths = sql.queue_depths(conn, names)
        exact = dashboard_reads.count_capped(conn, true(), SMALL_TABLE) <= SMALL_TABLE
        estimates = (
            _exact_counts(conn)
            if exact
            else status_counts.estimates(conn, [(q, s) for q in names for s in ESTIMATED_STATES])
        )
        _add(estimates, dashboard_reads.moved_counts(conn))
        finished = dashboard_reads.finished_per_minute(conn, CHART_MINUTES)
        analyzed = dashboard_reads.last_analyzed(conn)
        behind = replica.lag(conn)
    live = [w for w in workers if float(w.age) <= LIVE_WORKER_WINDOW]
    rows = [_queue_row(q, depths.get(q, {}), estimates, paused.get(q), live) for q in names]
    for row in rows:
        row.max_pending = bounds.get(row.name)
    _throughput(rows, finished, now)
    hosts: dict[str, list[Any]] = {}
    for worker in live:
        hosts.setdefault(worker.host, []).append(worker)
    done, dead = _per_minute(finished, now)
    capped = sum(row.count for row in finished if not row.moved) >= dashboard_reads.FINISHED_CAP
    return Overview(now, rows, hosts, done, dead, capped, analyzed, exact, behind)


def _exact_counts(conn: Any) -> dict[tuple[str, str], int]:
    """Every (queue, state) counted: for a table this small, cheaper than estimating well."""
    counts: dict[tuple[str, str], int] = {}
    for row in sql.state_counts(conn):
        counts[(row.queue, row.state)] = counts.get((row.queue, row.state), 0) + row.count
    return counts


def _add(counts: dict[tuple[str, str], int], more: dict[tuple[str, str], int]) -> None:
    """The history's rows (done and cancelled, moved a minute after they end) count too."""
    for key, count in more.items():
        counts[key] = counts.get(key, 0) + count


def _throughput(rows: list[QueueRow], finished: list[Any], now: datetime) -> None:
    """Each queue's finished rows a minute over the last RECENT_MINUTES (this one included)."""
    recent = now.replace(second=0, microsecond=0) - timedelta(minutes=RECENT_MINUTES - 1)
    for row in rows:
        count = sum(f.count for f in finished if f.queue == row.name and f.minute >= recent)
        row.per_minute = count / RECENT_MINUTES


def _queue_row(
    name: str,
    depth: dict[str, Any],
    estimates: dict[tuple[str, str], int],
    paused: Any,
    live: list[Any],
) -> QueueRow:
    return QueueRow(
        name=name,
        queued=depth.get("queued", 0),
        processing=depth.get("processing", 0),
        blocked=depth.get("blocked", 0),
        suspects=depth.get("suspects", 0),
        cap=depth.get("cap", DEPTH_CAP),
        oldest_due=depth.get("oldest_due", 0.0),
        estimates={state: estimates.get((name, state), 0) for state in ESTIMATED_STATES},
        paused=paused,
        live_workers=sum(1 for w in live if w.queue == name),
    )


def _per_minute(rows: list[Any], now: datetime) -> tuple[list[Bar], list[Bar]]:
    """Done (and cancelled) and dead rows for each of the last minutes, oldest first."""
    start = now.replace(second=0, microsecond=0) - timedelta(minutes=CHART_MINUTES - 1)
    minutes = [start + timedelta(minutes=i) for i in range(CHART_MINUTES)]
    done = dict.fromkeys(minutes, 0)
    dead = dict.fromkeys(minutes, 0)
    for row in rows:
        target = dead if row.state == JobState.DEAD else done
        if row.minute in target:
            target[row.minute] += row.count
    label = "%H:%M"
    return (
        [Bar(m.strftime(label), done[m]) for m in minutes],
        [Bar(m.strftime(label), dead[m]) for m in minutes],
    )
