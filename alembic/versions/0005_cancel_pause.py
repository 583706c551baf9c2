"""cancel and pause: a running job's cancel request, and the shared queue-state table

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01 11:00:00.000000

"""
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = '0005'
down_revision: str | Sequence[str] | None = '0004'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column('workerpool_jobs', sa.Column(
        'cancel_request', postgresql.JSONB(astext_type=sa.Text()), nullable=True))
    op.create_table(
        'workerpool_queues',
        sa.Column('queue', sa.Text(), nullable=False),
        sa.Column('paused', sa.Boolean(), server_default=sa.text('false'), nullable=False),
        sa.Column('paused_at', sa.DateTime(timezone=True), nullable=True),
        sa.Column('paused_by', sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint('queue', name=op.f('pk_workerpool_queues')),
    )


def downgrade() -> None:
    op.drop_table('workerpool_queues')
    op.drop_column('workerpool_jobs', 'cancel_request')
