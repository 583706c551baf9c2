"""finished minutes: the history's jobs counted by the minute they finished, for the dashboard's
chart (it then reads no history rows)

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-21 12:00:00.000000

Locks, step by step:

- ``workerpool_finished_minutes`` is a new table: nothing else is locked.
- The backfill counts the history's last hour (what the chart shows) through
  ``ix_workerpool_jobs_history_finished``: it reads the history under ACCESS SHARE, so moves and
  reads go on. Rows an older version's mover moves after this are not counted: the chart then
  undercounts them until they leave its window (an hour).
- That index then goes: the chart was its one reader, and every move wrote to it. Dropping an
  index of a partitioned table holds ACCESS EXCLUSIVE on the history and its partitions for the
  catalog change and the files' unlink (milliseconds; reads of moved jobs and the move wait).
  The downgrade builds it again (a SHARE lock on each partition while it reads it: moves wait).
"""
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0016'
down_revision: str | Sequence[str] | None = '0015'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        'workerpool_finished_minutes',
        sa.Column('minute', sa.DateTime(timezone=True), nullable=False),
        sa.Column('queue', sa.Text(), nullable=False),
        sa.Column('state', sa.Text(), nullable=False),
        sa.Column('count', sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint('minute', 'queue', 'state',
                                name=op.f('pk_workerpool_finished_minutes')),
    )
    op.execute(
        "INSERT INTO workerpool_finished_minutes (minute, queue, state, count)"
        " SELECT date_trunc('minute', finished_at), queue, state, count(*)"
        " FROM workerpool_jobs_history WHERE finished_at >= now() - interval '1 hour'"
        " GROUP BY 1, 2, 3")
    op.drop_index('ix_workerpool_jobs_history_finished', table_name='workerpool_jobs_history')


def downgrade() -> None:
    op.create_index('ix_workerpool_jobs_history_finished', 'workerpool_jobs_history',
                    ['finished_at'], unique=False)
    op.drop_table('workerpool_finished_minutes')
