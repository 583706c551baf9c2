"""cron schedules added at run time: workerpool_cron.task, payload, added_at, added_by (a row
whose task is set was added by ``pool.cron_add``, not declared in code)

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-06 20:30:00.000000

Locks: each ADD COLUMN (nullable, no default: a catalog change only, no rewrite) holds ACCESS
EXCLUSIVE on workerpool_cron for milliseconds; a scheduler pass waits behind it.
"""
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = '0021'
down_revision: str | Sequence[str] | None = '0020'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    tz = sa.DateTime(timezone=True)
    op.add_column('workerpool_cron', sa.Column('task', sa.Text(), nullable=True))
    op.add_column('workerpool_cron', sa.Column('payload', postgresql.JSONB(), nullable=True))
    op.add_column('workerpool_cron', sa.Column('added_at', tz, nullable=True))
    op.add_column('workerpool_cron', sa.Column('added_by', sa.Text(), nullable=True))


def downgrade() -> None:
    op.execute("DELETE FROM workerpool_cron WHERE task IS NOT NULL")
    op.drop_column('workerpool_cron', 'added_by')
    op.drop_column('workerpool_cron', 'added_at')
    op.drop_column('workerpool_cron', 'payload')
    op.drop_column('workerpool_cron', 'task')
