"""rate counts: a queue-wide rate limit counts claims per slice of its window in a small ring

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01 15:00:00.000000

A rate-limited claim counted the starts of the last window on ix_workerpool_jobs_started, up to
the limit: at 20k claims a second under a limit of 1M/s, 20,000 index entries (and heap
fetches) on every claim. The ring holds RATE_SLICES + 1 rows per (queue, window): the claim sums
them and adds its own count to the current slice's row.
"""
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0009'
down_revision: str | Sequence[str] | None = '0008'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        'workerpool_rate_counts',
        sa.Column('queue', sa.Text(), nullable=False),
        sa.Column('window_s', sa.Integer(), nullable=False),
        sa.Column('slot', sa.SmallInteger(), nullable=False),
        sa.Column('slice', sa.BigInteger(), nullable=False),
        sa.Column('claims', sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint('queue', 'window_s', 'slot',
                                name=op.f('pk_workerpool_rate_counts')),
    )


def downgrade() -> None:
    op.drop_table('workerpool_rate_counts')
