"""workerpool: durable background jobs for Python on PostgreSQL, run by a pre-fork supervisor."""

from __future__ import annotations

from .backoff import Backoff
from .errors import (
    ConfigError,
    DatabaseNotConfigured,
    IdempotencyConflict,
    InvalidJob,
    LeaseLost,
    PayloadError,
    PayloadTooLarge,
    Permanent,
    RetryLater,
    UnknownQueue,
    UnknownTask,
    WorkerpoolError,
)
from .jobs import Job
from .pool import WorkerPool

__version__ = "0.1.0"

__all__ = [
    "Backoff",
    "ConfigError",
    "DatabaseNotConfigured",
    "IdempotencyConflict",
    "InvalidJob",
    "Job",
    "LeaseLost",
    "PayloadError",
    "PayloadTooLarge",
    "Permanent",
    "RetryLater",
    "UnknownQueue",
    "UnknownTask",
    "WorkerPool",
    "WorkerpoolError",
    "__version__",
]
