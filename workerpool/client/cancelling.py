"""What ``pool.cancel`` selects and how it reports: the selected jobs and their states (unknown
ids refused by name, a job moved to the history known as finished), the audit target, and the
``on_cancel`` report of a cancel made in the caller's transaction, sent when it commits."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from sqlalchemy import Connection, event

from .. import sql
from ..model.cancel import Selection
from ..model.errors import UnknownJob
from ..sql import history


def target(selection: Selection) -> str:
    if selection.ids is not None:
        return (
            "jobs:"
            + ",".join(str(job_id) for job_id in selection.ids[:20])
            + (",..." if len(selection.ids) > 20 else "")
        )
    return f"queue:{selection.queue}"


def selected(conn: Connection, selection: Selection) -> dict[int, str]:
    """The selected jobs and their states; unknown ids are refused by name."""
    if selection.ids is None:
        ids = sql.select_ids(conn, selection.queue, selection.task, selection.state, selection.tags)
        return sql.job_states(conn, ids) if ids else {}
    states = sql.job_states(conn, selection.ids)
    missing = [job_id for job_id in selection.ids if job_id not in states]
    # a finished job moved to the history is known, and finished: nothing to cancel
    states |= {row.id: row.state for row in history.moved_states(conn, missing)}
    unknown = [job_id for job_id in selection.ids if job_id not in states]
    if unknown:
        listing = ", ".join(str(job_id) for job_id in unknown)
        raise UnknownJob(f"unknown job id(s): {listing}; nothing was changed")
    return {job_id: states[job_id] for job_id in selection.ids}


def tag_list(tags: Any) -> Any:
    """``tags=`` as given, a generator made a tuple (a string is refused by the check)."""
    if tags is None or isinstance(tags, str | bytes | list | tuple):
        return tags
    return tuple(tags) if isinstance(tags, Iterable) else tags


def report_on_commit(conn: Connection, report: Callable[[], None]) -> None:
    """In the caller's transaction: report when it commits, never when it rolls back.

    SQLAlchemy Core has no after-commit event; ``commit`` fires as the COMMIT is sent, after
    the last statement, so only a COMMIT the server refuses could still undo a reported cancel.
    """
    pending = [report]

    def committed(_conn: Connection) -> None:
        if pending:
            pending.pop()()

    def rolled_back(_conn: Connection) -> None:
        pending.clear()

    event.listen(conn, "commit", committed, once=True)
    event.listen(conn, "rollback", rolled_back, once=True)
