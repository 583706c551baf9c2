"""What a test can ask of the jobs table: which jobs are enqueued, and assertions on them.

They read the real table (never a mock of it), so a job enqueued in a transaction that rolled
back is not there, and one written by any process is.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .. import sql
from ..client import WorkerPool, explaining
from ..model.states import JobState

#: ``state=ANY`` matches a job in any state; by default only ``pending`` jobs match.
ANY = "any"


def enqueued(pool: WorkerPool, task: str | Callable | None = None, **match: Any) -> list[Any]:
    """The jobs of ``task`` (a name or the decorated function; None: every task) whose fields
    equal ``match`` (``queue``, ``state``, ``key``, ``payload``, ``priority``, ``max_attempts``,
    ``attempts``), in id order. ``state`` defaults to ``pending``; ``state=ANY`` for all."""
    unknown = sorted(set(match) - set(sql.MATCHABLE))
    if unknown:
        raise TypeError(f"enqueued() cannot match on {unknown}; it can on {sql.MATCHABLE}")
    match.setdefault("state", JobState.PENDING)
    if match["state"] == ANY:
        del match["state"]
    name = None if task is None else pool.registry.task_spec(task).name
    with explaining(pool), pool.engine.connect() as conn:
        return sql.find_jobs(conn, name, match)


def assert_enqueued(
    pool: WorkerPool, task: str | Callable | None = None, *, count: int | None = None, **match: Any
) -> list[Any]:
    """Assert that at least one job (exactly ``count`` if given) matches; returns them."""
    found = enqueued(pool, task, **match)
    if (count is None and not found) or (count is not None and len(found) != count):
        wanted = "a job" if count is None else f"{count} job(s)"
        raise AssertionError(
            f"expected {wanted} of task {_name(pool, task)} matching {match}, found "
            f"{len(found)}; enqueued: {_summary(pool)}"
        )
    return found


def assert_not_enqueued(pool: WorkerPool, task: str | Callable | None = None, **match: Any) -> None:
    """Assert that no job matches."""
    found = enqueued(pool, task, **match)
    if found:
        raise AssertionError(
            f"expected no job of task {_name(pool, task)} matching {match}, found "
            f"{[_describe(row) for row in found]}"
        )


def _name(pool: WorkerPool, task: str | Callable | None) -> str:
    return "(any)" if task is None else repr(pool.registry.task_spec(task).name)


def _summary(pool: WorkerPool, limit: int = 10) -> str:
    rows = enqueued(pool, None, state=ANY)
    text = ", ".join(_describe(row) for row in rows[:limit]) or "none"
    return text + (f" and {len(rows) - limit} more" if len(rows) > limit else "")


def _describe(row: Any) -> str:
    key = f" key={row.key!r}" if row.key is not None else ""
    return f"#{row.id} {row.task} {row.state} {row.payload}{key}"
