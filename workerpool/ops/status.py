"""`workerpool status`: what the database says about queues, dead jobs, crons and live workers.

:func:`collect` returns a plain dict (the stable JSON of ``workerpool status --json``);
:func:`render` turns it into tables for people. Only the database URL is needed: which tasks and
payload versions can run comes from what live workers registered (or from ``--app``).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Engine

from .. import sql
from ..model.states import LIVE_WORKER_WINDOW, JobState
from ..runtime.maintenance import health
from ..sql import dependencies, doors, limits_held, replica
from ..sql import history as history_sql
from ..sql import status_counts as count_sql
from ..sql.schema import DEAD_REASONS, STATES
from . import batches as batch_report

SCHEMA_VERSION = 1


def collect(engine: Engine, known: Mapping[str, Mapping[str, int]] | None = None) -> dict[str, Any]:
    """Everything ``workerpool status`` shows, as JSON-ready data.

    ``known`` (queue → task → newest payload version) replaces what live workers registered when
    deciding which waiting rows nobody can run (``--app``). Every query is bounded whatever the
    table holds: the history's counts are estimates (see :mod:`workerpool.sql.status_counts`).
    """
    with engine.connect() as conn:
        now = sql.database_now(conn)
        workers = [worker_json(row) for row in sql.list_workers(conn)]
        crons = [cron_json(row) for row in sql.list_crons(conn)]
        runnable = dict(known) if known is not None else live_task_versions(workers)
        paused = {row.queue: row for row in sql.list_queue_states(conn)}
        bounds = doors.read_bounds(conn)
        exact = count_sql.table_estimate(conn) < count_sql.EXACT_BELOW
        rows = sql.state_counts(conn) if exact else None
        mcv = None if exact else count_sql.mcv_estimates(conn)
        found = (
            {row.queue for row in rows}
            if rows is not None
            else count_sql.status_queues(conn) | {q for q, _ in mcv or {}}
        )
        queues = sorted(
            found
            | set(runnable)
            | set(paused)
            | set(bounds)
            | {c["queue"] for c in crons}
            | {w["queue"] for w in workers if is_queue(w["queue"])}
        )
        counts = exact_counts(rows, queues) if rows is not None else count_jobs(conn, queues, mcv)
        in_history = history_sql.moved_counts(conn)
        add_moved(counts, in_history)
        depths = sql.queue_depths(conn, queues)
        blocked = sql.unrunnable(conn, runnable)
        table = health.read(conn).as_json()
        limits = limits_in_use(conn, {q: row.limits for q, row in paused.items()})
        batches = batch_report.open_batches(conn)
        held_back = [q for q in queues if depths[q].get("blocked")]
        waiting = dependencies.waiting_counts(conn, held_back) if held_back else {}
        behind = replica.lag(conn)
        moved = history_json(history_sql.summary(conn, sum(in_history.values())))
    return {
        "version": SCHEMA_VERSION,
        "generated_at": now.isoformat(),
        "source": "app" if known is not None else "live workers",
        "queues": {
            q: queue_json(q, counts[q], depths[q], workers, runnable, blocked)
            | pause_json(paused.get(q))
            | {"limits": limits.get(q)}
            | {"max_pending": bounds.get(q)}
            | {"waiting_for": waiting.get(q, {"parents": 0, "sequence": 0})}
            for q in queues
        },
        "crons": crons,
        "workers": workers,
        "table_health": table,
        "batches": batches,
        "replica": behind.as_json() if behind is not None else None,
        "history": moved,
    }


def add_moved(counts: dict[str, dict[str, Any]], moved: Mapping[tuple[str, str], int]) -> None:
    """Done and cancelled include the jobs moved to the history (counted as they moved, so
    exact): the jobs table alone would show only the last few minutes of them."""
    for (queue, state), n in moved.items():
        if queue in counts and state in (JobState.DONE, JobState.CANCELLED):
            counts[queue]["counts"][state] += n


def history_json(summary: Mapping[str, Any]) -> dict[str, Any]:
    """The history table at a glance: its partitions' span and an estimate of its rows (each
    partition's statistics, never a count: months of history are not read on every refresh)."""
    return {
        "partitions": summary["partitions"],
        "rows_estimate": summary["rows_estimate"],
        "oldest": iso(summary["oldest"]),
        "newest": iso(summary["newest"]),
    }


def render_history(moved: Mapping[str, Any]) -> str:
    if not moved["partitions"]:
        return "History: no partition yet (the maintenance child creates them)"
    return (
        f"History: ~{moved['rows_estimate']} finished jobs (estimated) in"
        f" {moved['partitions']} partitions, {short(moved['oldest'])} to"
        f" {short(moved['newest'])}"
    )


def limits_in_use(conn: Connection, published: Mapping[str, Any]) -> dict[str, Any]:
    """queue → each limit, what uses it and what it holds back (queues with limits only).

    The limits come from the queue's row, where its workers published what they enforce, so
    this needs only the database, like the rest of ``workerpool status``."""
    return {
        queue: limits_held.queue_usage(conn, queue, limits)
        for queue, limits in sorted(published.items())
        if limits
    }


def exact_counts(rows: list[Any], queues: list[str]) -> dict[str, dict[str, Any]]:
    """:func:`count_jobs` from a count of every row (a small table: it costs little)."""
    out = {
        q: {
            "counts": dict.fromkeys(STATES, 0),
            "dead_by_reason": dict.fromkeys(DEAD_REASONS, 0),
            "estimated": [],
        }
        for q in queues
    }
    for row in rows:
        counted = out[row.queue]
        counted["counts"][row.state] += row.count
        if row.state == JobState.DEAD and row.dead_reason:
            counted["dead_by_reason"][row.dead_reason] += row.count
    return out


def count_jobs(
    conn: Connection, queues: list[str], mcv: Mapping[tuple[str, str], int] | None
) -> dict[str, dict[str, Any]]:
    """Per queue: ``counts`` by state, ``dead_by_reason``, and which of them are ``estimated``.

    Pending, failed, processing, waiting and dead are exact up to their caps; done, cancelled
    and any count past its cap are estimates (an exact count would read the history): from the
    statistics on (queue, state) when ANALYZE gathered them (``mcv``), else from a plan.
    """

    def guess(queue: str, state: str) -> int:
        if mcv is not None:
            return mcv.get((queue, state), 0)
        return count_sql.estimate(conn, queue, state)

    live = count_sql.live_counts(conn, queues)
    dead = count_sql.dead_counts(conn)
    out: dict[str, dict[str, Any]] = {}
    for queue in queues:
        by_state = dict.fromkeys(STATES, 0)
        estimated = []
        for state in STATES:
            if state == JobState.DEAD:
                continue
            counted, capped = live[queue]
            if state in counted and state not in capped:
                by_state[state] = counted[state]
            elif state in counted:  # past the cap: the count so far is a floor
                by_state[state] = max(counted[state], guess(queue, state))
                estimated.append(str(state))
            else:
                by_state[state] = guess(queue, state)
                estimated.append(str(state))
        if dead is not None:
            reasons = dict.fromkeys(DEAD_REASONS, 0) | dead.get(queue, {})
        else:
            reasons = {r: count_sql.estimate(conn, queue, JobState.DEAD, r) for r in DEAD_REASONS}
            estimated += [str(JobState.DEAD), "dead_by_reason"]
        by_state[JobState.DEAD] = sum(reasons.values())
        out[queue] = {"counts": by_state, "dead_by_reason": reasons, "estimated": estimated}
    return out


def is_queue(name: str) -> bool:
    return not name.startswith("@")  # '@maintenance' is a process type, not a queue


def live_task_versions(workers: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """queue → task → the newest payload version any live worker of that queue knows."""
    known: dict[str, dict[str, int]] = {}
    for worker in workers:
        if not worker["live"] or not is_queue(worker["queue"]):
            continue
        tasks = known.setdefault(worker["queue"], {})
        for task, version in (worker["tasks"] or {}).items():
            tasks[task] = max(int(version), tasks.get(task, 0))
    return known


def queue_json(
    queue: str,
    counted: Mapping[str, Any],
    depth: Mapping[str, Any],
    workers: list[dict[str, Any]],
    runnable: Mapping[str, Any],
    blocked: list[Any],
) -> dict[str, Any]:
    oldest = depth["oldest_due"]
    return {
        "counts": counted["counts"],
        "estimated": counted["estimated"],
        "oldest_pending_age_s": round(oldest, 3) if oldest > 0 else None,
        "dead_by_reason": counted["dead_by_reason"],
        "unrunnable": [unrunnable_json(row) for row in blocked if row.queue == queue]
        if queue in runnable
        else None,
        "live_workers": sum(1 for w in workers if w["queue"] == queue and w["live"]),
        "suspects": depth["suspects"],
    }


def pause_json(row: Any) -> dict[str, Any]:
    """Whether the queue is paused (``workerpool pause``), since when and by whom."""
    if row is None or not row.paused:
        return {"paused": False, "paused_at": None, "paused_by": None}
    return {"paused": True, "paused_at": iso(row.paused_at), "paused_by": row.paused_by}


def unrunnable_json(row: Any) -> dict[str, Any]:
    if row.known_version is None:
        reason = "unknown task"
    else:
        reason = f"payload version {row.payload_version} is newer than {row.known_version}"
    return {
        "task": row.task,
        "payload_version": row.payload_version,
        "count": row.count,
        "reason": reason,
    }


def worker_json(row: Any) -> dict[str, Any]:
    return {
        "id": row.id,
        "queue": row.queue,
        "host": row.host,
        "pid": row.pid,
        "tasks": dict(row.tasks or {}),
        "started_at": row.started_at.isoformat(),
        "last_seen": row.last_seen.isoformat(),
        "last_seen_age_s": round(float(row.age), 3),
        "live": float(row.age) <= LIVE_WORKER_WINDOW,
    }


def cron_json(row: Any) -> dict[str, Any]:
    return {
        "name": row.name,
        "queue": row.queue,
        "expression": row.expression,
        "timezone": row.timezone,
        "last_tick": iso(row.last_tick),
        "next_tick": iso(row.next_tick),
        "last_job_id": row.last_job_id,
        "last_job_state": row.last_job_state,
        "skipped": row.skipped,
    }


def iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


# -- rendering for people -------------------------------------------------------------------------


def render(status: Mapping[str, Any]) -> str:
    """The status as plain-text tables."""
    parts = [
        f"workerpool status at {status['generated_at']}{replica_note(status)}",
        render_queues(status["queues"]),
    ]
    paused = render_paused(status["queues"])
    bounded = render_bounds(status["queues"])
    held = render_limits({q: v["limits"] for q, v in status["queues"].items() if v.get("limits")})
    dead = render_dead(status["queues"])
    blocked = render_unrunnable(status["queues"], status["source"])
    batches = batch_report.render_open(status.get("batches") or {})
    waiting = render_waiting(status["queues"])
    parts += [p for p in (paused, bounded, held, dead, blocked, waiting, batches) if p]
    parts += [render_crons(status["crons"]), render_workers(status["workers"])]
    if "table_health" in status:
        parts.append(render_table_health(status["table_health"]))
    if "history" in status:
        parts.append(render_history(status["history"]))
    return "\n\n".join(parts) + "\n"


def replica_note(status: Mapping[str, Any]) -> str:
    """`` (read from a replica, 0.3 s behind the primary)`` when it was."""
    behind = status.get("replica")
    if not behind:
        return ""
    lag = behind["lag_seconds"]
    text = "which has replayed nothing yet" if lag is None else f"{lag:.1f} s behind the primary"
    return f" (read from a replica, {text})"


def table(headers: list[str], rows: list[list[Any]], empty: str = "(none)") -> str:
    if not rows:
        return "  " + empty
    cells = [headers] + [["-" if v is None else str(v) for v in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = [
        "  " + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells
    ]
    return "\n".join(lines)


def render_limits(limits: Mapping[str, Any]) -> str:
    """The LIMITS table: one row per limit of each limited queue."""
    rows = []
    for queue, usage in limits.items():
        if usage["global_concurrency"]:
            cap = usage["global_concurrency"]
            rows.append(
                [
                    queue,
                    "global_concurrency",
                    cap["limit"],
                    f"{cap['running']} running",
                    cap["held"],
                ]
            )
        if usage["rate_limit"]:
            rate = usage["rate_limit"]
            rows.append(
                [queue, "rate_limit", rate["limit"], f"{rate['started']} started", rate["held"]]
            )
        for task, held in usage["tasks"].items():
            if held.get("concurrency_limit"):
                rows.append(
                    [
                        queue,
                        f"concurrency_limit ({task}, per key)",
                        held["concurrency_limit"],
                        "-",
                        held["held_by_concurrency_limit"],
                    ]
                )
            if held.get("key_rate_limit"):
                rows.append(
                    [
                        queue,
                        f"key_rate_limit ({task}, per key)",
                        held["key_rate_limit"],
                        "-",
                        held["held_by_key_rate_limit"],
                    ]
                )
    if not rows:
        return ""
    return "LIMITS\n" + table(["QUEUE", "LIMIT", "SETTING", "IN USE", "HOLDING"], rows)


def render_queues(queues: Mapping[str, Any]) -> str:
    headers = ["QUEUE", *(s.upper() for s in STATES), "SUSPECTS", "OLDEST DUE", "WORKERS"]
    rows = [
        [
            name,
            *(count_cell(q, s) for s in STATES),
            q["suspects"],
            age(q["oldest_pending_age_s"]),
            q["live_workers"],
        ]
        for name, q in queues.items()
    ]
    note = ""
    if any(q.get("estimated") for q in queues.values()):
        note = (
            "\n  ~ estimated from the planner's statistics (an exact count would read the"
            " whole history)"
        )
    return "QUEUES\n" + table(headers, rows) + note


def count_cell(queue: Mapping[str, Any], state: str) -> str:
    """A count, marked ``~`` when it is the planner's estimate."""
    value = queue["counts"][state]
    return f"~{value}" if state in queue.get("estimated", ()) else str(value)


def render_waiting(queues: Mapping[str, Any]) -> str:
    """Waiting jobs (state ``waiting``) by what holds them: parents, or a sequence ahead."""
    rows = [
        [name, q["waiting_for"]["parents"], q["waiting_for"]["sequence"]]
        for name, q in queues.items()
        if sum((q.get("waiting_for") or {}).values())
    ]
    if not rows:
        return ""
    return "WAITING JOBS BY WHAT THEY WAIT FOR\n" + table(["QUEUE", "PARENTS", "SEQUENCE"], rows)


def render_paused(queues: Mapping[str, Any]) -> str:
    rows = [
        [name, short(q["paused_at"]), q["paused_by"]] for name, q in queues.items() if q["paused"]
    ]
    if not rows:
        return ""
    return "PAUSED (claiming nothing)\n" + table(["QUEUE", "SINCE", "BY"], rows)


#: What a bound counts: the jobs waiting to run (``workerpool_queue_room``).
BOUNDED_STATES = (JobState.PENDING, JobState.FAILED, JobState.WAITING)


def render_bounds(queues: Mapping[str, Any]) -> str:
    """The BOUNDED table: each bounded queue's bound and how close it is (docs/doors.md)."""
    rows = []
    for name, q in queues.items():
        if q.get("max_pending") is None:
            continue
        waiting = sum(q["counts"].get(state, 0) for state in BOUNDED_STATES)
        rows.append([name, q["max_pending"], waiting, max(q["max_pending"] - waiting, 0)])
    if not rows:
        return ""
    return (
        "BOUNDED (queued and waiting jobs count; past the bound an enqueue raises QueueFull)\n"
        + (table(["QUEUE", "MAX_PENDING", "COUNTED", "ROOM"], rows))
    )


def render_dead(queues: Mapping[str, Any]) -> str:
    rows = [
        [
            name,
            *(
                ("~" if "dead_by_reason" in q.get("estimated", ()) else "")
                + str(q["dead_by_reason"][r])
                for r in DEAD_REASONS
            ),
        ]
        for name, q in queues.items()
        if q["counts"][JobState.DEAD]
    ]
    if not rows:
        return ""
    return "DEAD BY REASON\n" + table(["QUEUE", *(r.upper() for r in DEAD_REASONS)], rows)


def render_unrunnable(queues: Mapping[str, Any], source: str) -> str:
    rows = [
        [name, item["task"], item["payload_version"], item["count"], item["reason"]]
        for name, q in queues.items()
        for item in (q["unrunnable"] or [])
    ]
    if not rows:
        return ""
    title = f"WAITING ROWS NO {'TASK OF THE APP' if source == 'app' else 'LIVE WORKER'} CAN RUN"
    return title + "\n" + table(["QUEUE", "TASK", "VERSION", "ROWS", "WHY"], rows)


def render_crons(crons: list[Mapping[str, Any]]) -> str:
    rows = [
        [
            c["name"],
            c["queue"],
            c["expression"],
            c["timezone"],
            short(c["last_tick"]),
            short(c["next_tick"]),
            job_label(c),
            c["skipped"],
        ]
        for c in crons
    ]
    headers = ["CRON", "QUEUE", "EXPRESSION", "TZ", "LAST TICK", "NEXT TICK", "LAST JOB", "SKIPPED"]
    return "CRON\n" + table(headers, rows)


def job_label(cron: Mapping[str, Any]) -> str | None:
    if cron["last_job_id"] is None:
        return None
    return f"{cron['last_job_id']} ({cron['last_job_state'] or 'pruned'})"


def render_workers(workers: list[Mapping[str, Any]]) -> str:
    rows = [
        [
            w["queue"],
            w["host"],
            w["pid"],
            short(w["started_at"]),
            age(w["last_seen_age_s"]) + " ago",
            "live" if w["live"] else "stale",
            w["id"],
        ]
        for w in workers
    ]
    headers = ["TYPE", "HOST", "PID", "STARTED", "LAST SEEN", "STATE", "ID"]
    return "WORKERS\n" + table(headers, rows)


def render_table_health(table: Mapping[str, Any]) -> str:
    """Dead rows, changes since the last analyze, sizes, and who holds the xmin horizon."""

    def ago(seconds: float | None) -> str:
        return "never" if seconds is None else age(seconds) + " ago"

    lines = [
        f"rows: {table['live']} live, {table['dead']} dead,"
        f" {table['modified']} changed since the last analyze",
        f"size: {megabytes(table['table_bytes'])} table, {megabytes(table['index_bytes'])} indexes",
        f"last vacuum: {ago(table['vacuum_age_s'])} (autovacuum {ago(table['autovacuum_age_s'])})",
        f"last analyze: {ago(table['analyze_age_s'])}"
        f" (autoanalyze {ago(table['autoanalyze_age_s'])})",
        "xmin horizon: " + holder_label(table["holder"]),
    ]
    return "TABLE HEALTH (workerpool_jobs)\n" + "\n".join("  " + line for line in lines)


def holder_label(holder: Mapping[str, Any] | None) -> str:
    if holder is None:
        return "not held back"
    what = f"{holder['kind']} {holder['name']}"
    details = ", ".join(
        str(v) for v in (holder["application"], holder["role"], holder["state"]) if v
    )
    held = f" for {age(holder['age_s'])}" if holder["age_s"] is not None else ""
    return (
        f"held by {what}"
        + (f" ({details})" if details else "")
        + held
        + f", {holder['xid_age']} transactions old"
    )


def megabytes(count: int) -> str:
    return f"{count / (1024 * 1024):.1f} MB"


def short(moment: str | None) -> str | None:
    """An ISO time to the second, for tables."""
    if moment is None:
        return None
    return datetime.fromisoformat(moment).isoformat(sep=" ", timespec="seconds")


def age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.1f}s"
    if seconds < 7200:
        return f"{seconds / 60:.1f}m"
    if seconds < 172800:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 86400:.1f}d"


# -- one job's durable steps (`workerpool status --job`, the dashboard's job page) -------------
