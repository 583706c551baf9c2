"""The checks behind every setting and job option: each returns the value or raises a named error.

Settings (names, counts, timeouts, cron expressions) raise ConfigError when the application is
declared; job options (priority, run_at, delay) raise InvalidJob at enqueue; an operator's
filters (queue and task names, job ids) raise InvalidFilter.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

from .errors import MAX_DELAY, ConfigError, InvalidFilter, InvalidJob, InvalidSchema

MAX_ATTEMPTS_CAP = 1000
PRIORITY_RANGE = (-32768, 32767)
NAME_PATTERN = "letters, digits, '_', '-', '.' and ':' (1 to 100 characters)"
#: The task options a cron may set (its task is declared by the cron, not by ``pool.task``).
CRON_TASK_OPTIONS = frozenset({"max_attempts", "timeout", "version", "backoff", "priority"})


def check_name(kind: str, name: Any) -> str:
    ok = isinstance(name, str) and 0 < len(name) <= 100
    if ok and all(ch.isalnum() or ch in "_-.:" for ch in name) and name.isascii():
        return name
    raise ConfigError(f"{kind} name {name!r} is invalid: use {NAME_PATTERN}")


#: The schema a pool uses when it is given none: the tables where they always were.
DEFAULT_SCHEMA = "public"
SCHEMA_PATTERN = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


def check_schema(name: Any) -> str:
    """A schema name that needs no quoting anywhere (SQL, libpq ``options``, Alembic): lower-case
    letters, digits and ``_``, not PostgreSQL's own (``pg_*``, ``information_schema``)."""
    if (
        isinstance(name, str)
        and SCHEMA_PATTERN.match(name)
        and not name.startswith("pg_")
        and name != "information_schema"
    ):
        return name
    raise InvalidSchema(
        f"schema {name!r} is invalid: use lower-case letters, digits and '_' "
        "(1 to 63, not starting with a digit or pg_)"
    )


def check_positive(name: str, value: Any, *, minimum: float = 0.0, allow_none: bool = False) -> Any:
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ConfigError(f"{name} must be a finite number, got {value!r}")
    if value <= minimum:
        raise ConfigError(f"{name} must be greater than {minimum:g}, got {value!r}")
    return value


def check_choice(what: str, value: Any, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise ConfigError(f"{what} must be one of {', '.join(allowed)}; got {value!r}")
    return value


def check_max_attempts(value: Any, error: type[Exception] = ConfigError) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_ATTEMPTS_CAP:
        raise error(f"max_attempts must be an int within 1..{MAX_ATTEMPTS_CAP}, got {value!r}")
    return value


def check_version(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"version must be an int >= 1, got {value!r}")
    return value


def check_priority(value: Any) -> int:
    low, high = PRIORITY_RANGE
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidJob(f"priority must be an int within {low}..{high}, got {value!r}")
    return value


def check_run_at(value: Any) -> datetime | None:
    if value is None:
        return None
    if not isinstance(value, datetime):
        raise InvalidJob(f"run_at must be a datetime, got {type(value).__name__}")
    if value.tzinfo is None or value.utcoffset() is None:
        raise InvalidJob("run_at must be timezone-aware (naive datetimes are ambiguous)")
    return value


def check_delay(value: Any, run_at: datetime | None) -> float | None:
    if value is None:
        return None
    if run_at is not None:
        raise InvalidJob("give run_at or delay, not both")
    if isinstance(value, timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidJob(f"delay must be a finite number of seconds, got {value!r}")
    if not 0 <= value <= MAX_DELAY:
        raise InvalidJob(f"delay must be within 0..{MAX_DELAY:.0f} seconds, got {value!r}")
    return float(value)


#: At most this many tags on a job, each at most MAX_TAG_LENGTH characters.
MAX_TAGS = 20
MAX_TAG_LENGTH = 100


def check_tags(value: Any, error: type[Exception] = InvalidJob) -> tuple[str, ...]:
    """A job's ``tags=``: a list (or tuple) of 1..MAX_TAGS distinct non-empty strings without
    control characters, each at most MAX_TAG_LENGTH long (order kept, repeats dropped)."""
    if isinstance(value, str | bytes) or not isinstance(value, list | tuple):
        raise error(f"tags must be a list of strings, got {type(value).__name__}")
    tags = tuple(dict.fromkeys(check_tag(tag, error) for tag in value))
    if not tags:
        raise error("tags must hold at least one tag (leave tags out for none)")
    if len(tags) > MAX_TAGS:
        raise error(f"at most {MAX_TAGS} tags per job, got {len(tags)}")
    return tags


def check_tag(tag: Any, error: type[Exception] = InvalidJob) -> str:
    if not isinstance(tag, str) or not tag.strip():
        raise error(f"a tag is a non-empty string, got {tag!r:.60}")
    if len(tag) > MAX_TAG_LENGTH or not tag.isprintable():
        raise error(f"a tag has at most {MAX_TAG_LENGTH} printable characters, got {tag!r:.60}")
    return tag


# -- filters of operator commands -------------------------------------------------------------


def check_filter(kind: str, value: Any) -> None:
    """A queue or task name given as a filter: InvalidFilter naming what is wrong."""
    try:
        check_name(kind, value)
    except ValueError as exc:
        raise InvalidFilter(str(exc)) from None


def check_tag_filter(tags: Any) -> tuple[str, ...] | None:
    """The ``--tag`` filters of an operator command (None or empty: no filter); a job matches
    when it carries every one of them."""
    if tags is None or (isinstance(tags, list | tuple) and not tags):
        return None
    return check_tags(tags, InvalidFilter)


def check_ids(ids: Iterable[Any]) -> tuple[int, ...]:
    checked = []
    for value in ids:
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value < 2**63:
            raise InvalidFilter(f"job ids are positive integers (a bigint), got {value!r}")
        checked.append(value)
    if not checked:
        raise InvalidFilter("no job ids given")
    return tuple(dict.fromkeys(checked))


# -- cron ---------------------------------------------------------------------------------------


def check_cron_expression(name: str, expression: Any) -> str:
    """A croniter expression that yields ticks (5 fields, a 6th for seconds, or @hourly etc.)."""
    from croniter import croniter

    if not isinstance(expression, str) or not expression.strip():
        raise ConfigError(f"cron {name}: expression must be a non-empty string, got {expression!r}")
    try:
        croniter(expression, datetime(2000, 1, 1, tzinfo=UTC)).get_next(datetime)
    except Exception as exc:  # croniter raises several unrelated classes for bad input
        raise ConfigError(f"cron {name}: bad expression {expression!r}: {exc}") from None
    return expression


def check_timezone(name: str, timezone: Any) -> str:
    from zoneinfo import ZoneInfo

    try:
        ZoneInfo(timezone)
    except Exception:
        raise ConfigError(
            f"cron {name}: unknown timezone {timezone!r} (use an IANA name)"
        ) from None
    return timezone


def check_cron_task_options(name: str, options: dict[str, Any]) -> dict[str, Any]:
    """The task options given to ``pool.cron``, checked; every error names the cron."""
    unknown = sorted(set(options) - CRON_TASK_OPTIONS)
    if unknown:
        raise ConfigError(
            f"cron {name}: unknown option(s) {unknown}; allowed: {sorted(CRON_TASK_OPTIONS)}"
        )
    try:
        return _checked_task_options(options)
    except ValueError as exc:
        raise ConfigError(f"cron {name}: {exc}") from None


def _checked_task_options(options: dict[str, Any]) -> dict[str, Any]:
    checked = dict(options)
    if "max_attempts" in checked:
        checked["max_attempts"] = check_max_attempts(checked["max_attempts"])
    if "timeout" in checked:
        checked["timeout"] = check_positive("timeout", checked["timeout"], allow_none=True)
    if "version" in checked:
        checked["version"] = check_version(checked["version"])
    if "priority" in checked:
        checked["priority"] = check_priority(checked["priority"])
    if checked.get("backoff") is None:
        checked.pop("backoff", None)
    return checked
