"""workerpool: durable background jobs for Python on PostgreSQL, run by a pre-fork supervisor.

Public names are imported on first use (PEP 562), so that `workerpool healthcheck`, an exec probe,
does not pay for SQLAlchemy and psycopg.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .client import WorkerPool
    from .model.backoff import Backoff
    from .model.errors import (
        Cancelled,
        ConfigError,
        DatabaseNotConfigured,
        DuplicateJob,
        IdempotencyConflict,
        InvalidJob,
        LeaseLost,
        PayloadError,
        PayloadTooLarge,
        Permanent,
        RetryLater,
        UnknownJob,
        UnknownQueue,
        UnknownTask,
        WorkerpoolError,
    )
    from .model.job import Job

__version__ = "0.1.0"

_ERRORS = (
    "Cancelled",
    "ConfigError",
    "DatabaseNotConfigured",
    "DuplicateJob",
    "IdempotencyConflict",
    "InvalidJob",
    "LeaseLost",
    "PayloadError",
    "PayloadTooLarge",
    "Permanent",
    "RetryLater",
    "UnknownJob",
    "UnknownQueue",
    "UnknownTask",
    "WorkerpoolError",
)
_WHERE = {"Backoff": ".model.backoff", "Job": ".model.job", "WorkerPool": ".client"}
_WHERE.update(dict.fromkeys(_ERRORS, ".model.errors"))


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'workerpool' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


__all__ = [
    "Backoff",
    "Cancelled",
    "ConfigError",
    "DatabaseNotConfigured",
    "DuplicateJob",
    "IdempotencyConflict",
    "InvalidJob",
    "Job",
    "LeaseLost",
    "PayloadError",
    "PayloadTooLarge",
    "Permanent",
    "RetryLater",
    "UnknownJob",
    "UnknownQueue",
    "UnknownTask",
    "WorkerPool",
    "WorkerpoolError",
    "__version__",
]
