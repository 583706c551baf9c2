"""history: finished jobs leave the jobs table for a table partitioned by day

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-13 12:00:00.000000

Creates ``workerpool_jobs_history`` (range-partitioned on ``finished_at``, no partition yet)
and its partitioned indexes. Nothing here reads or locks ``workerpool_jobs``: the upgrade holds
ACCESS EXCLUSIVE on the new, empty table only, for milliseconds, however many rows the jobs
table holds. The maintenance child then creates the partitions and moves the finished rows over
in batches (workerpool.sql.history), online: one short transaction per batch.

The downgrade moves every history row back into the jobs table (their ids and keys are theirs:
nothing conflicts; it takes time in proportion to the history) and drops the table.
"""
from collections.abc import Sequence

from alembic import op

revision: str = '0013'
down_revision: str | Sequence[str] | None = '0012'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

COLUMNS = (
    'id, queue, task, payload, payload_version, state, dead_reason, priority, '
    'run_at, attempts, crashes, max_attempts, claimed_by, claimed_at, key, '
    'key_scope, key_expires_at, concurrency_key, started_at, checkpoint, errors, '
    'replays, created_at, finished_at, cancel_request, trace_context, result, '
    'batch_id, sequence, workflow_id, has_dependents, steps, signal'
)

CREATE = """
CREATE TABLE workerpool_jobs_history (
    id BIGINT NOT NULL,
    queue TEXT NOT NULL,
    task TEXT NOT NULL,
    payload JSONB NOT NULL,
    payload_version INTEGER NOT NULL,
    state TEXT NOT NULL,
    dead_reason TEXT,
    priority SMALLINT NOT NULL,
    run_at TIMESTAMP WITH TIME ZONE NOT NULL,
    attempts INTEGER NOT NULL,
    crashes INTEGER NOT NULL,
    max_attempts INTEGER NOT NULL,
    claimed_by TEXT,
    claimed_at TIMESTAMP WITH TIME ZONE,
    key TEXT,
    key_scope TEXT,
    key_expires_at TIMESTAMP WITH TIME ZONE,
    concurrency_key TEXT,
    started_at TIMESTAMP WITH TIME ZONE,
    checkpoint JSONB,
    errors JSONB NOT NULL,
    replays JSONB NOT NULL,
    created_at TIMESTAMP WITH TIME ZONE NOT NULL,
    finished_at TIMESTAMP WITH TIME ZONE NOT NULL,
    cancel_request JSONB,
    trace_context JSONB,
    result JSONB,
    batch_id BIGINT,
    sequence TEXT,
    workflow_id BIGINT,
    has_dependents BOOLEAN NOT NULL,
    steps JSONB,
    signal TEXT
)
 PARTITION BY RANGE (finished_at)
"""

INDEXES = (
    'CREATE INDEX ix_workerpool_jobs_history_batch ON workerpool_jobs_history'
    ' (batch_id, state, id) WHERE batch_id IS NOT NULL',
    'CREATE INDEX ix_workerpool_jobs_history_finished ON workerpool_jobs_history (finished_at)',
    'CREATE INDEX ix_workerpool_jobs_history_id ON workerpool_jobs_history (id)',
    'CREATE INDEX ix_workerpool_jobs_history_workflow ON workerpool_jobs_history'
    ' (workflow_id, id) WHERE workflow_id IS NOT NULL',
)


def upgrade() -> None:
    op.execute(CREATE)
    for statement in INDEXES:
        op.execute(statement)


def downgrade() -> None:
    op.execute(f"INSERT INTO workerpool_jobs ({COLUMNS})"
               f" SELECT {COLUMNS} FROM workerpool_jobs_history")
    op.execute("DROP TABLE workerpool_jobs_history")
