"""suspects: count the process deaths a job was held through

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01 10:00:00.000000

"""
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0003'
down_revision: str | Sequence[str] | None = '0002'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column('workerpool_jobs', sa.Column(
        'crashes', sa.Integer(), server_default=sa.text('0'), nullable=False))
    op.create_index(
        'ix_workerpool_jobs_suspects', 'workerpool_jobs',
        ['queue', sa.literal_column('priority DESC'), 'run_at', 'id'], unique=False,
        postgresql_where=sa.text("state IN ('pending', 'failed') AND crashes > 0"))


def downgrade() -> None:
    op.drop_index('ix_workerpool_jobs_suspects', table_name='workerpool_jobs',
                  postgresql_where=sa.text("state IN ('pending', 'failed') AND crashes > 0"))
    op.drop_column('workerpool_jobs', 'crashes')
