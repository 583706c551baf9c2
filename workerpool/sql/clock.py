"""Time as the database keeps it: intervals, ``now()``, and a transaction's time limits.

Every stored time comes from the database clock; the caller's clock is never written. A bounded
transaction also gets the planner settings of workerpool's statements (:mod:`.planner`).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import Connection, func, select, text

from .planner import PLANNER_SETTINGS


def seconds(value: float) -> timedelta:
    return timedelta(seconds=value)


# database_now: the database clock (cron and status read it). Index: none, no table.
def database_now(conn: Connection) -> datetime:
    return conn.execute(select(func.now())).scalar_one()


def bound_transaction(
    conn: Connection, *, statement_timeout: float, lock_timeout: float, idle_timeout: float
) -> None:
    """Time limits (seconds) and the planner settings for the rest of this transaction only.

    ``set_config(..., is_local => true)`` is ``SET LOCAL``: nothing outlives the transaction, so
    it is safe behind PgBouncer in transaction pooling mode. A statement that runs too long
    (57014), waits too long for a lock (55P03) or a transaction left idle (25P03) errors out
    instead of hanging the worker. The planner settings come first in the same round trip, so
    every statement of the transaction is planned under them.
    """
    limits = time_limits(
        statement_timeout=statement_timeout, lock_timeout=lock_timeout, idle_timeout=idle_timeout
    )
    conn.execute(_BOUND_TRANSACTION, {**limits, **PLANNER_SETTINGS})


def time_limits(
    *, statement_timeout: float, lock_timeout: float, idle_timeout: float
) -> dict[str, str]:
    """The three limits (seconds) as PostgreSQL settings: ``{name: "<n>ms"}``."""
    return {
        "statement_timeout": _milliseconds(statement_timeout),
        "lock_timeout": _milliseconds(lock_timeout),
        "idle_in_transaction_session_timeout": _milliseconds(idle_timeout),
    }


def _milliseconds(value: float) -> str:
    return f"{max(1, round(value * 1000))}ms"


_LOCAL_SETTINGS = (
    *PLANNER_SETTINGS,
    "statement_timeout",
    "lock_timeout",
    "idle_in_transaction_session_timeout",
)

# bound_transaction: SET LOCAL the planner settings and the three time limits. Index: none.
#: Built once: it opens every worker transaction.
_BOUND_TRANSACTION = text(
    "SELECT " + ", ".join(f"set_config('{name}', :{name}, true)" for name in _LOCAL_SETTINGS)
)
