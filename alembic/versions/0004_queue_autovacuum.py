"""queue autovacuum: vacuum and analyze the jobs table after a small share of it changed

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01 12:00:00.000000

A queue table turns over its live rows many times a day while its size stays set by the
retention, so the server's defaults (vacuum once a fifth of the table is dead, analyze once a
tenth changed) let it carry hundreds of thousands of dead rows between passes and plan with
statistics taken when it looked nothing like it does now. These per-table settings make
autovacuum treat it as the hot table it is; docs/operations.md ("Table health") explains each
value.
The values are written out here, not imported: a migration states what it did when it ran.
"""
from collections.abc import Sequence

from alembic import op

revision: str = '0004'
down_revision: str | Sequence[str] | None = '0003'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SETTINGS = {
    'autovacuum_vacuum_scale_factor': '0.02',
    'autovacuum_vacuum_threshold': '1000',
    'autovacuum_analyze_scale_factor': '0.02',
    'autovacuum_analyze_threshold': '1000',
    'autovacuum_vacuum_cost_limit': '2000',
}


def upgrade() -> None:
    values = ', '.join(f'{name} = {value}' for name, value in SETTINGS.items())
    op.execute(f'ALTER TABLE workerpool_jobs SET ({values})')


def downgrade() -> None:
    op.execute(f"ALTER TABLE workerpool_jobs RESET ({', '.join(SETTINGS)})")
