"""drop ix_workerpool_jobs_started: every claim now stamps started_at (when its attempt began:
the dashboard's waited and ran times), and no query reads (queue, started_at) since a queue's
rate limit counts its claims in workerpool_rate_counts; kept, the index would take an entry
for every claimed row, at the claim and again at its outcome

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-22 12:00:00.000000

Locks: dropping the index holds ACCESS EXCLUSIVE on workerpool_jobs for the catalog change and
the file's unlink (milliseconds; claims and enqueues wait behind it, and it waits behind any
open transaction on the table). The downgrade builds it again under a SHARE lock: writes to
the jobs table wait while it reads the rows with a started_at.
"""
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0018'
down_revision: str | Sequence[str] | None = '0017'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.drop_index('ix_workerpool_jobs_started', table_name='workerpool_jobs')


def downgrade() -> None:
    op.create_index('ix_workerpool_jobs_started', 'workerpool_jobs', ['queue', 'started_at'],
                    unique=False, postgresql_where=sa.text("started_at IS NOT NULL"))
