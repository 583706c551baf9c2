"""What follows a job's final outcome (done, dead, cancelled), in the same transaction.

Every write that can end a job calls :func:`after_final` once, after its job writes and before
its commit: the worker's outcome flush (``runtime.worker.outcomes.record_many``), the crash
release (``runtime.release.release_orphans``), the stale recovery and the abandoned sweep
(``sql.recovery``), an operator's cancel (``sql.control.cancel``), and the inline runner of
``workerpool.testing`` (``runtime.inline``, through ``record_many``). Three things may follow,
each only when it applies:

- the jobs waiting for them (``after=``, ``sequence=``) are released: made due when every
  parent is done, cancelled when a parent failed (:func:`.dependencies.release`); a dependent
  cancelled so is itself a final outcome, so the same three follow for it, transitively,
- callers waiting in ``pool.result`` for one of the jobs are woken (one NOTIFY per
  transaction, :func:`.results.notify_waiters`), and
- the batches of the jobs are finished if these were their last live members
  (:func:`.batches.settle`).

It returns what the writer reports once it has committed (:class:`Followed`): the batches
finished, and the dependents cancelled, which are cancels like any other (``on_cancel`` hooks,
the finished-jobs metric) and are recorded in the audit trail under the parent that failed.

A transaction whose rows have no batch, no waiter and no dependent sends nothing more: the
common outcome flush costs no extra statement (the completing UPDATE says all three of each
row).

Once per transaction, at the end: the dependents are released first (they are job rows), and
the batch rows are locked after every job row the transaction writes, so two transactions
never wait for each other in a cycle through a batch.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

from sqlalchemy import Connection

from ..model.notices import CancelNotice
from ..model.states import FINAL_STATES
from .batches import Fired, settle
from .dependencies import cancel_notice, release, with_dependents
from .results import Settled, notify_waiters, settled_rows


class Followed(NamedTuple):
    """What followed final outcomes in a transaction, for the writer to report once it has
    committed: the batches finished (their callback jobs inserted) and the dependents
    cancelled because a parent failed (a cancel like any other: ``on_cancel`` hooks, the
    finished-jobs metric)."""

    fired: list[Fired]
    cancelled: list[CancelNotice]


NOTHING = Followed([], [])


def after_final(conn: Connection, settled: Sequence[Settled]) -> Followed:
    """Release the dependents of ``settled`` rows, wake their waiters and finish their
    batches."""
    cancelled = release_dependents(conn, settled)
    settled = [*settled, *(Settled(row.id, row.batch_id, None, None) for row in cancelled)]
    wake = [row.id for row in settled if row.awaited is not False]
    if wake:
        notify_waiters(conn, wake)
    fired = settle(conn, (row.batch_id for row in settled if row.batch_id is not None))
    return Followed(fired, [cancel_notice(row) for row in cancelled])


def release_dependents(conn: Connection, settled: Sequence[Settled]) -> list[Any]:
    """Release the waiting dependents of ``settled`` rows, transitively; returns the
    dependents it cancelled (final outcomes too: their waiters and batches follow)."""
    parents = [row.id for row in settled if row.dependents]
    parents += with_dependents(conn, [row.id for row in settled if row.dependents is None])
    out: list[Any] = []
    while parents:
        cancelled = release(conn, parents).cancelled
        out += cancelled
        parents = with_dependents(conn, [row.id for row in cancelled])
    return out


def after_rows(conn: Connection, rows: Iterable[Any]) -> Followed:
    """:func:`after_final` for rows returned by a write (with ``id``, ``state`` and
    ``batch_id``): the ones it left in a final state."""
    final = [Settled(row.id, row.batch_id, None) for row in rows if row.state in FINAL_STATES]
    return after_final(conn, final) if final else NOTHING


def after_states(
    conn: Connection, done: Sequence[Settled], states: dict[int, str | None]
) -> Followed:
    """:func:`after_final` for an outcome flush: ``done`` came back from the completing write
    (with its batch and waiters), and the other rows ``states`` left dead or cancelled are
    looked up (one statement, only when there are such rows)."""
    done_ids = {row.id for row in done}
    others = [
        job_id
        for job_id, state in states.items()
        if state in FINAL_STATES and job_id not in done_ids
    ]
    settled = [row for row in done if row.batch_id is not None or row.awaited or row.dependents]
    settled += settled_rows(conn, others)
    return after_final(conn, settled) if settled else NOTHING


__all__ = ["NOTHING", "Followed", "after_final", "after_rows", "after_states", "release_dependents"]
