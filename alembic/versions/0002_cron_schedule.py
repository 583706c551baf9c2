"""cron schedule: timezone and next tick

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29 12:00:00.000000

"""
from typing import Sequence, Union

from alembic import op
import sqlalchemy as sa

# revision identifiers, used by Alembic.
revision: str = '0002'
down_revision: Union[str, Sequence[str], None] = '0001'
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    """Upgrade schema."""
    op.add_column('workerpool_cron', sa.Column(
        'timezone', sa.Text(), server_default=sa.text("'UTC'"), nullable=False))
    op.add_column('workerpool_cron', sa.Column('next_tick', sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    """Downgrade schema."""
    op.drop_column('workerpool_cron', 'next_tick')
    op.drop_column('workerpool_cron', 'timezone')
