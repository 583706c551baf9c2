"""What a command acts on: the application's WorkerPool from an ``APP:POOL`` target
(``package.module:pool``), and how a command fails (:class:`CliError`).

Shared by the ``workerpool`` command, ``python -m workerpool.maintenance`` and the pytest
plugin. Cheap to import: the client (SQLAlchemy) loads only when a target is resolved, so that
``workerpool healthcheck`` does not pay for it.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import TYPE_CHECKING, Any

from ..model.errors import WorkerpoolError

if TYPE_CHECKING:
    from ..client import WorkerPool


class CliError(Exception):
    """A failure to report as one line with a non-zero exit."""


class AppLoadError(WorkerpoolError):
    """The APP:POOL target does not name an importable WorkerPool."""


def load_pool(target: str) -> WorkerPool:
    """Import ``module.path:attribute`` (from the current directory too) and return its pool."""
    from ..client import WorkerPool

    module_name, sep, attribute = target.partition(":")
    if not sep or not module_name or not attribute:
        raise AppLoadError(f"APP:POOL must look like 'package.module:pool', got {target!r}")
    sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise AppLoadError(f"cannot import {module_name!r}: {exc}") from None
    pool = getattr(module, attribute, None)
    if not isinstance(pool, WorkerPool):
        raise AppLoadError(f"{target!r} is not a WorkerPool (got {type(pool).__name__})")
    return pool


def existing_database(pool: WorkerPool, command: str) -> WorkerPool:
    """``pool``, unless it names no server and the embedded PostgreSQL is not running: a command
    that reads must not start an empty one in the current directory and fail on its tables."""
    from ..process import settings
    from ..sql import db

    if pool.engines.named or db.embedded_running(settings.embedded_dir()):
        return pool
    raise CliError(
        f"no database to read: set $WORKERPOOL_DATABASE_URL (or give --app whose pool"
        f" names one); the embedded PostgreSQL of {settings.embedded_dir()} is not"
        f" running, and {command} does not start one"
    )


def pool_for(args: Any) -> WorkerPool:
    """The app's pool with ``--app``, else a bare pool on the configured database URL."""
    from ..client import WorkerPool

    return load_pool(args.app) if getattr(args, "app", None) else WorkerPool()


def check_migrated(pool: Any) -> None:
    """NotMigrated before a long-running command starts on a database without this code's
    tables. A database that cannot be reached is left to the command's own handling."""
    from sqlalchemy.exc import OperationalError

    try:
        pool.check_migrated()
    except OperationalError:
        pass
