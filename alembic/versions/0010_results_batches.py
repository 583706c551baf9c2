"""results and batches: a job's result, batches with callbacks, and the waiters of results

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-10 12:00:00.000000

``result`` and ``batch_id`` are nullable without a default: adding them rewrites no row. The
size check on ``result`` is added NOT VALID and validated in a second step, which does not block
writers (every existing row has a NULL result). The batch index is partial (``batch_id IS NOT
NULL``): on an existing table it holds nothing, and rows without a batch never enter it.
"""
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = '0010'
down_revision: str | Sequence[str] | None = '0009'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

PAYLOAD_HARD_LIMIT = 1024 * 1024


def upgrade() -> None:
    op.add_column('workerpool_jobs', sa.Column(
        'result', postgresql.JSONB(astext_type=sa.Text()), nullable=True))
    op.add_column('workerpool_jobs', sa.Column('batch_id', sa.BigInteger(), nullable=True))
    op.execute('ALTER TABLE workerpool_jobs ADD CONSTRAINT ck_workerpool_jobs_result_size'
               f' CHECK (octet_length(result::text) <= {PAYLOAD_HARD_LIMIT}) NOT VALID')
    op.execute('ALTER TABLE workerpool_jobs VALIDATE CONSTRAINT ck_workerpool_jobs_result_size')
    op.create_index('ix_workerpool_jobs_batch', 'workerpool_jobs', ['batch_id', 'state', 'id'],
                    postgresql_where='batch_id IS NOT NULL')
    op.create_table(
        'workerpool_batches',
        sa.Column('id', sa.BigInteger(), sa.Identity(always=False), nullable=False),
        sa.Column('key', sa.Text(), nullable=True),
        sa.Column('on_complete', sa.Text(), nullable=True),
        sa.Column('on_success', sa.Text(), nullable=True),
        sa.Column('on_failure', sa.Text(), nullable=True),
        sa.Column('callbacks', postgresql.JSONB(astext_type=sa.Text()),
                  server_default=sa.text("'[]'::jsonb"), nullable=False),
        sa.Column('payload', postgresql.JSONB(astext_type=sa.Text()),
                  server_default=sa.text("'{}'::jsonb"), nullable=False),
        sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.text('now()'),
                  nullable=False),
        sa.Column('finished_at', sa.DateTime(timezone=True), nullable=True),
        sa.Column('outcome', sa.Text(), nullable=True),
        sa.Column('fired_by', sa.Text(), nullable=True),
        sa.Column('callback_ids', postgresql.ARRAY(sa.BigInteger()), nullable=True),
        sa.CheckConstraint("jsonb_typeof(payload) = 'object'",
                           name=op.f('ck_workerpool_batches_payload_object')),
        sa.CheckConstraint("jsonb_typeof(callbacks) = 'array'",
                           name=op.f('ck_workerpool_batches_callbacks_array')),
        sa.CheckConstraint(
            "(finished_at IS NULL) = (outcome IS NULL) AND "
            "(outcome IS NULL OR outcome IN ('success', 'failure')) AND "
            "(fired_by IS NULL OR fired_by IN ('outcome', 'empty', 'sweep'))",
            name=op.f('ck_workerpool_batches_finished')),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_workerpool_batches')),
    )
    op.create_index('uq_workerpool_batches_key', 'workerpool_batches', ['key'], unique=True,
                    postgresql_where='key IS NOT NULL')
    op.create_index('ix_workerpool_batches_open', 'workerpool_batches', ['id'],
                    postgresql_where='finished_at IS NULL')
    op.create_index('ix_workerpool_batches_finished', 'workerpool_batches', ['finished_at'],
                    postgresql_where='finished_at IS NOT NULL')
    op.create_table(
        'workerpool_waiters',
        sa.Column('id', sa.BigInteger(), sa.Identity(always=False), nullable=False),
        sa.Column('job_id', sa.BigInteger(), nullable=False),
        sa.Column('since', sa.DateTime(timezone=True), server_default=sa.text('now()'),
                  nullable=False),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_workerpool_waiters')),
    )
    op.create_index('ix_workerpool_waiters_job_id', 'workerpool_waiters', ['job_id'])


def downgrade() -> None:
    op.drop_index('ix_workerpool_waiters_job_id', table_name='workerpool_waiters')
    op.drop_table('workerpool_waiters')
    op.drop_index('ix_workerpool_batches_finished', table_name='workerpool_batches')
    op.drop_index('ix_workerpool_batches_open', table_name='workerpool_batches')
    op.drop_index('uq_workerpool_batches_key', table_name='workerpool_batches')
    op.drop_table('workerpool_batches')
    op.drop_index('ix_workerpool_jobs_batch', table_name='workerpool_jobs')
    op.execute('ALTER TABLE workerpool_jobs DROP CONSTRAINT ck_workerpool_jobs_result_size')
    op.drop_column('workerpool_jobs', 'batch_id')
    op.drop_column('workerpool_jobs', 'result')
