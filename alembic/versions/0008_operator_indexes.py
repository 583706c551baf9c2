"""operator indexes: the dead-letter queue gets its own partial index, and the planner learns how
queue and state go together

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01 13:00:00.000000

``workerpool dead list`` read the whole table: the finished-rows index covers ``done`` too, so
finding the newest dead row among millions of done ones was a scan. The dead rows get an index
of their own (newest first, with the columns the listing filters and counts on, so a count is an
index-only scan of the dead rows alone). ``workerpool status`` shows the history's counts as the
planner's estimates; the multivariate statistics on (queue, state) make them right per queue
instead of the product of two independent frequencies.
The index is built with a plain CREATE INDEX (migrations run in a transaction): on a table of
10M rows it takes seconds, and only writers wait for it.
"""
from collections.abc import Sequence

from alembic import op

revision: str = '0008'
down_revision: str | Sequence[str] | None = '0007'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index(
        'ix_workerpool_jobs_dead', 'workerpool_jobs', ['finished_at', 'id'],
        postgresql_where="state = 'dead'",
        postgresql_include=['queue', 'task', 'dead_reason'],
    )
    op.execute('CREATE STATISTICS IF NOT EXISTS workerpool_jobs_queue_state (mcv)'
               ' ON queue, state FROM workerpool_jobs')


def downgrade() -> None:
    op.execute('DROP STATISTICS IF EXISTS workerpool_jobs_queue_state')
    op.drop_index('ix_workerpool_jobs_dead', table_name='workerpool_jobs')
