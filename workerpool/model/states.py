"""Every named state: a job's, a dead job's reason, an attempt's outcome, a child process's.

Standard library only (the healthcheck imports nothing heavier). ``StrEnum`` members compare
equal to their strings, so rows read from the database (plain text) compare with them directly.
"""

from __future__ import annotations

import enum


class JobState(enum.StrEnum):
    PENDING = "pending"  # waiting for run_at, or due
    PROCESSING = "processing"  # claimed: a lease (claimed_by, attempts) is held
    FAILED = "failed"  # an attempt raised; waiting to retry at run_at
    DONE = "done"
    DEAD = "dead"  # gave up: see DeadReason
    CANCELLED = "cancelled"
    # Held back until its parents are done or its sequence reaches it: never claimed, never
    # due, no attempt spent. The parent's final write (or the sequence head's) releases it.
    WAITING = "waiting"


#: States a job can still leave; the others are terminal.
LIVE_STATES = (JobState.PENDING, JobState.PROCESSING, JobState.FAILED, JobState.WAITING)
#: States a job ends in: its result (or its failure) is final, and its batch may finish.
FINAL_STATES = (JobState.DONE, JobState.DEAD, JobState.CANCELLED)
#: States the due arm of the claim takes.
DUE_STATES = (JobState.PENDING, JobState.FAILED)
#: Terminal states whose rows the pruning deletes after the retention window.
PRUNED_STATES = (JobState.DONE, JobState.CANCELLED)
#: A registered worker seen within this many seconds is live (workers beat well inside it); one
#: not seen for longer no longer vouches for the tasks it registered.
LIVE_WORKER_WINDOW = 60.0


class DeadReason(enum.StrEnum):
    EXHAUSTED = "exhausted"  # the last attempt raised
    PERMANENT = "permanent"  # the handler raised Permanent
    ABANDONED = "abandoned"  # the worker was lost on the last attempt


class OutcomeKind(enum.StrEnum):
    """What one attempt came to, as the worker writes it."""

    DONE = "done"
    FAIL = "fail"  # retry after backoff, or dead/exhausted on the last attempt
    PERMANENT = "permanent"
    SNOOZE = "snooze"  # RetryLater: pending again, attempt refunded
    INTERRUPTED = "interrupted"  # drained: pending again, attempt refunded, checkpoint kept
    UNSTARTED = "unstarted"  # prefetched and given back before any handler started it
    CANCELLED = "cancelled"  # an operator asked it to stop: cancelled, whatever the handler did
    WAIT = "wait"  # job.wait_for: waiting for a signal, attempt refunded
    #: job.complete_in: ``done`` was written by the handler's own transaction, which committed;
    #: the worker writes nothing more for the attempt
    COMMITTED = "committed"


class ChildState(enum.Enum):
    """A supervisor slot's process (supervisord's state machine)."""

    BACKOFF = "backoff"  # waiting to (re)start
    STARTING = "starting"  # forked, no tick yet
    RUNNING = "running"  # has ticked at least once
    STOPPING = "stopping"  # asked to stop
    EXITED = "exited"  # gone, not to be restarted
    FATAL = "fatal"  # failed at boot too often


class SupervisorMood(enum.Enum):
    RUNNING = "running"
    DRAINING = "draining"  # SIGTERM sent to the children; waiting up to drain + margin
    STOPPING_NOW = "stopping_now"  # SIGQUIT sent; waiting only the margin
