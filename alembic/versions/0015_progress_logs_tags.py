"""progress, attempt logs and tags: a job's progress, its tags and their index, the log records
of each attempt

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-20 12:00:00.000000

Locks, step by step:

- ``tags`` and ``progress`` are nullable without a default: ADD COLUMN rewrites no row and holds
  its ACCESS EXCLUSIVE lock only for the catalog change (milliseconds).
- ``ix_workerpool_jobs_tags`` (GIN, partial on ``tags IS NOT NULL``) holds a SHARE lock while it
  reads the table: writers wait for one sequential scan, readers do not. Every existing row has
  NULL tags, so nothing enters the index; on a table of tens of millions of rows the scan still
  takes seconds. To keep writers running there, build it first, online, and this step then
  finds it and does nothing (``IF NOT EXISTS``)::

      CREATE INDEX CONCURRENTLY IF NOT EXISTS ix_workerpool_jobs_tags
          ON workerpool_jobs USING gin (tags) WHERE tags IS NOT NULL;

- ``workerpool_job_logs`` is a new table (and its indexes): no lock on ``workerpool_jobs``.
- ``tags`` and ``progress`` on ``workerpool_jobs_history``: as on the jobs table, a catalog change
  under ACCESS EXCLUSIVE on the history table and its partitions (milliseconds; the move waits).
"""
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = '0015'
down_revision: str | Sequence[str] | None = '0014'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column('workerpool_jobs', sa.Column('tags', postgresql.ARRAY(sa.Text()), nullable=True))
    op.add_column('workerpool_jobs', sa.Column(
        'progress', postgresql.JSONB(astext_type=sa.Text()), nullable=True))
    op.execute('CREATE INDEX IF NOT EXISTS ix_workerpool_jobs_tags ON workerpool_jobs'
               ' USING gin (tags) WHERE tags IS NOT NULL')
    op.create_table(
        'workerpool_job_logs',
        sa.Column('id', sa.BigInteger(), sa.Identity(always=False), nullable=False),
        sa.Column('job_id', sa.BigInteger(), nullable=False),
        sa.Column('attempt', sa.Integer(), nullable=False),
        sa.Column('records', postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column('dropped', sa.Integer(), server_default=sa.text('0'), nullable=False),
        sa.Column('written_at', sa.DateTime(timezone=True), server_default=sa.text('now()'),
                  nullable=False),
        sa.CheckConstraint("jsonb_typeof(records) = 'array'",
                           name=op.f('ck_workerpool_job_logs_records_array')),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_workerpool_job_logs')),
    )
    op.create_index('ix_workerpool_job_logs_job_id', 'workerpool_job_logs', ['job_id', 'id'])
    op.create_index('ix_workerpool_job_logs_written', 'workerpool_job_logs', ['written_at'])
    # The history table has the jobs table's columns (a moved row keeps its tags and progress);
    # on a partitioned table the new nullable columns reach every partition without a rewrite.
    op.add_column('workerpool_jobs_history', sa.Column('tags', postgresql.ARRAY(sa.Text()),
                                                       nullable=True))
    op.add_column('workerpool_jobs_history', sa.Column(
        'progress', postgresql.JSONB(astext_type=sa.Text()), nullable=True))


def downgrade() -> None:
    op.drop_column('workerpool_jobs_history', 'progress')
    op.drop_column('workerpool_jobs_history', 'tags')
    op.drop_table('workerpool_job_logs')
    op.drop_index('ix_workerpool_jobs_tags', table_name='workerpool_jobs')
    op.drop_column('workerpool_jobs', 'progress')
    op.drop_column('workerpool_jobs', 'tags')
