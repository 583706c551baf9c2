"""Every statement that touches workerpool_jobs. Each state change is one named function.

All times come from the database clock (``now()``); the caller's clock is never stored. Every
write that finishes or changes a claimed job is fenced on its lease (``claimed_by`` and
``attempts``) and reports whether it applied, so a process that lost its lease can never overwrite
the new owner's result.

One module per phase of a job's life, each ordered the same way:

- ``enqueue``: the INSERT of one job or of a batch's chunks, and the wake-up NOTIFY;
  ``bulk``: a batch without keys by COPY;
- ``claim``: LISTEN, the claim, lease renewal, checkpoints (``limits_claim``: with limits);
- ``keys``: a key already held (its holder, an expired period);
- ``outcomes``: complete, fail, mark_permanent, snooze, give_back, return_unstarted,
  return_unheld;
- ``recovery``: the rows of a lost worker (reclaim_from_dead_worker, sweep_abandoned);
- ``maintenance``: the workers registry, cron schedules, pruning (``limits_rates``: a rate
  limit's ring of counts, and its pruning);
- ``operations``: the dead-letter queue, status, read-outs;
- ``control``: cancelling jobs, pausing and resuming queues;
- ``dashboard``: what the web dashboard reads (job pages by keyset, bounded counts, estimates);
- ``results``: the completing write with results, the waiters of ``pool.result``, reading a
  job; ``batches``: opening, settling (lock, then finish), the sweep, reading a batch;
  ``settled``: what follows a final outcome on every path (dependents released, waiters woken,
  batches settled); ``dependencies``: the edges of jobs that wait for others, their release,
  the sweep, a workflow's reads; ``steps``: a durable step written fenced on the lease, a
  sleep; ``signals``: signals kept, their waiters woken, the wait outcome and its sweep;
  ``history``: finished rows moved to the history table, its partitions, reads across both.
  These are imported by module (``from workerpool.sql import batches``);

and what they share: ``leases`` (the lease and its fences), ``clock`` (intervals, the database
clock, a transaction's time limits), ``planner`` (the planner settings every hot statement is
planned under). Every name is importable from ``workerpool.sql``.
"""

from __future__ import annotations

from ..model.states import LIVE_STATES
from .claim import (
    CLAIM_COLUMNS,
    LISTEN,
    claim,
    claim_statement,
    renew,
    renew_reading_cancels,
    save_checkpoint,
)
from .clock import bound_transaction, database_now, seconds, time_limits
from .control import (
    CONTROL,
    cancel,
    finish_cancelled,
    is_paused,
    job_states,
    known_queues,
    list_queue_states,
    notify_cancel,
    notify_owners,
    queue_names,
    requested_cancels,
    select_ids,
    set_paused,
)
from .dashboard_reads import (
    JobFilter,
    browse_jobs,
    common_queues,
    count_capped,
    finished_per_minute,
    job_detail,
    last_analyzed,
    lease_holder,
    limit_time,
)
from .dead_letters import (
    DEAD_COLUMNS,
    count_dead,
    dead_ids,
    dead_tasks,
    dead_where,
    list_dead,
    purge_dead,
    replay_dead,
)
from .enqueue import (
    NOTIFY_CHANNEL,
    NewJob,
    insert_job_chunks,
    insert_jobs,
    insert_one,
    notify,
)
from .enqueue_copy import can_copy, copy_jobs
from .leases import Lease
from .limits_claim import limited_claim_statement, lock_queue, publish_limits
from .limits_rates import prune as prune_rate_counts
from .maintenance import (
    advance_cron,
    beat_worker,
    ensure_crons,
    lock_crons,
    prune_finished,
    prune_finished_statement,
    prune_workers,
    register_worker,
    reset_cron,
    unregister_worker,
)
from .outcomes import (
    RELEASE_HOLD,
    complete,
    fail,
    give_back,
    mark_permanent,
    return_unheld,
    return_unstarted,
    snooze,
)
from .planner import PLANNER_SETTINGS
from .readouts import (
    count_by_queue_and_state,
    count_errors_by_type,
    job_outcomes,
    list_crons,
    list_workers,
    oldest_due_ages,
    queue_depths,
    state_counts,
    suspect_counts,
    unrunnable,
)
from .recovery import reclaim_from_dead_worker, recover_stale, sweep_abandoned
from .testing_reads import (
    MATCHABLE,
    due_dependents,
    find_jobs,
    job_queues,
    make_due,
)
from .unique_keys import holder, holders, release_expired

__all__ = [
    "CLAIM_COLUMNS",
    "CONTROL",
    "DEAD_COLUMNS",
    "LISTEN",
    "LIVE_STATES",
    "MATCHABLE",
    "NOTIFY_CHANNEL",
    "PLANNER_SETTINGS",
    "RELEASE_HOLD",
    "JobFilter",
    "Lease",
    "NewJob",
    "advance_cron",
    "beat_worker",
    "bound_transaction",
    "browse_jobs",
    "can_copy",
    "cancel",
    "claim",
    "claim_statement",
    "common_queues",
    "complete",
    "copy_jobs",
    "count_by_queue_and_state",
    "count_capped",
    "count_dead",
    "count_errors_by_type",
    "database_now",
    "dead_ids",
    "dead_tasks",
    "dead_where",
    "due_dependents",
    "ensure_crons",
    "fail",
    "find_jobs",
    "finish_cancelled",
    "finished_per_minute",
    "give_back",
    "holder",
    "holders",
    "insert_job_chunks",
    "insert_jobs",
    "insert_one",
    "is_paused",
    "job_detail",
    "job_outcomes",
    "job_queues",
    "job_states",
    "known_queues",
    "last_analyzed",
    "lease_holder",
    "limit_time",
    "limited_claim_statement",
    "list_crons",
    "list_dead",
    "list_queue_states",
    "list_workers",
    "lock_crons",
    "lock_queue",
    "make_due",
    "mark_permanent",
    "notify",
    "notify_cancel",
    "notify_owners",
    "oldest_due_ages",
    "prune_finished",
    "prune_finished_statement",
    "prune_rate_counts",
    "prune_workers",
    "publish_limits",
    "purge_dead",
    "queue_depths",
    "queue_names",
    "reclaim_from_dead_worker",
    "recover_stale",
    "register_worker",
    "release_expired",
    "renew",
    "renew_reading_cancels",
    "replay_dead",
    "requested_cancels",
    "reset_cron",
    "return_unheld",
    "return_unstarted",
    "save_checkpoint",
    "seconds",
    "select_ids",
    "set_paused",
    "snooze",
    "state_counts",
    "suspect_counts",
    "sweep_abandoned",
    "time_limits",
    "unregister_worker",
    "unrunnable",
]
