"""Limits that hold across every replica: what they are, how they are written, how they are checked.

A queue may have a ``global_concurrency`` (jobs ``processing`` at once, counted in the database)
and a ``rate_limit`` (claims per window). A task may have a ``concurrency_limit`` and a
``key_rate_limit``, both per concurrency key. The claim enforces them in SQL
(:mod:`workerpool.sql.limits_claim`); this module only describes and checks them.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from .errors import MAX_DELAY, ConfigError, InvalidJob

#: Window names a rate may use, in seconds.
WINDOWS = {
    "s": 1.0,
    "sec": 1.0,
    "second": 1.0,
    "m": 60.0,
    "min": 60.0,
    "minute": 60.0,
    "h": 3600.0,
    "hour": 3600.0,
}
_RATE = re.compile(r"\s*(\d{1,7})\s*/\s*([a-z]+)\s*")
MAX_LIMIT = 1_000_000
UNIQUE_SCOPES = ("forever", "live")
ON_CONFLICT = ("keep", "replace", "error")


@dataclass(frozen=True)
class Rate:
    """At most ``count`` claims in any ``window`` seconds."""

    count: int
    window: float

    def __str__(self) -> str:
        unit = {1.0: "s", 60.0: "m", 3600.0: "h"}[self.window]
        return f"{self.count}/{unit}"


@functools.lru_cache(maxsize=64)
def parse_rate(what: str, value: Any) -> Rate:
    """``"100/s"``, ``"20/m"``, ``"500/hour"`` → Rate; anything else is a ConfigError naming
    ``what``. A regular expression of one line: no parser library is worth a dependency here."""
    match = _RATE.fullmatch(value) if isinstance(value, str) else None
    if match is None or match.group(2) not in WINDOWS or not 1 <= int(match.group(1)) <= MAX_LIMIT:
        raise ConfigError(
            f"{what} must look like '100/s', '20/m' or '500/h' (1..{MAX_LIMIT} per"
            f" second, minute or hour), got {value!r}"
        )
    return Rate(int(match.group(1)), WINDOWS[match.group(2)])


def check_limit(what: str, value: Any) -> int | None:
    """A concurrency limit: None (no limit) or an int within 1..MAX_LIMIT."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_LIMIT:
        raise ConfigError(f"{what} must be an int within 1..{MAX_LIMIT}, got {value!r}")
    return value


def check_task_limits(
    task: str, concurrency_limit: Any, concurrency_key: Any, key_rate_limit: Any
) -> None:
    """The per-key options of ``pool.task``, and their combination, checked by name."""
    check_limit(f"task {task}: concurrency_limit", concurrency_limit)
    if key_rate_limit is not None:
        parse_rate(f"task {task}: key_rate_limit", key_rate_limit)
    if concurrency_key is not None and not callable(concurrency_key):
        raise ConfigError(
            f"task {task}: concurrency_key must be a function of the payload,"
            f" got {type(concurrency_key).__name__}"
        )
    if concurrency_key is not None and concurrency_limit is None and key_rate_limit is None:
        raise ConfigError(
            f"task {task}: concurrency_key limits nothing without"
            " concurrency_limit or key_rate_limit"
        )


# -- the limits a claim enforces ----------------------------------------------------------------


@dataclass(frozen=True)
class KeyLimit:
    """One task's per-key limits (either may be None)."""

    task: str
    concurrency: int | None
    rate: Rate | None


@dataclass(frozen=True)
class ClaimLimits:
    """Everything the claim of one queue must respect; hashable (the statement cache's key)."""

    global_concurrency: int | None = None
    rate: Rate | None = None
    keys: tuple[KeyLimit, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.global_concurrency or self.rate or self.keys)

    def as_json(self) -> dict[str, Any]:
        """What a queue row records for ``workerpool status``."""
        return {
            "global_concurrency": self.global_concurrency,
            "rate_limit": None if self.rate is None else str(self.rate),
            "tasks": {
                k.task: {
                    "concurrency_limit": k.concurrency,
                    "key_rate_limit": None if k.rate is None else str(k.rate),
                }
                for k in self.keys
            },
        }


def claim_limits(queue: Any, tasks: Mapping[str, Any]) -> ClaimLimits:
    """The limits of ``queue`` (a QueueSpec) and its tasks (TaskSpecs by name)."""
    keys = tuple(
        KeyLimit(
            spec.name,
            spec.concurrency_limit,
            None if spec.key_rate_limit is None else parse_rate("", spec.key_rate_limit),
        )
        for spec in sorted(tasks.values(), key=lambda spec: spec.name)
        if spec.queue == queue.name and (spec.concurrency_limit or spec.key_rate_limit)
    )
    rate = None if queue.rate_limit is None else parse_rate("", queue.rate_limit)
    return ClaimLimits(queue.global_concurrency, rate, keys)


# -- enqueue options ------------------------------------------------------------------------------


def job_concurrency_key(spec: Any, payload: Mapping[str, Any], given: Any) -> str | None:
    """The concurrency key a job of ``spec`` is stored with: the one given, else the task's
    function of the payload, else the task's name (one key for the task); None when the task
    has no per-key limit (a key given to it would limit nothing, and is refused)."""
    limited = spec.concurrency_limit is not None or spec.key_rate_limit is not None
    if not limited:
        if given is not None:
            raise InvalidJob(
                f"concurrency_key given, but task {spec.name!r} has no"
                " concurrency_limit or key_rate_limit: it would limit nothing"
            )
        return None
    if given is None and spec.concurrency_key is not None:
        given = _key_of_payload(spec, payload)
    if given is None:
        return spec.name
    if not isinstance(given, str) or not given or len(given) > 255:
        raise InvalidJob(
            f"concurrency_key must be a non-empty string of at most 255 characters,"
            f" got {given!r:.80}"
        )
    return given


def _key_of_payload(spec: Any, payload: Mapping[str, Any]) -> Any:
    key_of: Callable[[Mapping[str, Any]], Any] = spec.concurrency_key
    try:
        return key_of(payload)
    except Exception as exc:
        raise InvalidJob(
            f"task {spec.name!r}: concurrency_key function raised {type(exc).__name__}: {exc}"
        ) from None


def key_scope(
    key: str | None, unique: Any, unique_for: Any, on_conflict: Any
) -> tuple[str | None, float | None, str]:
    """``(key_scope, seconds, on_conflict)`` of a job's key options, refused by name when bad.

    ``key_scope``: None (the key is held forever), ``"live"`` or ``"for"`` (``seconds``).
    """
    if key is None and (unique, unique_for, on_conflict) != (None, None, None):
        raise InvalidJob("unique, unique_for and on_conflict need a key")
    if unique is not None and unique_for is not None:
        raise InvalidJob("give unique or unique_for, not both")
    if unique is not None and unique not in UNIQUE_SCOPES:
        raise InvalidJob(f"unique must be one of {', '.join(UNIQUE_SCOPES)}; got {unique!r}")
    if on_conflict is not None and on_conflict not in ON_CONFLICT:
        raise InvalidJob(
            f"on_conflict must be one of {', '.join(ON_CONFLICT)}; got {on_conflict!r}"
        )
    conflict = on_conflict or "keep"
    if isinstance(unique_for, timedelta):
        unique_for = unique_for.total_seconds()
    if unique_for is None:
        return ("live" if unique == "live" else None), None, conflict
    if (
        isinstance(unique_for, bool)
        or not isinstance(unique_for, int | float)
        or not (math.isfinite(unique_for) and 0 < unique_for <= MAX_DELAY)
    ):
        raise InvalidJob(
            f"unique_for must be a number of seconds within 0..{MAX_DELAY:.0f}"
            f" (above 0), got {unique_for!r}"
        )
    return "for", float(unique_for), conflict
