"""trace context: the enqueuer's W3C trace context, stored with the job

Revision ID: 0007
Revises: 0005
Create Date: 2026-12-01 12:30:00.000000

"""
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = '0007'
down_revision: str | Sequence[str] | None = '0006'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Nullable, no default: adding it rewrites no row, and untraced jobs keep it NULL.
    op.add_column('workerpool_jobs', sa.Column(
        'trace_context', postgresql.JSONB(astext_type=sa.Text()), nullable=True))


def downgrade() -> None:
    op.drop_column('workerpool_jobs', 'trace_context')
