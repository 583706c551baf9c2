"""A job to enqueue, checked before anything is written: :class:`NewJob` and its checks.

:func:`build_job` turns one ``pool.enqueue`` call into a row, refusing bad input with a named
error (unknown task, payload not JSON or too large, bad key, naive ``run_at`` ...);
:func:`build_batch` does the same for an ``enqueue_many`` batch, keys within it included. No
database is touched: :mod:`workerpool.client.enqueue` writes what these return.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from .errors import IdempotencyConflict, InvalidJob
from .limits import job_concurrency_key, key_scope
from .payload import check_key, dumps
from .registry import Registry
from .validation import check_delay, check_max_attempts, check_priority, check_run_at, check_tags


class NewJob(NamedTuple):
    """A validated row to insert (built by :func:`build_job`, never by users).

    A NamedTuple, not a frozen dataclass: one is built per enqueued job, and a frozen
    dataclass's ``__init__`` is several times slower.
    """

    queue: str
    task: str
    payload_json: str
    payload_version: int
    priority: int
    max_attempts: int
    key: str | None
    run_at: datetime | None
    delay: float | None
    #: Counted with the jobs of the same key against its task's per-key limits.
    concurrency_key: str | None = None
    #: How long the key is held: None forever, "live", or "for" ``unique_for`` seconds.
    key_scope: str | None = None
    unique_for: float | None = None
    #: What a taken key does: "keep" the holder, "replace" a pending holder's payload and
    #: run_at, or "error".
    on_conflict: str = "keep"
    #: The operator-facing labels (``tags=``); None when none were given.
    tags: tuple[str, ...] | None = None


def build_job(
    registry: Registry,
    task: str | Callable,
    payload: Mapping[str, Any] | None = None,
    *,
    key: str | None = None,
    run_at: datetime | None = None,
    delay: float | timedelta | None = None,
    priority: int | None = None,
    max_attempts: int | None = None,
    concurrency_key: str | None = None,
    unique: str | None = None,
    unique_for: float | timedelta | None = None,
    on_conflict: str | None = None,
    tags: Any = None,
) -> NewJob:
    """Validate one job. Raises a named error for any bad input; touches no database."""
    spec = registry.task_spec(task)
    payload = {} if payload is None else payload
    if spec.signature is not None and spec.signature.typed:  # its arguments, checked
        payload = spec.signature.check(payload)
    scope = (
        _NO_SCOPE
        if key is None and unique is None and unique_for is None and (on_conflict is None)
        else key_scope(key, unique, unique_for, on_conflict)
    )
    return NewJob(  # positional, and option checks only when given: this is per row
        spec.queue,
        spec.name,
        dumps(payload, limit=registry.payload_limit),
        spec.version,
        spec.priority if priority is None else check_priority(priority),
        spec.max_attempts if max_attempts is None else check_max_attempts(max_attempts, InvalidJob),
        None if key is None else check_key(key),
        None if run_at is None else check_run_at(run_at),
        None if delay is None else check_delay(delay, run_at),
        None
        if concurrency_key is None
        and spec.concurrency_limit is None
        and (spec.key_rate_limit is None)
        else job_concurrency_key(spec, payload, concurrency_key),
        *scope,
        None if tags is None else check_tags(tags),
    )


#: key_scope, unique_for and on_conflict of a job without key options.
_NO_SCOPE = (None, None, "keep")


def build_batch(registry: Registry, jobs: Any) -> list[NewJob]:
    """Validate a whole ``enqueue_many`` batch (items, options, keys within it); no database."""
    return build_rows(registry, job_items(jobs), {})


def build_rows(registry: Registry, items: list[Any], seen: dict[str, NewJob]) -> list[NewJob]:
    """Items of a batch (or of one chunk of it), checked; ``seen``: the keys of its earlier
    chunks."""
    return check_batch_keys([build_item(registry, item) for item in items], seen)


def build_item(registry: Registry, item: Any) -> NewJob:
    """One item of a batch: ``(task, payload)`` or ``(task, payload, options)``."""
    if isinstance(item, tuple | list) and len(item) == 2:
        return build_job(registry, item[0], item[1])
    if isinstance(item, tuple | list) and len(item) == 3 and isinstance(item[2], Mapping):
        return build_job(registry, item[0], item[1], **item[2])
    raise InvalidJob(f"each job is (task, payload) or (task, payload, options), got {item!r:.80}")


def job_items(jobs: Any) -> list[Any]:
    """The items of an ``enqueue_many`` batch (a string, a mapping or a non-iterable is not one)."""
    if isinstance(jobs, str | bytes | Mapping) or not isinstance(jobs, Iterable):
        raise InvalidJob(
            "enqueue_many takes an iterable of (task, payload) or (task, payload, options), "
            f"got {type(jobs).__name__}"
        )
    return list(jobs)


def check_batch_keys(rows: list[NewJob], seen: dict[str, NewJob]) -> list[NewJob]:
    """Two rows of one batch with the same key must be the same job, else IdempotencyConflict.
    ``seen`` carries the keys of the batch's earlier chunks."""
    for row in rows:
        if row.key is None:
            continue
        if row.key_scope == "for" or row.on_conflict != "keep":
            raise InvalidJob(
                "enqueue_many takes keys held forever or unique='live';"
                " unique_for and on_conflict='replace' or 'error' are for enqueue()"
            )
        first = seen.setdefault(row.key, row)
        if (first.task, first.payload_json) != (row.task, row.payload_json):
            raise IdempotencyConflict(
                f"key {row.key!r} is used twice in one batch with different jobs"
            )
    return rows
