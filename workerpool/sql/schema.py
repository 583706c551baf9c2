"""The tables, as SQLAlchemy Core. The single source for queries and Alembic migrations."""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    DateTime,
    Identity,
    Index,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    SmallInteger,
    Table,
    Text,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB

from ..model.dependencies import EDGE_KINDS, IF_FAILED
from ..model.payload import PAYLOAD_HARD_LIMIT
from ..model.states import DUE_STATES, LIVE_STATES, PRUNED_STATES, DeadReason, JobState
from .json_domains import JsonDomain

STATES = tuple(JobState)
DEAD_REASONS = tuple(DeadReason)

metadata = MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_name)s",
        "ck": "ck_%(table_name)s_%(constraint_name)s",
        "pk": "pk_%(table_name)s",
    }
)

TZ = DateTime(timezone=True)
#: The rows that hold a lease (the partial indexes on leases cover exactly these).
LEASED = f"state = '{JobState.PROCESSING}'"
#: How long a job's ``key`` is held (``key_scope``): NULL forever (the default), ``live`` while
#: the job can still run, ``for`` until ``key_expires_at`` (an enqueue after that moves the old
#: holder to ``expired``). Only rows in the unique index hold their key.
KEY_SCOPES = ("live", "for", "expired")


#: Per-table autovacuum settings of the jobs table (storage parameters, set by migration 0004;
#: ``migrate.drift`` compares them, Alembic does not). A queue table's live rows turn over many
#: times a day while its size is set by the retention: vacuum and analyze it after 2 % of it
#: (plus 1000 rows) changed instead of the server's 20 % and 10 %, and let that vacuum spend ten
#: times the default cost budget, so it ends in seconds instead of lagging the churn.
JOBS_AUTOVACUUM = {
    "autovacuum_vacuum_scale_factor": "0.02",
    "autovacuum_vacuum_threshold": "1000",
    "autovacuum_analyze_scale_factor": "0.02",
    "autovacuum_analyze_threshold": "1000",
    "autovacuum_vacuum_cost_limit": "2000",
}


def _in(column: str, values: Iterable[str]) -> str:
    return f"{column} IN ({', '.join(repr(str(v)) for v in values)})"


jobs = Table(
    "workerpool_jobs",
    metadata,
    Column("id", BigInteger, Identity(always=False), primary_key=True),
    Column("queue", Text, nullable=False),
    Column("task", Text, nullable=False),
    Column(
        "payload",
        JsonDomain("workerpool_payload"),
        nullable=False,
        server_default=text("'{}'::jsonb"),
    ),
    Column("payload_version", Integer, nullable=False, server_default=text("1")),
    Column("state", Text, nullable=False, server_default=text(f"'{JobState.PENDING}'")),
    Column("dead_reason", Text),
    Column("priority", SmallInteger, nullable=False, server_default=text("0")),
    Column("run_at", TZ, nullable=False, server_default=text("now()")),
    Column("attempts", Integer, nullable=False, server_default=text("0")),
    # Process deaths while the job was held, since its last ordinary outcome. Above 0 the job
    # is a suspect: it runs alone on its worker until it succeeds, fails or snoozes.
    Column("crashes", Integer, nullable=False, server_default=text("0")),
    Column("max_attempts", Integer, nullable=False, server_default=text("5")),
    Column("claimed_by", Text),
    Column("claimed_at", TZ),
    Column("key", Text),
    Column("key_scope", Text),
    Column("key_expires_at", TZ),
    # Jobs sharing a concurrency key are counted together against their task's per-key limits.
    Column("concurrency_key", Text),
    # When the current (or last) attempt was claimed: every claim sets it (rate limits count
    # these; lease renewals restamp claimed_at, never this). Waited and ran times read it.
    Column("started_at", TZ),
    Column("checkpoint", JSONB),
    Column(
        "errors",
        JsonDomain("workerpool_errors"),
        nullable=False,
        server_default=text("'[]'::jsonb"),
    ),
    Column("replays", JSONB, nullable=False, server_default=text("'[]'::jsonb")),
    Column("created_at", TZ, nullable=False, server_default=text("now()")),
    Column("finished_at", TZ),
    # An operator asked a running job to stop: who, why and when ({"by", "reason", "at"}). Its
    # owner sees it (notification or lease renewal) and the row ends ``cancelled``.
    Column("cancel_request", JSONB),
    # The enqueuer's W3C trace context ({"traceparent", "tracestate"}), the parent of the
    # worker's run span (workerpool.tracing); NULL when the enqueue was not traced.
    Column("trace_context", JSONB),
    # What the handler returned (JSON, checked like a payload); NULL when it returned None.
    # Written by the completing UPDATE, fenced on the lease.
    Column("result", JsonDomain("workerpool_result")),
    # The batch this job is a member of (or, for a batch's callback, the batch it reports on).
    Column("batch_id", BigInteger),
    # The sequence this job runs in, one at a time in enqueue order (``sequence=``).
    Column("sequence", Text),
    # The chain or workflow this job belongs to: the id of its first job.
    Column("workflow_id", BigInteger),
    # Its step's name in that workflow (``pool.workflow().step(name, ...)``; NULL in a chain).
    Column("workflow_step", Text),
    # Set (once, never cleared) when a job names this one as a parent or sequence head: the
    # final write returns it, and only then looks for dependents to release.
    Column("has_dependents", Boolean, nullable=False, server_default=text("false")),
    # Durable steps (workerpool.model.steps): name -> {kind, value, attempt, started_at,
    # finished_at, ...}, each written fenced on the lease; NULL until the first step.
    Column("steps", JsonDomain("workerpool_steps")),
    # The signal a ``waiting`` job waits for (job.wait_for); NULL otherwise.
    Column("signal", Text),
    # The enqueuer's labels (``tags=["tenant:7", "import"]``) operators filter on; NULL when
    # none were given, so an untagged job is not in the tags index.
    Column("tags", ARRAY(Text)),
    # What the handler last reported with ``job.progress`` (a fraction or a JSON object),
    # written throttled and fenced on the lease; NULL until the first report.
    Column("progress", JSONB),
    CheckConstraint(_in("state", STATES), name="state"),
    CheckConstraint(
        f"(state = '{JobState.DEAD}') = (dead_reason IS NOT NULL) AND "
        f"(dead_reason IS NULL OR {_in('dead_reason', DEAD_REASONS)})",
        name="dead_reason",
    ),
    CheckConstraint("attempts >= 0 AND attempts <= max_attempts", name="attempts"),
    CheckConstraint("max_attempts >= 1", name="max_attempts"),
    CheckConstraint(f"state <> '{JobState.PROCESSING}' OR claimed_by IS NOT NULL", name="lease"),
    CheckConstraint(f"key_scope IS NULL OR {_in('key_scope', KEY_SCOPES)}", name="key_scope"),
    postgresql_with=JOBS_AUTOVACUUM,
)

# Arm 1 of the claim: due work, in claim order.
Index(
    "ix_workerpool_jobs_due",
    jobs.c.queue,
    jobs.c.priority.desc(),
    jobs.c.run_at,
    jobs.c.id,
    postgresql_where=text(_in("state", DUE_STATES)),
)
# The claim's suspect arm (and the status count of suspects): due jobs held by a process that
# died. Few rows, so the due arm filters them out on the heap instead of in its own index.
Index(
    "ix_workerpool_jobs_suspects",
    jobs.c.queue,
    jobs.c.priority.desc(),
    jobs.c.run_at,
    jobs.c.id,
    postgresql_where=text(f"{_in('state', DUE_STATES)} AND crashes > 0"),
)
# Arm 2 of the claim, lease renewal and crash release: live leases.
Index(
    "ix_workerpool_jobs_leased",
    jobs.c.queue,
    jobs.c.claimed_at,
    postgresql_where=text(LEASED),
)
Index(
    "ix_workerpool_jobs_claimed_by",
    jobs.c.claimed_by,
    postgresql_where=text(LEASED),
)
# Jobs held back in ``waiting`` (for their parents or their sequence): the maintenance sweep
# and the status counts read them here; the other rows never enter it.
Index(
    "ix_workerpool_jobs_waiting",
    jobs.c.queue,
    jobs.c.id,
    postgresql_where=text(f"state = '{JobState.WAITING}'"),
)
# A sequence's jobs that may still hold it (live, or dead: a dead job may block its sequence),
# in enqueue order: the enqueue of the next one reads the newest, one index probe however long
# the sequence's history.
SEQUENCE_HELD = f"sequence IS NOT NULL AND {_in('state', (*LIVE_STATES, JobState.DEAD))}"
Index(
    "ix_workerpool_jobs_sequence",
    jobs.c.sequence,
    jobs.c.id,
    postgresql_where=text(SEQUENCE_HELD),
)
# A workflow's jobs (its page and its status).
Index(
    "ix_workerpool_jobs_workflow",
    jobs.c.workflow_id,
    jobs.c.id,
    postgresql_where=text("workflow_id IS NOT NULL"),
)
# The key's holder: one row per key while its scope holds it (see KEY_SCOPES). Two enqueuers of
# one key race on this index, never on a read.
KEY_HELD = (
    f"key IS NOT NULL AND (key_scope IS NULL OR key_scope = 'for' OR "
    f"(key_scope = 'live' AND {_in('state', LIVE_STATES)}))"
)
Index("uq_workerpool_jobs_key", jobs.c.key, unique=True, postgresql_where=text(KEY_HELD))
# Limits: a key's due rows in claim order (the per-key claim takes a key's first ones), its
# running jobs, and the recent starts a rate limit counts.
Index(
    "ix_workerpool_jobs_due_key",
    jobs.c.queue,
    jobs.c.concurrency_key,
    jobs.c.priority.desc(),
    jobs.c.run_at,
    jobs.c.id,
    postgresql_where=text(f"{_in('state', DUE_STATES)} AND concurrency_key IS NOT NULL"),
)
Index(
    "ix_workerpool_jobs_running_key",
    jobs.c.queue,
    jobs.c.concurrency_key,
    postgresql_where=text(f"{LEASED} AND concurrency_key IS NOT NULL"),
)
# A key's starts within a window (key rate limits, the why line). Every claim stamps
# started_at, so every claimed row with a concurrency key has an entry here; (queue, started_at)
# alone has no index: a queue's rate limit counts its claims in workerpool_rate_counts.
Index(
    "ix_workerpool_jobs_started_key",
    jobs.c.queue,
    jobs.c.concurrency_key,
    jobs.c.started_at,
    postgresql_where=text("started_at IS NOT NULL AND concurrency_key IS NOT NULL"),
)
# Maintenance: pruning finished rows and browsing the dead-letter queue.
Index(
    "ix_workerpool_jobs_finished",
    jobs.c.finished_at,
    postgresql_where=text(_in("state", (*PRUNED_STATES, JobState.DEAD))),
)

# The dead-letter queue (``workerpool dead list``, status's dead counts): the finished index
# above holds every done row too, so the dead rows get their own, newest first, carrying what
# the listing filters and counts on (index-only counts of the dead alone).
Index(
    "ix_workerpool_jobs_dead",
    jobs.c.finished_at,
    jobs.c.id,
    postgresql_where=text(f"state = '{JobState.DEAD}'"),
    postgresql_include=["queue", "task", "dead_reason"],
)
# Batches: a batch's members by state (the outcome path's "is any member still live?" is three
# probes; status counts and result pages read only the batch's own entries). Rows without a
# batch are not in it, so they pay nothing for it.
Index(
    "ix_workerpool_jobs_batch",
    jobs.c.batch_id,
    jobs.c.state,
    jobs.c.id,
    postgresql_where=text("batch_id IS NOT NULL"),
)

# One edge per (dependent, parent): why it exists (``kind``: after, sequence) and what a parent
# that ends dead or cancelled does to the dependent (``if_failed``: cancel, run, hold; see
# model/dependencies.py). A parent's final write finds its dependents by the parent index.
dependencies = Table(
    "workerpool_job_dependencies",
    metadata,
    Column("job_id", BigInteger, nullable=False),
    Column("parent_id", BigInteger, nullable=False),
    Column("kind", Text, nullable=False, server_default=text("'after'")),
    Column("if_failed", Text, nullable=False, server_default=text("'cancel'")),
    PrimaryKeyConstraint("job_id", "parent_id"),
    CheckConstraint(_in("kind", EDGE_KINDS), name="kind"),
    CheckConstraint(_in("if_failed", IF_FAILED), name="if_failed"),
)
Index("ix_workerpool_job_dependencies_parent_id", dependencies.c.parent_id)
# Jobs waiting for a signal, by its name: pool.signal wakes them, the maintenance sweep finds
# those whose signal exists or whose deadline passed. Other rows are not in it.
Index(
    "ix_workerpool_jobs_signal",
    jobs.c.signal,
    postgresql_where=text(f"state = '{JobState.WAITING}' AND signal IS NOT NULL"),
)

# Tag filters (``tags @> ARRAY[...]``: status, cancel, dead, the dashboard). Partial: the planner
# proves ``tags IS NOT NULL`` from the strict ``@>``, and untagged jobs cost the index nothing.
Index(
    "ix_workerpool_jobs_tags",
    jobs.c.tags,
    postgresql_using="gin",
    postgresql_where=text("tags IS NOT NULL"),
)

#: Multivariate statistics on (queue, state) (migration 0008; Alembic does not compare them):
#: ``workerpool status`` shows the history's counts as the planner's estimates.
QUEUE_STATE_STATISTICS = "workerpool_jobs_queue_state"

# Live worker processes, one row per child process boot (maintained by the children).
workers = Table(
    "workerpool_workers",
    metadata,
    Column("id", Text, primary_key=True),  # the process's claimed_by: host:pid:random
    Column("host", Text, nullable=False),
    Column("pid", Integer, nullable=False),
    Column("queue", Text, nullable=False),
    Column("tasks", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    Column("started_at", TZ, nullable=False, server_default=text("now()")),
    Column("last_seen", TZ, nullable=False, server_default=text("now()")),
    # Jobs it may hold at once (concurrency + prefetch): a limited claim that the whole fleet's
    # capacity cannot push over its limit needs no exclusive lock (NULL: unknown, lock).
    Column("capacity", Integer),
)

# Queue-wide rate limits: the claims of each slice (a tenth) of the window, a ring of
# RATE_SLICES + 1 rows per (queue, window), each slot taken over once its slice has left every
# window a claim counts. Claims only add to it, so nothing can leave it too high or too low.
RATE_SLICES = 10
rate_counts = Table(
    "workerpool_rate_counts",
    metadata,
    Column("queue", Text, primary_key=True),
    Column("window_s", Integer, primary_key=True),
    Column("slot", SmallInteger, primary_key=True),
    Column("slice", BigInteger, nullable=False),  # seconds since the epoch / (window / slices)
    Column("claims", Integer, nullable=False),
)

# Cron schedules: one row per cron job, the lock that makes a tick fire once across replicas.
cron = Table(
    "workerpool_cron",
    metadata,
    Column("name", Text, primary_key=True),
    Column("queue", Text, nullable=False),
    Column("expression", Text, nullable=False),
    Column("timezone", Text, nullable=False, server_default=text("'UTC'")),
    Column("last_tick", TZ),
    # next_tick: the first tick after last_tick (or after the schedule was first seen)
    Column("next_tick", TZ),
    Column("last_job_id", BigInteger),
    Column("skipped", BigInteger, nullable=False, server_default=text("0")),
    Column("updated_at", TZ, nullable=False, server_default=text("now()")),
    # Run-time state beside the code's defaults (expression, queue): a paused schedule's ticks
    # pass without a job, on every replica, and a restart leaves the flag as it is.
    Column("paused", Boolean, nullable=False, server_default=text("false")),
    Column("paused_at", TZ),
    Column("paused_by", Text),
    Column("changed_at", TZ),
    Column("changed_by", Text),
    # A schedule added at run time (pool.cron_add) names the task its ticks enqueue and their
    # payload; a declared one leaves them NULL (its task has the cron's name).
    Column("task", Text),
    Column("payload", JSONB),
    Column("added_at", TZ),
    Column("added_by", Text),
)

# Queue state shared by every replica: a paused queue claims nothing (workers read their row
# once per poll interval; a notification makes it immediate). A queue without a row runs.
queues = Table(
    "workerpool_queues",
    metadata,
    Column("queue", Text, primary_key=True),
    Column("paused", Boolean, nullable=False, server_default=text("false")),
    Column("paused_at", TZ),
    Column("paused_by", Text),
    # The queue's limits as its workers declared them (for ``workerpool status``); the claim
    # of a limited queue locks this row, so that its counts are taken one claim at a time.
    Column("limits", JSONB),
)

#: What a finished batch came to: every member done, or at least one dead or cancelled.
BATCH_OUTCOMES = ("success", "failure")
#: Who fired a batch's callbacks: the transaction of its last member's outcome, its own opening
#: transaction (an empty batch), or the maintenance sweep (a safety net that should never fire).
BATCH_FIRED_BY = ("outcome", "empty", "sweep")

# Batches (fan-out and fan-in): members carry ``batch_id``; the callbacks are enqueued exactly
# once, in the transaction of the last member's final outcome (workerpool.sql.batches).
batches = Table(
    "workerpool_batches",
    metadata,
    Column("id", BigInteger, Identity(always=False), primary_key=True),
    # A coordinator's idempotency key: opening a batch under a key that exists reopens it.
    Column("key", Text),
    Column("on_complete", Text),
    Column("on_success", Text),
    Column("on_failure", Text),
    # The callback jobs to insert, resolved from the opener's registry:
    # [{"on": "complete"|"success"|"failure", "queue", "task", "payload_version", "priority",
    #   "max_attempts"}]
    Column("callbacks", JSONB, nullable=False, server_default=text("'[]'::jsonb")),
    Column("payload", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    Column("created_at", TZ, nullable=False, server_default=text("now()")),
    Column("finished_at", TZ),
    Column("outcome", Text),
    Column("fired_by", Text),
    Column("callback_ids", ARRAY(BigInteger)),
    CheckConstraint("jsonb_typeof(payload) = 'object'", name="payload_object"),
    CheckConstraint("jsonb_typeof(callbacks) = 'array'", name="callbacks_array"),
    CheckConstraint(
        f"(finished_at IS NULL) = (outcome IS NULL) AND "
        f"(outcome IS NULL OR {_in('outcome', BATCH_OUTCOMES)}) AND "
        f"(fired_by IS NULL OR {_in('fired_by', BATCH_FIRED_BY)})",
        name="finished",
    ),
)
Index(
    "uq_workerpool_batches_key",
    batches.c.key,
    unique=True,
    postgresql_where=text("key IS NOT NULL"),
)
# The open batches: the maintenance sweep's and ``workerpool status``'s.
Index("ix_workerpool_batches_open", batches.c.id, postgresql_where=text("finished_at IS NULL"))
# Pruning finished batches after the retention.
Index(
    "ix_workerpool_batches_finished",
    batches.c.finished_at,
    postgresql_where=text("finished_at IS NOT NULL"),
)

# Callers waiting in ``pool.result`` for a job to settle: the outcome write that settles a job
# listed here sends one NOTIFY on RESULTS_CHANNEL (and deletes the rows); a job nobody waits for
# costs the outcome path nothing. A waiter that gives up deletes its own row.
waiters = Table(
    "workerpool_waiters",
    metadata,
    Column("id", BigInteger, Identity(always=False), primary_key=True),
    Column("job_id", BigInteger, nullable=False),
    Column("since", TZ, nullable=False, server_default=text("now()")),
)
Index("ix_workerpool_waiters_job_id", waiters.c.job_id)

# Signals (pool.signal, job.wait_for): one row per name, the first one sent; kept so that a
# job that starts waiting after the signal was sent still gets it.
signals = Table(
    "workerpool_signals",
    metadata,
    Column("name", Text, primary_key=True),
    Column("payload", JSONB),
    Column("sent_at", TZ, nullable=False, server_default=text("now()")),
    CheckConstraint(f"octet_length(payload::text) <= {PAYLOAD_HARD_LIMIT}", name="payload_size"),
)

#: Where an operator's action came from.
AUDIT_SOURCES = ("cli", "web", "api")

# Who did what: one row per operator action (cancel, replay, purge, pause, cron changes),
# written in the transaction of the action itself; pruned after ``audit_retention``.
audit = Table(
    "workerpool_audit",
    metadata,
    Column("id", BigInteger, Identity(always=False), primary_key=True),
    Column("at", TZ, nullable=False, server_default=text("now()")),
    Column("actor", Text, nullable=False),
    Column("source", Text, nullable=False),
    Column("action", Text, nullable=False),
    Column("target", Text, nullable=False),
    Column("detail", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    CheckConstraint(_in("source", AUDIT_SOURCES), name="source"),
    CheckConstraint("jsonb_typeof(detail) = 'object'", name="detail_object"),
)
# Pruning by age; the page reads newest first by id.
Index("ix_workerpool_audit_at", audit.c.at)
# The log records a handler wrote during one attempt (captured when its queue sets
# ``capture_logs``), written in the transaction of that attempt's outcome; a queue that does not
# capture writes nothing here. No foreign key: a finished job moves to the history table and
# keeps its logs; the maintenance child deletes them after the retention (a dead job's stay while
# it does), and a purge deletes the purged jobs' logs with them.
job_logs = Table(
    "workerpool_job_logs",
    metadata,
    Column("id", BigInteger, Identity(always=False), primary_key=True),
    Column("job_id", BigInteger, nullable=False),
    # The attempt the records are of (a replayed job counts its attempts again: its earlier
    # runs' logs stay, older ids first).
    Column("attempt", Integer, nullable=False),
    # [{"at", "level", "logger", "message"}], oldest first, bounded per attempt.
    Column("records", JSONB, nullable=False),
    # Records the bound left out (0: nothing was).
    Column("dropped", Integer, nullable=False, server_default=text("0")),
    Column("written_at", TZ, nullable=False, server_default=text("now()")),
    CheckConstraint("jsonb_typeof(records) = 'array'", name="records_array"),
)
# A job's logs (its page, ``status --job``; a purge's delete).
Index("ix_workerpool_job_logs_job_id", job_logs.c.job_id, job_logs.c.id)
# The pruning by age.
Index("ix_workerpool_job_logs_written", job_logs.c.written_at)
# Finished jobs moved out of the jobs table by the maintenance child (workerpool.sql.history):
# the same columns, partitioned by day of ``finished_at`` (range partitions created ahead and
# dropped whole at the end of the retention). No primary key: a partitioned table's unique
# index must hold the partition key, and every id is unique already (it came from the jobs
# table, and a moved row leaves it in the same statement). Each partition has its own indexes
# and its own statistics, which autovacuum keeps; no query depends on the parent's.
history = Table(
    "workerpool_jobs_history",
    metadata,
    *(
        Column(
            c.name,
            JSONB if isinstance(c.type, JsonDomain) else c.type,  # written once: no rule again
            nullable=c.nullable and c.name != "finished_at",
        )
        for c in jobs.columns
    ),
    postgresql_partition_by="RANGE (finished_at)",
)
# A job by id (its result, its page): one probe per partition.
Index("ix_workerpool_jobs_history_id", history.c.id)
# A batch's moved members (counts and result pages), as ix_workerpool_jobs_batch.
Index(
    "ix_workerpool_jobs_history_batch",
    history.c.batch_id,
    history.c.state,
    history.c.id,
    postgresql_where=text("batch_id IS NOT NULL"),
)
# A workflow's moved jobs (its page).
Index(
    "ix_workerpool_jobs_history_workflow",
    history.c.workflow_id,
    history.c.id,
    postgresql_where=text("workflow_id IS NOT NULL"),
)
# What the history holds, counted by the minute its jobs finished: the mover adds each batch's
# counts in the statement that moves it (workerpool.sql.history), so the dashboard's chart of
# finished jobs reads at most one row per (minute, queue, state) for moved jobs, however many
# finished, and never the history itself. Pruned after the retention, as the history is.
finished_minutes = Table(
    "workerpool_finished_minutes",
    metadata,
    Column("minute", TZ, primary_key=True),
    Column("queue", Text, primary_key=True),
    Column("state", Text, primary_key=True),
    Column("count", BigInteger, nullable=False),
)

# The doors in (SQL's ``workerpool_enqueue`` and ``POST /api/jobs``) enqueue without the
# application's code: each task as its workers last registered it, with the defaults an enqueue
# takes from the task and the arguments a typed task accepts (``params``: {"required": [...],
# "accepted": [...] or null for any}; NULL for a task that takes its payload as a dict).
tasks = Table(
    "workerpool_tasks",
    metadata,
    Column("task", Text, primary_key=True),
    Column("queue", Text, nullable=False),
    Column("max_attempts", Integer, nullable=False),
    Column("priority", SmallInteger, nullable=False),
    Column("payload_version", Integer, nullable=False),
    Column("payload_limit", Integer, nullable=False),
    Column("params", JSONB),
    Column("registered_at", TZ, nullable=False, server_default=text("now()")),
)

# Bounded queues: an enqueue at a door (Python, SQL, HTTP, CLI) that would take the queue past
# ``max_pending`` jobs waiting to run is refused (QueueFull). A queue without a row is unbounded
# and pays nothing for it.
queue_bounds = Table(
    "workerpool_queue_bounds",
    metadata,
    Column("queue", Text, primary_key=True),
    Column("max_pending", Integer, nullable=False),
    Column("set_at", TZ, nullable=False, server_default=text("now()")),
    Column("set_by", Text),
    CheckConstraint("max_pending > 0", name="max_pending"),
)

# What a bounded queue's enqueues may still add without counting its waiting jobs again: the
# room the last count found less what was enqueued since (``workerpool_queue_room``, migration
# 0023). Jobs that leave the queue give nothing back; the next count does.
queue_credits = Table(
    "workerpool_queue_credits",
    metadata,
    Column("queue", Text, primary_key=True),
    Column("max_pending", Integer, nullable=False),
    Column("credit", Integer, nullable=False),
    Column("counted_at", TZ, nullable=False, server_default=text("now()")),
)
