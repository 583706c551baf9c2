"""a workflow job's step name: workerpool_jobs.workflow_step (and the history's), so the
dashboard's graph labels each node by its step (``pool.workflow().step(name, ...)``)

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-06 09:00:00.000000

Locks: each ADD COLUMN (nullable, no default: a catalog change only, no rewrite) holds ACCESS
EXCLUSIVE on its table for milliseconds; claims and enqueues wait behind it, and it waits behind
any open transaction on the table.
"""
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0019'
down_revision: str | Sequence[str] | None = '0018'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column('workerpool_jobs', sa.Column('workflow_step', sa.Text(), nullable=True))
    op.add_column('workerpool_jobs_history', sa.Column('workflow_step', sa.Text(), nullable=True))


def downgrade() -> None:
    op.drop_column('workerpool_jobs_history', 'workflow_step')
    op.drop_column('workerpool_jobs', 'workflow_step')
