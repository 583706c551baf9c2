"""Typed tasks as an application holds them: ``@pool.task`` returns a :class:`Task`.

Calling a task calls its function; ``task.enqueue(...)`` takes the handler's own parameters
(after the ``Job``) and returns a :class:`JobHandle` whose ``result()`` has the handler's
return type; ``task.using(...)`` sets the enqueue options of one call. The types are the
handler's (``ParamSpec``), so a type checker refuses a wrong call and types the result; the
same checks run when the call is made (:mod:`workerpool.model.typed`), before anything is
written.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Coroutine, Iterable
from datetime import datetime, timedelta
from typing import (
    TYPE_CHECKING,
    Any,
    Concatenate,
    Generic,
    ParamSpec,
    Protocol,
    TypeVar,
    cast,
    overload,
)

from ..model.dependencies import check_after
from ..model.errors import InvalidArguments
from ..model.job import Job
from ..model.specs import TaskSpec

if TYPE_CHECKING:
    from sqlalchemy import Connection

    from ..model.cancel import CancelResult
    from ..model.results import JobInfo
    from . import WorkerPool

P = ParamSpec("P")
R = TypeVar("R")
R_co = TypeVar("R_co", covariant=True)
Self = TypeVar("Self", bound="BaseTask[Any, Any]")

__all__ = ["AsyncTask", "BaseTask", "JobHandle", "Task", "TaskDecorator"]


class JobHandle(Generic[R_co]):
    """One enqueued job of a typed task: ``.id``, and its result as the handler's return type.

    ``result(timeout=)`` waits as ``pool.result`` does (JobFailed, JobCancelled,
    ResultTimeout, UnknownJob) and rebuilds the stored JSON into the return annotation (a
    dataclass comes back as that dataclass)."""

    __slots__ = ("_pool", "_spec", "id")

    def __init__(self, pool: WorkerPool, spec: TaskSpec, job_id: int) -> None:
        self._pool, self._spec, self.id = pool, spec, job_id

    def result(self, timeout: float | None = None) -> R_co:
        value: R_co = self._rebuilt(self._pool.result(self.id, timeout))
        return value

    async def result_async(self, timeout: float | None = None) -> R_co:
        value: R_co = self._rebuilt(await self._pool.result_async(self.id, timeout))
        return value

    def info(self) -> JobInfo:
        """The job now (``pool.job``): state, result as stored, attempts, errors."""
        return self._pool.job(self.id)

    def cancel(self, *, reason: str | None = None) -> CancelResult:
        """Cancel the job (``pool.cancel``)."""
        return self._pool.cancel([self.id], reason=reason)

    def _rebuilt(self, value: Any) -> Any:
        signature = self._spec.signature
        return value if signature is None else signature.load_result(value)

    def __int__(self) -> int:
        return self.id

    __index__ = __int__

    def __repr__(self) -> str:
        return f"JobHandle(id={self.id}, task={self._spec.name!r})"


class BaseTask(Generic[P, R]):
    """What sync and async tasks share: the enqueue calls and their options."""

    def __init__(
        self, pool: WorkerPool, spec: TaskSpec, options: dict[str, Any] | None = None
    ) -> None:
        functools.update_wrapper(cast(Any, self), spec.fn)  # its name, doc and module
        self._pool, self.spec = pool, spec
        self.__workerpool_task__ = spec.name  # what pool.enqueue(task, ...) looks up
        self._options: dict[str, Any] = options or {}

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def fn(self) -> Callable[..., Any]:
        return self.spec.fn

    def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> JobHandle[R]:
        """Enqueue a job of this task with these arguments (the handler's parameters after
        the ``Job``). InvalidArguments, naming the argument, before anything is written."""
        conn, options = self._split()
        job_id = self._pool.enqueue(self.name, self._arguments(args, kwargs), conn=conn, **options)
        return JobHandle(self._pool, self.spec, job_id)

    async def enqueue_async(self, *args: P.args, **kwargs: P.kwargs) -> JobHandle[R]:
        """:meth:`enqueue` for asyncio (``conn=`` of :meth:`using`: an ``AsyncConnection``)."""
        conn, options = self._split()
        payload = self._arguments(args, kwargs)
        job_id = await self._pool.enqueue_async(self.name, payload, conn=conn, **options)
        return JobHandle(self._pool, self.spec, job_id)

    def payload(self, *args: P.args, **kwargs: P.kwargs) -> dict[str, Any]:
        """The payload of this call, checked: for ``enqueue_many``, ``chain``, a batch or a
        workflow step (``pool.chain([(fetch, fetch.payload(url)), ...])``)."""
        bound = self._arguments(args, kwargs)
        signature = self.spec.signature
        checked: dict[str, Any] = bound if signature is None else signature.check(bound)
        return checked

    def _arguments(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        """The arguments of a call by name, not yet checked (``pool.enqueue`` checks them)."""
        signature = self.spec.signature
        if signature is not None and signature.typed:
            return signature.payload(args, kwargs)
        if args or kwargs:
            raise InvalidArguments(
                f"task {self.name} takes only the job: give its payload to"
                f" pool.enqueue({self.name!r}, {{...}})"
            )
        return {}

    def using(
        self: Self,
        *,
        key: str | None = None,
        priority: int | None = None,
        run_at: datetime | None = None,
        delay: float | timedelta | None = None,
        max_attempts: int | None = None,
        after: Iterable[int | JobHandle[Any]] | None = None,
        sequence: str | None = None,
        tags: Iterable[str] | None = None,
        conn: Connection | Any = None,
        concurrency_key: str | None = None,
        unique: str | None = None,
        unique_for: float | timedelta | None = None,
        on_conflict: str | None = None,
    ) -> Self:
        """This task with enqueue options for its next calls (those of ``pool.enqueue``);
        the options given here replace the same ones given before."""
        given = {
            "key": key,
            "priority": priority,
            "run_at": run_at,
            "delay": delay,
            "max_attempts": max_attempts,
            "after": _ids(after),
            "sequence": sequence,
            "tags": tags,
            "conn": conn,
            "concurrency_key": concurrency_key,
            "unique": unique,
            "unique_for": unique_for,
            "on_conflict": on_conflict,
        }
        options = self._options | {name: v for name, v in given.items() if v is not None}
        return type(self)(self._pool, self.spec, options)

    def _split(self) -> tuple[Any, dict[str, Any]]:
        options = dict(self._options)
        return options.pop("conn", None), options

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}{self._options or ''}>"


def _ids(after: Iterable[int | JobHandle[Any]] | None) -> tuple[int, ...] | None:
    """``after=`` as ids, read now: a generator given once still holds for every call."""
    return None if after is None else check_after(after)


class Task(BaseTask[P, R]):
    """A task whose handler is a plain function: calling the task calls it."""

    def __call__(self, job: Job, /, *args: P.args, **kwargs: P.kwargs) -> R:
        result: R = self.spec.fn(job, *args, **kwargs)
        return result


class AsyncTask(BaseTask[P, R]):
    """A task whose handler is an ``async def``: calling the task returns its coroutine."""

    def __call__(self, job: Job, /, *args: P.args, **kwargs: P.kwargs) -> Coroutine[Any, Any, R]:
        result: Coroutine[Any, Any, R] = self.spec.fn(job, *args, **kwargs)
        return result


class TaskDecorator(Protocol):
    """What ``@pool.task(...)`` with options returns: the decorator of one handler."""

    @overload
    def __call__(  # type: ignore[overload-overlap]
        self, fn: Callable[Concatenate[Job, P], Coroutine[Any, Any, R]], /
    ) -> AsyncTask[P, R]: ...

    @overload
    def __call__(self, fn: Callable[Concatenate[Job, P], R], /) -> Task[P, R]: ...


def wrap(pool: WorkerPool, spec: TaskSpec) -> BaseTask[Any, Any]:
    """The task object ``@pool.task`` returns for the handler of ``spec``."""
    return AsyncTask(pool, spec) if spec.is_async else Task(pool, spec)
