"""A sequence's line: the job at its end, which a job enqueued with ``sequence=`` waits behind,
and a replayed job of the sequence put back into it.

Enqueuers of one sequence serialize on an advisory lock (``hashtext(sequence)``) until their
transaction ends, so each sees the other's job. Index: ``ix_workerpool_jobs_sequence`` (and
the parent index of the edges, for a job waiting behind another).
"""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import Connection, text

from ..model.dependencies import HOLD, SEQUENCE
from ..model.states import LIVE_STATES, JobState
from .dependencies import EDGES, JOBS, lock_parents
from .schema import SEQUENCE_HELD

# sequence_tail: the end of a sequence's line, with enqueuers of that sequence serialized on an
# advisory lock until the transaction ends. Index: ix_workerpool_jobs_sequence (and the parent
# index of the edges, for a job waiting behind it).
_SEQUENCE_LOCK = text("SELECT pg_advisory_xact_lock(hashtext(:sequence))")
# a job of the sequence still waits behind it (one that runs already waits for nothing)
_FOLLOWED = f"""EXISTS (
  SELECT 1 FROM {EDGES} AS e JOIN {JOBS} AS d ON d.id = e.job_id
  WHERE e.parent_id = j.id AND e.kind = '{SEQUENCE}' AND d.state = '{JobState.WAITING}')"""
_SEQUENCE_TAIL = text(f"""
SELECT j.id, {_FOLLOWED} AS followed FROM {JOBS} AS j
WHERE j.sequence = :sequence AND {SEQUENCE_HELD} AND j.id <> :exclude
ORDER BY j.id DESC LIMIT 1
""")
# The line's end when a replayed job waits there (an older id behind the newest one): the
# newest live job nothing of the sequence waits for.
_LINE_END = text(f"""
SELECT j.id FROM {JOBS} AS j
WHERE j.sequence = :sequence AND {SEQUENCE_HELD} AND j.id <> :exclude
  AND j.state IN ({", ".join(f"'{s}'" for s in LIVE_STATES)}) AND NOT {_FOLLOWED}
ORDER BY j.id DESC LIMIT 1
""")


def sequence_tail(conn: Connection, sequence: str, *, exclude: int = 0) -> int | None:
    """The id of the job at the end of the sequence's line, live or dead (None: none), read
    after taking the sequence's lock: two enqueuers of one sequence serialize, so each sees
    the other's job. Jobs of a sequence end in order, so the newest job is the line's end,
    unless a replayed job waits behind it (:func:`wait_in_line`): then that one is.
    ``exclude``: a job not to count (the replayed one itself)."""
    conn.execute(_SEQUENCE_LOCK, {"sequence": sequence})
    params = {"sequence": sequence, "exclude": exclude}
    newest = conn.execute(_SEQUENCE_TAIL, params).first()
    if newest is None or not newest.followed:
        return None if newest is None else newest.id
    return conn.execute(_LINE_END, params).scalar()


# A job that blocks its line: dead with jobs of its sequence held behind it (on_failure="block").
_BLOCKS_LINE = text(f"""
SELECT EXISTS (
  SELECT 1 FROM {EDGES} AS e JOIN {JOBS} AS d ON d.id = e.job_id
  WHERE e.parent_id = :id AND e.kind = '{SEQUENCE}' AND e.if_failed = '{HOLD}'
    AND d.state = '{JobState.WAITING}')
""")
_WAIT_BEHIND = text(f"""
WITH edge AS (
  INSERT INTO {EDGES} (job_id, parent_id, kind, if_failed)
  VALUES (:id, :tail, '{SEQUENCE}', :policy) ON CONFLICT DO NOTHING)
UPDATE {JOBS} SET state = '{JobState.WAITING}' WHERE id = :id AND state = '{JobState.PENDING}'
""")


def wait_in_line(
    conn: Connection, job_id: int, sequence: str, policy: Callable[[str], str]
) -> int | None:
    """A replayed job of a sequence (``pending`` again in this transaction) goes back into its
    line instead of running beside the job the line runs now: it waits behind the line's end,
    like a job enqueued now. A job whose death blocked the line (``on_failure="block"``) goes
    first: the jobs behind it still wait for it. ``policy``: the ``if_failed`` of an edge to a
    job of the given task. Returns the job it waits for, or None (it runs now)."""
    tail = sequence_tail(conn, sequence, exclude=job_id)
    if tail is None or conn.execute(_BLOCKS_LINE, {"id": job_id}).scalar():
        return None
    head = lock_parents(conn, [tail]).get(tail)
    if head is None:
        return None
    if_failed = policy(head.task)
    if head.state not in LIVE_STATES and not (head.state == JobState.DEAD and if_failed == HOLD):
        return None
    conn.execute(_WAIT_BEHIND, {"id": job_id, "tail": tail, "policy": if_failed})
    return tail


__all__ = ["sequence_tail", "wait_in_line"]
