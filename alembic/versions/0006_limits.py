"""limits: key scopes (the key held while live, or for a period), concurrency keys, claim starts

The key's uniqueness moves from a constraint on every row to a partial unique index over the
rows that hold their key (so a ``live`` key is free again once its job finished), and the queue
row carries the limits its workers declared.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01 12:30:00.000000

"""
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = '0006'
down_revision: str | Sequence[str] | None = '0005'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

KEY_HELD = ("key IS NOT NULL AND (key_scope IS NULL OR key_scope = 'for' OR "
            "(key_scope = 'live' AND state IN ('pending', 'processing', 'failed')))")


def upgrade() -> None:
    tz = sa.DateTime(timezone=True)
    op.add_column('workerpool_jobs', sa.Column('key_scope', sa.Text(), nullable=True))
    op.add_column('workerpool_jobs', sa.Column('key_expires_at', tz, nullable=True))
    op.add_column('workerpool_jobs', sa.Column('concurrency_key', sa.Text(), nullable=True))
    op.add_column('workerpool_jobs', sa.Column('started_at', tz, nullable=True))
    op.create_check_constraint(
        op.f('ck_workerpool_jobs_key_scope'), 'workerpool_jobs',
        "key_scope IS NULL OR key_scope IN ('live', 'for', 'expired')")
    op.drop_constraint(op.f('uq_workerpool_jobs_key'), 'workerpool_jobs', type_='unique')
    op.create_index('uq_workerpool_jobs_key', 'workerpool_jobs', ['key'], unique=True,
                    postgresql_where=sa.text(KEY_HELD))
    op.create_index('ix_workerpool_jobs_due_key', 'workerpool_jobs',
                    ['queue', 'concurrency_key', sa.literal_column('priority DESC'), 'run_at', 'id'],
                    unique=False, postgresql_where=sa.text(
                        "state IN ('pending', 'failed') AND concurrency_key IS NOT NULL"))
    op.create_index('ix_workerpool_jobs_running_key', 'workerpool_jobs',
                    ['queue', 'concurrency_key'], unique=False,
                    postgresql_where=sa.text(
                        "state = 'processing' AND concurrency_key IS NOT NULL"))
    op.create_index('ix_workerpool_jobs_started', 'workerpool_jobs', ['queue', 'started_at'],
                    unique=False, postgresql_where=sa.text("started_at IS NOT NULL"))
    op.create_index('ix_workerpool_jobs_started_key', 'workerpool_jobs',
                    ['queue', 'concurrency_key', 'started_at'], unique=False,
                    postgresql_where=sa.text(
                        "started_at IS NOT NULL AND concurrency_key IS NOT NULL"))
    op.add_column('workerpool_queues', sa.Column(
        'limits', postgresql.JSONB(astext_type=sa.Text()), nullable=True))
    op.add_column('workerpool_workers', sa.Column('capacity', sa.Integer(), nullable=True))


def downgrade() -> None:
    op.drop_column('workerpool_workers', 'capacity')
    op.drop_column('workerpool_queues', 'limits')
    op.drop_index('ix_workerpool_jobs_started_key', table_name='workerpool_jobs')
    op.drop_index('ix_workerpool_jobs_started', table_name='workerpool_jobs')
    op.drop_index('ix_workerpool_jobs_running_key', table_name='workerpool_jobs')
    op.drop_index('ix_workerpool_jobs_due_key', table_name='workerpool_jobs')
    op.drop_index('uq_workerpool_jobs_key', table_name='workerpool_jobs')
    # keys that were free again (finished live jobs, expired periods) give theirs up for good
    op.execute("UPDATE workerpool_jobs SET key = NULL WHERE key IS NOT NULL AND NOT "
               f"({KEY_HELD})")
    op.create_unique_constraint(op.f('uq_workerpool_jobs_key'), 'workerpool_jobs', ['key'])
    op.drop_constraint(op.f('ck_workerpool_jobs_key_scope'), 'workerpool_jobs', type_='check')
    op.drop_column('workerpool_jobs', 'started_at')
    op.drop_column('workerpool_jobs', 'concurrency_key')
    op.drop_column('workerpool_jobs', 'key_expires_at')
    op.drop_column('workerpool_jobs', 'key_scope')
