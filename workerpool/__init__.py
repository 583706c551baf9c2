"""workerpool: durable background jobs for Python on PostgreSQL, run by a pre-fork supervisor.

Public names are imported on first use (PEP 562), so that `workerpool healthcheck`, an exec probe,
does not pay for SQLAlchemy and psycopg.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .client import WorkerPool
    from .client.batches import Batch
    from .model.backoff import Backoff
    from .model.batch import BatchStatus, MemberResult
    from .model.errors import (
        BatchClosed,
        BatchFinished,
        Cancelled,
        ConfigError,
        DatabaseNotConfigured,
        DuplicateJob,
        IdempotencyConflict,
        InvalidJob,
        InvalidProgress,
        InvalidSchema,
        InvalidSignal,
        InvalidStep,
        JobCancelled,
        JobFailed,
        JobLive,
        LeaseLost,
        PayloadError,
        PayloadTooLarge,
        Permanent,
        ResultTimeout,
        RetryLater,
        SignalExists,
        StepNameReused,
        UnknownBatch,
        UnknownJob,
        UnknownQueue,
        UnknownStep,
        UnknownTask,
        WorkerpoolError,
        WrongState,
    )
    from .model.job import Job
    from .model.results import JobInfo

__version__ = "0.1.0"

_ERRORS = (
    "BatchClosed",
    "BatchFinished",
    "Cancelled",
    "ConfigError",
    "DatabaseNotConfigured",
    "DuplicateJob",
    "IdempotencyConflict",
    "InvalidJob",
    "InvalidSchema",
    "InvalidProgress",
    "InvalidSignal",
    "InvalidStep",
    "JobCancelled",
    "JobFailed",
    "JobLive",
    "LeaseLost",
    "PayloadError",
    "PayloadTooLarge",
    "Permanent",
    "ResultTimeout",
    "RetryLater",
    "SignalExists",
    "StepNameReused",
    "UnknownBatch",
    "UnknownJob",
    "UnknownQueue",
    "UnknownStep",
    "UnknownTask",
    "WorkerpoolError",
    "WrongState",
)
_WHERE = {
    "Backoff": ".model.backoff",
    "Job": ".model.job",
    "WorkerPool": ".client",
    "JobInfo": ".model.results",
    "Batch": ".client.batches",
    "BatchStatus": ".model.batch",
    "MemberResult": ".model.batch",
}
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
    "Batch",
    "BatchClosed",
    "BatchFinished",
    "BatchStatus",
    "Cancelled",
    "ConfigError",
    "DatabaseNotConfigured",
    "DuplicateJob",
    "IdempotencyConflict",
    "InvalidJob",
    "InvalidProgress",
    "InvalidSchema",
    "InvalidSignal",
    "InvalidStep",
    "Job",
    "JobCancelled",
    "JobFailed",
    "JobInfo",
    "JobLive",
    "LeaseLost",
    "MemberResult",
    "PayloadError",
    "PayloadTooLarge",
    "Permanent",
    "ResultTimeout",
    "RetryLater",
    "SignalExists",
    "StepNameReused",
    "UnknownBatch",
    "UnknownJob",
    "UnknownQueue",
    "UnknownStep",
    "UnknownTask",
    "WorkerPool",
    "WorkerpoolError",
    "WrongState",
    "__version__",
]
