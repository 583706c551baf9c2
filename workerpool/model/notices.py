"""What the hooks receive, and the one way a job that went dead or was cancelled is reported.

A job that gives up is never silent: :func:`report_dead` logs one error line per dead job and
calls every ``on_dead`` hook with its :class:`DeadNotice`; :func:`report_cancelled` does the
same at info level for cancelled jobs and the ``on_cancel`` hooks. Whichever process moved the
row (a worker, the maintenance sweep, a releaser, an operator's cancel) reports through here,
once its transaction has committed. A hook that raises is logged, never propagated.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .attempt import safe_text

dead_log = logging.getLogger("workerpool.dead")
cancel_log = logging.getLogger("workerpool.cancel")

Hook = Callable[[Any], Any]


@dataclass(frozen=True)
class DeadNotice:
    """One job that just went dead: what the error log line and the ``on_dead`` hooks receive."""

    id: int
    queue: str
    task: str
    attempts: int
    reason: str
    error: Mapping[str, Any] | None = None

    @classmethod
    def of(cls, row: Any, reason: str | None = None, error: Mapping[str, Any] | None = None):
        """From a DeadNotice or any row with ``id, queue, task, attempts`` (and a reason)."""
        if isinstance(row, cls):
            return row
        return cls(
            id=row.id,
            queue=row.queue,
            task=row.task,
            attempts=row.attempts,
            reason=reason or getattr(row, "dead_reason", None) or getattr(row, "reason", "?"),
            error=error if error is not None else _row_error(row),
        )

    @property
    def last_error(self) -> str:
        if not self.error:
            return "-"
        kind, message = self.error.get("type", "?"), self.error.get("message", "")
        text = safe_text(f"{kind}: {message}" if message else kind, 500)
        return text.replace("\r", "\\r").replace("\n", "\\n")  # one log line per dead job


def _row_error(row: Any) -> Mapping[str, Any] | None:
    error = getattr(row, "error", None)
    return error if error is not None else getattr(row, "last_error", None)


def report_dead(
    hooks: Iterable[Hook],
    rows: Iterable[Any],
    *,
    reason: str | None = None,
    error: Mapping[str, Any] | None = None,
) -> list[DeadNotice]:
    """Log one error line per dead job and call each ``on_dead`` hook with its notice.

    ``rows``: DeadNotice objects, or rows with ``id, queue, task, attempts`` (``reason`` and
    ``error`` fill what the rows lack).
    """
    notices = [DeadNotice.of(row, reason, error) for row in rows]
    for notice in notices:
        dead_log.error(
            "job dead: queue=%s id=%s task=%s attempts=%s reason=%s last_error=%s",
            notice.queue,
            notice.id,
            notice.task,
            notice.attempts,
            notice.reason,
            notice.last_error,
            extra={
                "event": "job_dead",
                "job_id": notice.id,
                "queue": notice.queue,
                "task": notice.task,
                "attempts": notice.attempts,
                "reason": notice.reason,
            },
        )
        for hook in list(hooks):
            call_hook(hook, notice)
    return notices


def call_hook(hook: Hook, notice: DeadNotice) -> None:
    try:
        hook(notice)
    except Exception:
        dead_log.exception(
            "on_dead hook %s failed for job %s",
            getattr(hook, "__name__", hook),
            notice.id,
            extra={"event": "on_dead_hook_failed", "job_id": notice.id},
        )


@dataclass(frozen=True)
class CancelNotice:
    """One job that just ended ``cancelled``: what the log line and ``on_cancel`` hooks get."""

    id: int
    queue: str
    task: str
    attempts: int
    by: str = ""
    reason: str = ""


def report_cancelled(hooks: Iterable[Hook], notices: Iterable[CancelNotice]) -> None:
    """Log one line per cancelled job and call each ``on_cancel`` hook (never raises)."""
    for notice in notices:
        cancel_log.info(
            "job cancelled: queue=%s id=%s task=%s by=%s reason=%s",
            notice.queue,
            notice.id,
            notice.task,
            notice.by,
            notice.reason or "-",
            extra={
                "event": "job_cancelled",
                "job_id": notice.id,
                "queue": notice.queue,
                "task": notice.task,
            },
        )
        for hook in list(hooks):
            try:
                hook(notice)
            except Exception:
                cancel_log.exception(
                    "on_cancel hook %s failed for job %s",
                    getattr(hook, "__name__", hook),
                    notice.id,
                    extra={"event": "on_cancel_hook_failed", "job_id": notice.id},
                )
