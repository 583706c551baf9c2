"""The dead-letter queue: listing, replaying and purging dead jobs.

A job that gives up is reported once, by the process that moved it
(:func:`workerpool.model.notices.report_dead`). Dead rows stay (with their full error
history) until an operator replays them (:func:`retry`: attempts reset, history kept, the replay
recorded in the row's ``replays``) or purges them (:func:`purge`). The ``workerpool dead``
command and the dashboard call these.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection

from .. import sql
from ..client import WorkerPool, actor
from ..model.dependencies import line_policy
from ..model.errors import InvalidFilter, ReplayRefused
from ..model.states import LIVE_WORKER_WINDOW
from ..model.validation import check_filter, check_ids, check_tag_filter
from ..sql import audit, dependencies, sequences
from ..sql.schema import DEAD_REASONS

log = logging.getLogger("workerpool.dead")

BATCH = 1000
DEFAULT_LIST_LIMIT = 100

Progress = Callable[[int, int], None]  # (rows done, rows in total)


# -- filters ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class DeadFilter:
    """Which dead rows an operation applies to (every field optional; all are ANDed)."""

    queue: str | None = None
    task: str | None = None
    reason: str | None = None
    since: datetime | timedelta | None = None
    ids: tuple[int, ...] | None = None
    #: Dead rows carrying every one of these tags.
    tags: tuple[str, ...] | None = None
    key: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "tags", check_tag_filter(self.tags))
        for kind in ("queue", "task"):
            if getattr(self, kind) is not None:
                check_filter(kind, getattr(self, kind))
        if self.reason is not None and self.reason not in DEAD_REASONS:
            raise InvalidFilter(
                f"reason must be one of {', '.join(DEAD_REASONS)}; got {self.reason!r}"
            )
        if isinstance(self.since, datetime) and self.since.utcoffset() is None:
            raise InvalidFilter("since must be timezone-aware (e.g. 2024-05-01T10:00:00+00:00)")
        if self.since is not None and not isinstance(self.since, datetime | timedelta):
            raise InvalidFilter(f"since must be a datetime or timedelta, got {self.since!r}")
        if self.ids is not None:
            object.__setattr__(self, "ids", check_ids(self.ids))

    def target(self) -> str:
        """What the filter names, for the audit trail: ``dead`` and its set fields."""
        since = self.since.isoformat() if isinstance(self.since, datetime) else self.since
        fields = {
            "queue": self.queue,
            "task": self.task,
            "reason": self.reason,
            "since": since,
            "key": self.key,
            "tags": ",".join(self.tags or ()) or None,
            "ids": ",".join(map(str, self.ids or ())) or None,
        }
        return " ".join(["dead", *(f"{k}={v}" for k, v in fields.items() if v is not None)])

    def where(self, older_than: timedelta | None = None):
        return sql.dead_where(
            queue=self.queue,
            task=self.task,
            reason=self.reason,
            since=self.since,
            ids=self.ids,
            older_than=older_than,
            tags=self.tags,
            key=self.key,
        )


DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$")
UNIT_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
#: The longest duration accepted: a century (longer ones overflow a date, to no use).
MAX_DURATION = timedelta(days=36525)


def parse_duration(text: str) -> timedelta:
    """``90``, ``90s``, ``15m``, ``12h``, ``7d`` or ``2w`` → timedelta."""
    match = DURATION.match(text or "")
    if not match:
        raise InvalidFilter(f"bad duration {text!r}: use a number with s, m, h, d or w (e.g. 7d)")
    seconds = float(match[1]) * UNIT_SECONDS[match[2]]
    if seconds > MAX_DURATION.total_seconds():
        raise InvalidFilter(f"bad duration {text!r}: at most {MAX_DURATION.days} days")
    return timedelta(seconds=seconds)


def parse_since(text: str) -> datetime | timedelta:
    """A duration back from now (``2h``) or an ISO 8601 time with its offset."""
    if DURATION.match(text or ""):
        return parse_duration(text)
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise InvalidFilter(f"bad --since {text!r}: use a duration (2h, 7d) or ISO 8601") from None
    if moment.utcoffset() is None:
        raise InvalidFilter(f"--since {text!r} has no UTC offset (add +00:00 or Z)")
    return moment


# -- list ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DeadRow:
    """One dead row as an operator sees it."""

    id: int
    queue: str
    task: str
    reason: str
    attempts: int
    max_attempts: int
    created_at: datetime
    finished_at: datetime | None
    key: str | None
    payload: dict[str, Any]
    payload_version: int
    error_count: int
    last_error: dict[str, Any] | None
    replays: list[dict[str, Any]] = field(default_factory=list)
    tags: list[str] | None = None

    @classmethod
    def from_row(cls, row: Any) -> DeadRow:
        return cls(
            id=row.id,
            queue=row.queue,
            task=row.task,
            reason=row.dead_reason,
            attempts=row.attempts,
            max_attempts=row.max_attempts,
            created_at=row.created_at,
            finished_at=row.finished_at,
            key=row.key,
            payload=row.payload,
            payload_version=row.payload_version,
            error_count=row.error_count,
            last_error=row.last_error,
            replays=list(row.replays or []),
            tags=row.tags,
        )

    def to_json(self) -> dict[str, Any]:
        data = dict(self.__dict__)
        data["created_at"] = self.created_at.isoformat()
        data["finished_at"] = self.finished_at.isoformat() if self.finished_at else None
        return data


@dataclass(frozen=True)
class DeadPage:
    jobs: list[DeadRow]
    total: int  # how many dead rows match, beyond the limit


def list_dead(
    pool: WorkerPool, filters: DeadFilter | None = None, *, limit: int | None = DEFAULT_LIST_LIMIT
) -> DeadPage:
    """Dead jobs matching ``filters``, most recently dead first (``limit=None``: all)."""
    filters = filters or DeadFilter()
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise InvalidFilter(f"limit must be a positive int, got {limit!r}")
    with pool.engine.connect() as conn:
        rows = sql.list_dead(conn, filters.where(), limit)
        total = sql.count_dead(conn, filters.where())
    return DeadPage([DeadRow.from_row(row) for row in rows], total)


# -- retry (replay) -------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReplayResult:
    ids: list[int]  # replayed (or, with dry_run, that would be)
    by_task: dict[str, int]
    dry_run: bool
    not_dead: list[int] = field(default_factory=list)  # requested ids that are not dead rows


def retry(
    pool: WorkerPool,
    ids: Iterable[int] | None = None,
    *,
    all_matching: bool = False,
    filters: DeadFilter | None = None,
    dry_run: bool = False,
    by: str | None = None,
    known_tasks: Iterable[str] | None = None,
    progress: Progress | None = None,
    batch: int = BATCH,
) -> ReplayResult:
    """Replay dead jobs: back to ``pending`` now, attempts reset, errors kept, replay recorded.

    Give ``ids`` or ``all_matching=True`` (with ``filters``). Before anything is written every
    matching row's task is checked against ``known_tasks`` (default: the pool's tasks, else the
    tasks live workers registered); an unknown task raises ReplayRefused and changes nothing.
    """
    filters = _with_ids(filters or DeadFilter(), ids, all_matching)
    by = actor(by)
    with pool.engine.connect() as conn:
        todo = sql.dead_ids(conn, filters.where())
        by_task = sql.dead_tasks(conn, filters.where())
        if by_task:
            _refuse_unknown_tasks(by_task, _known_task_names(pool, conn, known_tasks))
    not_dead = sorted(set(filters.ids or ()) - set(todo))
    if dry_run or not todo:
        return ReplayResult(todo, by_task, dry_run, not_dead)
    replayed = _in_batches(
        pool, todo, batch, progress, lambda conn, chunk: _replay(pool, conn, chunk, by, filters)
    )
    log.info("replayed %d dead jobs", len(replayed), extra={"event": "dead_replayed", "by": by})
    return ReplayResult(sorted(replayed), by_task, False, not_dead)


def _with_ids(filters: DeadFilter, ids: Iterable[int] | None, all_matching: bool) -> DeadFilter:
    if ids is not None and all_matching:
        raise InvalidFilter("give job ids or all_matching, not both")
    if ids is None and not all_matching:
        raise InvalidFilter("give job ids, or all_matching=True (--all) to replay every match")
    if ids is None:
        return filters
    return dataclasses.replace(filters, ids=tuple(ids))


def _replay(
    pool: WorkerPool, conn: Connection, ids: Sequence[int], by: str, filters: DeadFilter
) -> list[int]:
    rows = sql.replay_dead(conn, ids, by)
    if rows and pool.registry.notify:
        sql.notify(conn, (row.queue for row in rows))
    replayed = [row.id for row in rows]
    for row in rows:  # one at a time, in its line: never beside the job its sequence runs
        if row.sequence is not None:
            sequences.wait_in_line(
                conn, row.id, row.sequence, lambda task: line_policy(pool.registry, task)
            )
    # what the failure cancelled runs once the replayed job is done (docs/workflows.md)
    dependencies.reopen_dependents(conn, replayed)
    if replayed:
        audit.record(conn, by, "retry", filters.target(), {"ids": replayed})
    return replayed


def _purge(conn: Connection, ids: Sequence[int], by: str, target: str) -> list[int]:
    """Delete dead rows; a sequence a purged job blocked (``on_failure="block"``) goes on."""
    purged = sql.purge_dead(conn, ids)
    dependencies.release(conn, purged)
    if purged:
        audit.record(conn, by, "purge", target, {"ids": purged})
    return purged


def _known_task_names(
    pool: WorkerPool, conn: Connection, known_tasks: Iterable[str] | None
) -> set[str]:
    if known_tasks is not None:
        return set(known_tasks)
    if pool.tasks:
        return set(pool.tasks)
    live = [row for row in sql.list_workers(conn) if row.age <= LIVE_WORKER_WINDOW]
    names = {task for row in live for task in (row.tasks or {})}
    if not names:
        raise ReplayRefused(
            "cannot check that these jobs' tasks still exist: no live worker has registered "
            "its tasks and no app was given (pass --app APP:POOL)"
        )
    return names


def _refuse_unknown_tasks(by_task: Mapping[str, int], known: set[str]) -> None:
    unknown = {task: count for task, count in sorted(by_task.items()) if task not in known}
    if unknown:
        listing = ", ".join(f"{task!r} ({count} jobs)" for task, count in unknown.items())
        raise ReplayRefused(
            f"cannot replay: task {listing} is no longer registered; nothing was changed "
            "(narrow with --task, or remove them with 'workerpool dead purge')"
        )


# -- purge --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PurgeResult:
    count: int
    dry_run: bool


def purge(
    pool: WorkerPool,
    older_than: timedelta | float,
    filters: DeadFilter | None = None,
    *,
    dry_run: bool = False,
    progress: Progress | None = None,
    batch: int = BATCH,
    by: str | None = None,
) -> PurgeResult:
    """Delete dead rows that died more than ``older_than`` (timedelta or seconds) ago; each
    chunk's audit entry (as ``by``) is written in the chunk's transaction."""
    age = older_than if isinstance(older_than, timedelta) else _seconds(older_than)
    if age.total_seconds() < 0:
        raise InvalidFilter(f"older_than must be >= 0, got {older_than!r}")
    filters = filters or DeadFilter()
    where = filters.where(older_than=age)
    by = actor(by)
    with pool.engine.connect() as conn:
        todo = sql.dead_ids(conn, where)
    if dry_run or not todo:
        return PurgeResult(len(todo), dry_run)
    target = f"{filters.target()} older_than={age}"
    done = _in_batches(
        pool, todo, batch, progress, lambda conn, chunk: _purge(conn, chunk, by, target)
    )
    log.info("purged %d dead jobs", len(done), extra={"event": "dead_purged"})
    return PurgeResult(len(done), False)


def _seconds(value: Any) -> timedelta:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidFilter(
            f"older_than must be a timedelta or a finite number of seconds, got {value!r}"
        )
    return timedelta(seconds=value)


def _in_batches(
    pool: WorkerPool,
    ids: Sequence[int],
    batch: int,
    progress: Progress | None,
    step: Callable[[Connection, Sequence[int]], list[Any]],
) -> list[Any]:
    """Run ``step`` over ``ids`` in chunks, one short transaction each, reporting progress."""
    done: list[Any] = []
    for start in range(0, len(ids), batch):
        with pool.engine.begin() as conn:
            done.extend(step(conn, ids[start : start + batch]))
        if progress is not None:
            progress(min(start + batch, len(ids)), len(ids))
    return done
