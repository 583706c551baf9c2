"""The apps of ``tests/apps`` on a test's database: the enqueue side of one (its
``build(url)``), with the tables its handlers write made first."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any

from workerpool import WorkerPool


@contextmanager
def app_pool(module: ModuleType, db_url: Any, tables: Iterable[str] = ()) -> Iterator[WorkerPool]:
    """``module.build(db_url)``, once the statements of ``tables`` (``CREATE TABLE`` of what its
    handlers write: a ledger) ran on ``db_url``; disposed at the end."""
    pool: WorkerPool = module.build(db_url)
    try:
        statements = list(tables)
        if statements:
            with pool.engine.begin() as conn:
                for statement in statements:
                    conn.exec_driver_sql(statement)
        yield pool
    finally:
        pool.dispose()
