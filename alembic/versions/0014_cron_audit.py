"""cron at run time and the audit trail: a schedule's pause beside its code defaults, and
``workerpool_audit`` (who did what, when)

Online-safe. Locks, step by step:

- the five ``ADD COLUMN``s on ``workerpool_cron``: ACCESS EXCLUSIVE on that table, for a
  catalog change only (the one with a default is a constant default: no rewrite since
  PostgreSQL 11); the table holds one row per schedule, and the schedulers skip a locked row.
- ``CREATE TABLE workerpool_audit`` and its index: a new, empty table; nothing else is locked.

Downgrade drops the table and the columns (the same locks).

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-02 05:00:00.000000

"""
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = '0014'
down_revision: str | Sequence[str] | None = '0013'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TZ = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.add_column('workerpool_cron', sa.Column(
        'paused', sa.Boolean(), server_default=sa.text('false'), nullable=False))
    op.add_column('workerpool_cron', sa.Column('paused_at', TZ, nullable=True))
    op.add_column('workerpool_cron', sa.Column('paused_by', sa.Text(), nullable=True))
    op.add_column('workerpool_cron', sa.Column('changed_at', TZ, nullable=True))
    op.add_column('workerpool_cron', sa.Column('changed_by', sa.Text(), nullable=True))
    op.create_table(
        'workerpool_audit',
        sa.Column('id', sa.BigInteger(), sa.Identity(always=False), nullable=False),
        sa.Column('at', TZ, server_default=sa.text('now()'), nullable=False),
        sa.Column('actor', sa.Text(), nullable=False),
        sa.Column('source', sa.Text(), nullable=False),
        sa.Column('action', sa.Text(), nullable=False),
        sa.Column('target', sa.Text(), nullable=False),
        sa.Column('detail', postgresql.JSONB(astext_type=sa.Text()),
                  server_default=sa.text("'{}'::jsonb"), nullable=False),
        sa.CheckConstraint("source IN ('cli', 'web', 'api')",
                           name=op.f('ck_workerpool_audit_source')),
        sa.CheckConstraint("jsonb_typeof(detail) = 'object'",
                           name=op.f('ck_workerpool_audit_detail_object')),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_workerpool_audit')),
    )
    op.create_index('ix_workerpool_audit_at', 'workerpool_audit', ['at'], unique=False)


def downgrade() -> None:
    op.drop_index('ix_workerpool_audit_at', table_name='workerpool_audit')
    op.drop_table('workerpool_audit')
    for column in ('changed_by', 'changed_at', 'paused_by', 'paused_at', 'paused'):
        op.drop_column('workerpool_cron', column)
