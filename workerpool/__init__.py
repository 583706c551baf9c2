"""workerpool: durable background jobs for Python on PostgreSQL, run by a pre-fork supervisor.

Public names are imported on first use (PEP 562), so that `workerpool healthcheck`, an exec probe,
does not pay for SQLAlchemy and psycopg. The errors (the standard library only) are imported at
once, listed once, in :data:`workerpool.model.errors.__all__`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .model import errors as _errors
from .model.errors import *  # noqa: F403

if TYPE_CHECKING:
    from .client import WorkerPool
    from .client.batches import Batch
    from .model.backoff import Backoff
    from .model.batch import BatchStatus, MemberResult
    from .model.job import Job
    from .model.results import JobInfo

    __version__: str

_WHERE = {
    "Backoff": ".model.backoff",
    "Job": ".model.job",
    "WorkerPool": ".client",
    "JobInfo": ".model.results",
    "Batch": ".client.batches",
    "BatchStatus": ".model.batch",
    "MemberResult": ".model.batch",
}


def __getattr__(name: str) -> Any:
    if name == "__version__":  # one place: pyproject.toml, read from the installed package
        from importlib.metadata import version

        return version("workerpool")
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
    "BatchStatus",
    "Job",
    "JobInfo",
    "MemberResult",
    "WorkerPool",
    "__version__",
]
__all__ += _errors.__all__
