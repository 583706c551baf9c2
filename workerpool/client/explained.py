"""A call that meets a database without workerpool's tables (or with older ones) says
``workerpool migrate`` in one line (NotMigrated), instead of the driver's UndefinedTable."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

from ..sql import revision

if TYPE_CHECKING:
    from . import WorkerPool

F = TypeVar("F", bound=Callable[..., Any])


def explained(method: F) -> F:
    """A call that says ``workerpool migrate`` (NotMigrated, one line) when it meets a database
    without workerpool's tables, or with older ones, instead of the driver's UndefinedTable.
    Nothing is added before the statements: the check runs only once they have failed."""
    if inspect.iscoroutinefunction(method):

        @functools.wraps(method)
        async def explained_async(self: WorkerPool, *args: Any, **kwargs: Any) -> Any:
            try:
                return await method(self, *args, **kwargs)
            except revision.ERRORS as exc:
                if not revision.is_missing(exc):
                    raise
                raise self.not_migrated(exc) from None

        return explained_async  # type: ignore[return-value]

    @functools.wraps(method)
    def explained(self: WorkerPool, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except revision.ERRORS as exc:
            if not revision.is_missing(exc):
                raise
            raise self.not_migrated(exc) from None

    return explained  # type: ignore[return-value]


@contextmanager
def explaining(pool: WorkerPool) -> Iterator[None]:
    """Around statements on ``pool``'s database: NotMigrated as :func:`explained` raises it."""
    try:
        yield
    except revision.ERRORS as exc:
        if not revision.is_missing(exc):
            raise
        raise pool.not_migrated(exc) from None
