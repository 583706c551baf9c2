"""What a queue's limits hold back: the counts behind ``workerpool status`` and a job's "why".

Read-only and not on any hot path: these count what the limited claim counts, with the same
indexes, but whole (the claim stops counting at the limit).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import Connection, text

from ..model.limits import parse_rate
from .schema import RATE_SLICES, jobs, rate_counts

#: Which rows a claim could take now, but for limits.
_DUE = (
    "state IN ('pending', 'failed') AND run_at <= now() AND crashes = 0 AND attempts < max_attempts"
)

# queue_usage: a limited queue's running jobs, claims its rate limit counts now (the ring of
# sql.limits_rates) and due jobs.
# Index: ix_workerpool_jobs_leased, pk_workerpool_rate_counts, ix_workerpool_jobs_due.
_USAGE = text(f"""
SELECT (SELECT count(*) FROM {jobs.name} WHERE queue = :queue AND state = 'processing')
         AS running,
       (SELECT coalesce(sum(claims), 0) FROM {rate_counts.name} WHERE queue = :queue
          AND window_s = :window AND slice >= floor(extract(epoch FROM statement_timestamp())
            * {RATE_SLICES} / :window)::bigint - {RATE_SLICES}) AS started,
       (SELECT count(*) FROM {jobs.name} WHERE queue = :queue AND {_DUE}) AS due
""")

# keys_held: due rows of one task whose concurrency key is at its concurrency limit, or (else)
# at its key rate limit. Index: ix_workerpool_jobs_due_key, then _running_key and _started_key.
_KEYS_HELD = text(f"""
SELECT count(*) FILTER (WHERE running >= :concurrency) AS by_concurrency,
       count(*) FILTER (WHERE NOT running >= :concurrency AND started >= :rate) AS by_rate
FROM (
  SELECT (SELECT count(*) FROM {jobs.name} r WHERE r.queue = :queue
            AND r.concurrency_key = j.concurrency_key AND r.state = 'processing') AS running,
         (SELECT count(*) FROM {jobs.name} s WHERE s.queue = :queue
            AND s.concurrency_key = j.concurrency_key
            AND s.started_at > statement_timestamp() - make_interval(secs => :window)) AS started
  FROM {jobs.name} j
  WHERE j.queue = :queue AND j.task = :task AND j.concurrency_key IS NOT NULL AND {_DUE}
) due
""")
_NO_LIMIT = 2**62  # a count never reaches it


def queue_usage(conn: Connection, queue: str, limits: Mapping[str, Any]) -> dict[str, Any]:
    """Each limit of ``queue`` (as published in its row), what uses it, and the due jobs it
    holds back."""
    rate = parse_rate("rate_limit", limits["rate_limit"]) if limits.get("rate_limit") else None
    usage = conn.execute(_USAGE, {"queue": queue, "window": int(rate.window) if rate else 1}).one()
    out: dict[str, Any] = {"global_concurrency": None, "rate_limit": None, "tasks": {}}
    if limits.get("global_concurrency"):
        cap = limits["global_concurrency"]
        out["global_concurrency"] = {
            "limit": cap,
            "running": usage.running,
            "held": usage.due if usage.running >= cap else 0,
        }
    if rate is not None:
        out["rate_limit"] = {
            "limit": str(rate),
            "started": usage.started,
            "held": usage.due if usage.started >= rate.count else 0,
        }
    for task, task_limits in sorted((limits.get("tasks") or {}).items()):
        out["tasks"][task] = dict(task_limits) | keys_held(conn, queue, task, task_limits)
    return out


def keys_held(conn: Connection, queue: str, task: str, limits: Mapping[str, Any]) -> dict[str, int]:
    """Due jobs of ``task`` held by their key's concurrency limit, and by its rate limit."""
    rate = (
        parse_rate("key_rate_limit", limits["key_rate_limit"])
        if limits.get("key_rate_limit")
        else None
    )
    row = conn.execute(
        _KEYS_HELD,
        {
            "queue": queue,
            "task": task,
            "concurrency": limits.get("concurrency_limit") or _NO_LIMIT,
            "rate": rate.count if rate else _NO_LIMIT,
            "window": rate.window if rate else 1.0,
        },
    ).one()
    return {"held_by_concurrency_limit": row.by_concurrency, "held_by_key_rate_limit": row.by_rate}


# job_for_why: one job's state, dueness and key. Index: pk_workerpool_jobs.
_JOB = text(
    f"SELECT id, queue, task, state, concurrency_key, {_DUE} AS due FROM {jobs.name} WHERE id = :id"
)
# key_usage: a concurrency key's running jobs and its starts in a window.
# Index: ix_workerpool_jobs_running_key, ix_workerpool_jobs_started_key.
_KEY_USAGE = text(f"""
SELECT (SELECT count(*) FROM {jobs.name} WHERE queue = :queue AND concurrency_key = :key
          AND state = 'processing') AS running,
       (SELECT count(*) FROM {jobs.name} WHERE queue = :queue AND concurrency_key = :key
          AND started_at > statement_timestamp() - make_interval(secs => :window)) AS started
""")


def job(conn: Connection, job_id: int) -> Any:
    """The job's row for :func:`key_usage` and the status line (None: no such job)."""
    return conn.execute(_JOB, {"id": job_id}).one_or_none()


def key_usage(conn: Connection, queue: str, key: str, window: float) -> Any:
    return conn.execute(_KEY_USAGE, {"queue": queue, "key": key, "window": window}).one()
