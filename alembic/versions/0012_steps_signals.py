"""durable steps and signals: a job's steps, the signal a waiting job waits for, the signals

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-12 12:00:00.000000

``steps`` and ``signal`` are nullable without a default: adding them rewrites no row. The check
on ``steps`` is added NOT VALID and validated in a second step, which does not block writers
(every existing row has NULL steps). The signal index is partial (waiting jobs with a signal):
on an existing table it holds nothing, and jobs that never wait for a signal never enter it.
"""
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = '0012'
down_revision: str | Sequence[str] | None = '0011'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

PAYLOAD_HARD_LIMIT = 1024 * 1024


def upgrade() -> None:
    op.add_column('workerpool_jobs', sa.Column(
        'steps', postgresql.JSONB(astext_type=sa.Text()), nullable=True))
    op.add_column('workerpool_jobs', sa.Column('signal', sa.Text(), nullable=True))
    op.execute('ALTER TABLE workerpool_jobs ADD CONSTRAINT ck_workerpool_jobs_steps_object'
               " CHECK (jsonb_typeof(steps) = 'object') NOT VALID")
    op.execute('ALTER TABLE workerpool_jobs VALIDATE CONSTRAINT ck_workerpool_jobs_steps_object')
    op.create_index('ix_workerpool_jobs_signal', 'workerpool_jobs', ['signal'],
                    postgresql_where="state = 'waiting' AND signal IS NOT NULL")
    op.create_table(
        'workerpool_signals',
        sa.Column('name', sa.Text(), nullable=False),
        sa.Column('payload', postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column('sent_at', sa.DateTime(timezone=True), server_default=sa.text('now()'),
                  nullable=False),
        sa.CheckConstraint(f'octet_length(payload::text) <= {PAYLOAD_HARD_LIMIT}',
                           name=op.f('ck_workerpool_signals_payload_size')),
        sa.PrimaryKeyConstraint('name', name=op.f('pk_workerpool_signals')),
    )


def downgrade() -> None:
    op.drop_table('workerpool_signals')
    op.drop_index('ix_workerpool_jobs_signal', table_name='workerpool_jobs')
    op.execute('ALTER TABLE workerpool_jobs DROP CONSTRAINT ck_workerpool_jobs_steps_object')
    op.drop_column('workerpool_jobs', 'signal')
    op.drop_column('workerpool_jobs', 'steps')
