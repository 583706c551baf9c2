"""Enqueue with links: ``after=`` (parents), ``sequence=`` (one at a time, in order), and the
chains and workflows built from them (``pool.chain``, ``pool.workflow``).

A linked job is checked like any job (:mod:`workerpool.model.new_job`), then written in one
transaction (or a savepoint of the caller's): the sequence's lock and newest live job, the
parents locked and marked (:func:`workerpool.sql.dependencies.lock_parents`), the row
inserted by the ordinary enqueue (:mod:`.enqueue`), and its edges and state (waiting, unless
every parent is already done) written by :func:`workerpool.sql.dependencies.attach`. Jobs
without links never come here.
"""

from __future__ import annotations

import graphlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy import Connection, select, text
from sqlalchemy.exc import DBAPIError

from ..model.dependencies import (
    AFTER,
    DUE,
    SEQUENCE,
    Edge,
    after_policy,
    check_after,
    check_parents,
    check_sequence,
    line_policy,
    verdict,
)
from ..model.errors import (
    IdempotencyConflict,
    InvalidDependency,
    InvalidJob,
    WorkflowCycle,
)
from ..model.new_job import NewJob, build_item, build_job
from ..model.states import LIVE_STATES, JobState
from ..sql import autocommit, unique_keys
from ..sql.dependencies import Link, attach, lock_parents
from ..sql.schema import history, jobs
from ..sql.sequences import sequence_tail
from .enqueue import Target, _atomically, caller_async_connection, caller_connection, enqueue_one

if TYPE_CHECKING:
    from .tasks import JobHandle

#: The options that link a job to others.
LINK_OPTIONS = ("after", "sequence")
#: Options that make no sense with links: a key's holder may already exist, with other parents.
_KEY_OPTIONS = ("key", "unique", "unique_for", "on_conflict")
#: Marks the first job of a chain or workflow: its own id becomes the workflow's.
SELF = -1


def is_linked(options: Mapping[str, Any]) -> bool:
    return "after" in options or "sequence" in options


def split(options: Mapping[str, Any]) -> tuple[dict[str, Any], tuple[int, ...], str | None]:
    """``options`` without the links, and the links checked (InvalidDependency by name)."""
    rest = dict(options)
    after = rest.pop("after", None)
    sequence = rest.pop("sequence", None)
    parents = () if after is None else check_after(after)
    name = None if sequence is None else check_sequence(sequence)
    for option in _KEY_OPTIONS:
        if rest.get(option) is not None and (parents or name is not None):
            raise InvalidDependency(
                f"{option}= cannot go with after= or sequence=: a job holding the key may"
                " already exist with other parents"
            )
    return rest, parents, name


T = TypeVar("T")


def in_transaction(pool: Target, conn: Connection | None, write: Callable[[Connection], T]) -> T:
    """``write(tx)`` in the caller's transaction (a savepoint in it), or in a transaction of its
    own on a pooled connection without the checkout ping (``autocommit``: a transaction that
    never reached its COMMIT can be sent again)."""
    if conn is None:
        return autocommit.write(pool.engine, lambda own: _atomic(own, True, write))
    return _atomic(caller_connection(conn), False, write)


#: Runs of a linked write in all when it loses a deadlock: it locks its parents in id order,
#: but a worker's outcome write finishes the same rows in the order its plan visits them, and
#: PostgreSQL then aborts one of the two. The worker's write is retried by its next pass; this
#: one is retried here, never surfaced to the caller.
DEADLOCK_TRIES = 5
DEADLOCK_DETECTED = "40P01"


def _atomic(conn: Connection, own: bool, write: Callable[[Connection], T]) -> T:
    for attempt in range(1, DEADLOCK_TRIES + 1):
        try:
            with _atomically(conn, own):  # rolled back whole (or to its savepoint) on error
                return write(conn)
        except DBAPIError as exc:
            if _sqlstate(exc.orig) != DEADLOCK_DETECTED or attempt == DEADLOCK_TRIES:
                raise
    raise AssertionError("unreachable")


def _sqlstate(error: BaseException | None) -> str | None:
    """The error's SQLSTATE, from psycopg 3 or from psycopg2 (a caller's engine)."""
    return getattr(error, "sqlstate", None) or getattr(error, "pgcode", None)


def enqueue_linked(
    pool: Target,
    task: str | Callable,
    payload: Mapping[str, Any] | None,
    conn: Connection | None,
    options: Mapping[str, Any],
    *,
    batch_id: int | None = None,
) -> int:
    """``pool.enqueue`` with ``after=`` or ``sequence=``: checked, then written atomically."""
    rest, after, sequence = split(options)
    build_job(pool.registry, task, payload, **rest)  # every other check, before any lock
    return in_transaction(
        pool,
        conn,
        lambda tx: link_one(pool, tx, task, payload, rest, after, sequence, batch_id=batch_id),
    )


def enqueue_one_or_linked(
    pool: Target,
    task: str | Callable,
    payload: Mapping[str, Any] | None,
    conn: Connection | None,
    options: Mapping[str, Any],
    *,
    batch_id: int | None = None,
) -> int:
    if is_linked(options):
        return enqueue_linked(pool, task, payload, conn, options, batch_id=batch_id)
    return enqueue_one(pool, task, payload, conn, options, batch_id=batch_id)


def link_one(
    pool: Target,
    tx: Connection,
    task: str | Callable,
    payload: Mapping[str, Any] | None,
    options: Mapping[str, Any],
    after: Sequence[int],
    sequence: str | None,
    *,
    batch_id: int | None = None,
    workflow_id: int | None = None,
    step: str | None = None,
) -> int:
    """Write one linked job on ``tx`` (a transaction): parents locked, row, edges; ``step``:
    its name in its workflow."""
    spec = pool.registry.task_spec(task)
    tail = sequence_tail(tx, sequence) if sequence is not None else None
    parents = lock_parents(tx, [*after, *([tail] if tail is not None else [])])
    check_parents(after, {job_id: parent.state for job_id, parent in parents.items()})
    edges = [(job_id, AFTER, after_policy(spec.on_dependency_failure)) for job_id in after]
    head = parents.get(tail) if tail is not None else None
    if head is not None and head.id not in after:
        policy = line_policy(pool.registry, head.task)
        if head.state in LIVE_STATES or (head.state == JobState.DEAD and policy == "hold"):
            edges.append((head.id, SEQUENCE, policy))
    wait = (
        verdict(
            [Edge(0, parent, kind, policy, parents[parent].state) for parent, kind, policy in edges]
        )[0]
        != DUE
    )
    job_id = enqueue_one(pool, task, payload, tx, options, batch_id=batch_id)
    attach(
        tx,
        [
            Link(
                job_id,
                tuple(edges),
                wait,
                sequence,
                job_id if workflow_id == SELF else workflow_id,
                step,
            )
        ],
    )
    return job_id


def enqueue_many_linked(
    pool: Target, items: list[Any], conn: Connection | None, *, batch_id: int | None = None
) -> list[int]:
    """``enqueue_many`` whose items carry links: every item checked, then written one by one
    in one transaction (a savepoint of the caller's)."""
    checked = [_step(pool, item, None) for item in items]
    return in_transaction(
        pool,
        conn,
        lambda tx: [
            link_one(pool, tx, task, payload, rest, after, sequence, batch_id=batch_id)
            for task, payload, rest, after, sequence in checked
        ],
    )


def has_links(items: list[Any]) -> bool:
    return any(
        isinstance(item, tuple | list)
        and len(item) == 3
        and isinstance(item[2], Mapping)
        and is_linked(item[2])
        for item in items
    )


# ---------------------------------------------------------------------------------------------
# chains and workflows

# graph_lock: callers of one graph key wait for each other, so the second sees the first's head
# once it commits (the key's unique index alone would let it write the dependents again).
_GRAPH_LOCK = text("SELECT pg_advisory_xact_lock(hashtextextended(:key, 0))")


def _graph_ids(head: int) -> Any:
    """Every job of the graph ``head`` heads, in the order they were written (id order), the
    ones moved to the history too. Index: ix_workerpool_jobs_workflow and its history twin."""
    return (
        select(jobs.c.id)
        .where(jobs.c.workflow_id == head)
        .union_all(select(history.c.id).where(history.c.workflow_id == head))
        .order_by("id")
    )


def existing_graph(tx: Connection, head: NewJob) -> list[int] | None:
    """The ids of the chain or workflow whose first job holds ``head``'s key, or None when no
    job holds it (then the caller writes the graph, holding the lock until its commit). The key
    is checked as an enqueue checks it: DuplicateJob with ``on_conflict="error"``,
    IdempotencyConflict when it names another task or payload, or a job heading no graph."""
    tx.execute(_GRAPH_LOCK, {"key": f"workerpool.graph:{head.key}"})
    holder = unique_keys.holder(tx, head.key)
    if holder is not None and holder.expired:
        unique_keys.release_expired(tx, head.key)
        return None
    if holder is None:
        return None
    first = unique_keys.settle(head, holder)
    if holder.workflow_id != first:
        raise IdempotencyConflict(
            f"key {head.key!r} is held by job {first}, which heads no chain or workflow"
        )
    return list(tx.execute(_graph_ids(first)).scalars())


def graph_key(
    steps: list[tuple[Any, Any, dict, tuple[int, ...], Any]], key: str | None, what: str
) -> dict[str, Any]:
    """The first step's options with the graph's key (``key=``, or the first step's own), after
    refusing key options anywhere else: a later step's key could find a job of another graph
    and link it into this one."""
    for index, (_, _, rest, _, _) in enumerate(steps[1:], start=1):
        for option in _KEY_OPTIONS:
            if rest.get(option) is not None:
                raise InvalidDependency(
                    f"step {index}: {option}= cannot go on a later step of a {what}; give the "
                    f"{what} a key (pool.{what}(..., key=...)): the same call twice then makes "
                    "one graph"
                )
    head = dict(steps[0][2])
    if key is not None:
        if head.get("key") not in (None, key):
            raise InvalidDependency(
                f"the {what} has key={key!r} and its first step key={head['key']!r}: give one"
            )
        head["key"] = key
    if head.get("key") is not None and head.get("on_conflict") == "replace":
        raise InvalidDependency(
            f"on_conflict='replace' cannot go on a {what}'s key: its "
            "later steps would be left behind"
        )
    return head


def chain(pool: Target, steps: Any, conn: Connection | None, key: str | None = None) -> list[int]:
    """Each step after the previous one, in one transaction; the first one's id is the
    workflow's. ``steps``: ``(task, payload)`` or ``(task, payload, options)``. ``key`` (or a
    key on the first step): a chain whose first job holds it already is returned as it is
    (every one of its ids), nothing written."""
    if isinstance(steps, str | bytes | Mapping) or not isinstance(steps, Iterable):
        raise InvalidJob("chain takes a non-empty list of (task, payload[, options]) steps")
    steps = list(steps)
    if not steps:
        raise InvalidJob("chain takes a non-empty list of (task, payload[, options]) steps")
    planned = [_step(pool, item, i) for i, item in enumerate(steps)]
    first = graph_key(planned, key, "chain")
    planned[0] = (planned[0][0], planned[0][1], first, *planned[0][3:])
    head = (
        build_job(pool.registry, planned[0][0], planned[0][1], **first)
        if first.get("key") is not None
        else None
    )

    def write(tx: Connection) -> list[int]:
        if head is not None and (found := existing_graph(tx, head)) is not None:
            return found
        ids: list[int] = []
        for task, payload, rest, after, sequence in planned:
            parents = (*after, ids[-1]) if ids else after
            ids.append(
                link_one(
                    pool,
                    tx,
                    task,
                    payload,
                    rest,
                    parents,
                    sequence,
                    workflow_id=ids[0] if ids else SELF,
                )
            )
        return ids

    return in_transaction(pool, conn, write)


def _step(
    pool: Target, item: Any, index: int | None
) -> tuple[Any, Any, dict, tuple[int, ...], Any]:
    """One item ``(task, payload[, options])`` checked whole: links split off, the rest built
    like any job."""
    try:
        if isinstance(item, tuple | list) and len(item) == 3 and isinstance(item[2], Mapping):
            rest, after, sequence = split(item[2])
            build_item(pool.registry, (item[0], item[1], rest))
            return item[0], item[1], rest, after, sequence
        build_item(pool.registry, item)
        return item[0], item[1], {}, (), None
    except InvalidJob as exc:
        if index is None:
            raise
        raise type(exc)(f"step {index}: {exc}") from None


class Workflow:
    """Named steps with ``after=`` by name (or by job id or handle), enqueued together by
    :meth:`run`.

    ``pool.workflow()`` makes one; :meth:`step` adds a step and returns its name. The steps are
    ordered with the standard library's ``graphlib.TopologicalSorter``, which also finds a
    cycle (:class:`WorkflowCycle`, nothing written).
    """

    def __init__(
        self, pool: Target, conn: Connection | None = None, key: str | None = None
    ) -> None:
        self.pool = pool
        self.conn = conn
        #: The workflow's key: its first job holds it, and a run whose key is held returns
        #: that workflow's ids instead of writing another.
        self.key = key
        self.steps: dict[
            str, tuple[Any, Any, dict[str, Any], tuple[str, ...], tuple[int, ...], str | None]
        ] = {}

    def step(
        self,
        name: str,
        task: str | Callable,
        payload: Mapping[str, Any] | None = None,
        *,
        after: Sequence[str | int | JobHandle[Any]] = (),
        **options: Any,
    ) -> str:
        if not isinstance(name, str) or not name:
            raise InvalidJob(f"a step's name must be a non-empty string, got {name!r}")
        if name in self.steps:
            raise InvalidJob(f"step {name!r} is defined twice")
        if not isinstance(after, Iterable) or isinstance(after, bytes):
            check_after(after)  # refuses it with the error every after= gives
        # read twice below: a generator would be empty the second time
        parents = (after,) if isinstance(after, str) else tuple(after)
        names = tuple(a for a in parents if isinstance(a, str))
        ids = check_after([a for a in parents if not isinstance(a, str)])
        build_job(
            self.pool.registry,
            task,
            payload,
            **{k: v for k, v in options.items() if k not in LINK_OPTIONS},
        )
        rest, _, sequence = split(options)
        self.steps[name] = (task, payload, rest, names, ids, sequence)
        return name

    def order(self) -> list[str]:
        graph = graphlib.TopologicalSorter({name: step[3] for name, step in self.steps.items()})
        for name, step in self.steps.items():
            for parent in step[3]:
                if parent not in self.steps:
                    raise InvalidDependency(
                        f"step {name!r} is after {parent!r}, which is not a step of this workflow"
                    )
        try:
            return list(graph.static_order())
        except graphlib.CycleError as exc:
            raise WorkflowCycle(
                f"the steps wait for each other in a cycle: {exc.args[1]}"
            ) from None

    def run(self, conn: Connection | None = None) -> dict[str, int]:
        """Enqueue every step in one transaction (``conn=``: the caller's); {name: job id}.
        The first step enqueued gives the workflow its id (every job's ``workflow_id``)."""
        if not self.steps:
            raise InvalidJob("a workflow needs at least one step")
        order = self.order()
        steps = dict(self.steps)
        planned = [(steps[n][0], steps[n][1], steps[n][2], (), None) for n in order]
        first = graph_key(planned, self.key, "workflow")
        steps[order[0]] = (*steps[order[0]][:2], first, *steps[order[0]][3:])
        head = (
            build_job(self.pool.registry, steps[order[0]][0], steps[order[0]][1], **first)
            if first.get("key") is not None
            else None
        )

        def write(tx: Connection) -> dict[str, int]:
            if head is not None and (found := existing_graph(tx, head)) is not None:
                if len(found) != len(order):
                    raise IdempotencyConflict(
                        f"key {head.key!r} already names a workflow of {len(found)} jobs; this "
                        f"one has {len(order)} steps"
                    )
                return dict(zip(order, found, strict=True))
            ids: dict[str, int] = {}
            for name in order:
                task, payload, rest, names, parent_ids, sequence = steps[name]
                after = (*parent_ids, *(ids[n] for n in names))
                first = next(iter(ids.values()), None)
                ids[name] = link_one(
                    self.pool,
                    tx,
                    task,
                    payload,
                    rest,
                    after,
                    sequence,
                    workflow_id=SELF if first is None else first,
                    step=name,
                )
            return ids

        conn = conn if conn is not None else self.conn
        ids = in_transaction(self.pool, conn, write)
        self.pool._enqueued(conn, list(ids.values()))
        return ids

    enqueue = run

    async def run_async(self, conn: Any = None) -> dict[str, int]:
        """:meth:`run` for asyncio: in the caller's ``AsyncConnection`` transaction (``conn=``
        here or to ``pool.workflow``), else in one of the pool's async engine."""
        conn = conn if conn is not None else self.conn
        if conn is not None:
            return await caller_async_connection(conn).run_sync(self.run)
        async with self.pool.async_engine.begin() as own:
            return await own.run_sync(self.run)

    enqueue_async = run_async


__all__ = [
    "LINK_OPTIONS",
    "Workflow",
    "chain",
    "enqueue_linked",
    "enqueue_many_linked",
    "enqueue_one_or_linked",
    "has_links",
    "is_linked",
    "split",
]
