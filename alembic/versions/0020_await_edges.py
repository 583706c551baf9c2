"""an await edge: workerpool_job_dependencies.kind may be 'await' (``job.wait_for_job``: the
dependent awaits its parent from inside its handler)

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-06 20:00:00.000000

Locks: dropping and adding the CHECK holds ACCESS EXCLUSIVE on workerpool_job_dependencies while
the new constraint validates its rows (one scan of the edges table; enqueues with ``after=`` and
releases wait behind it).
"""
from collections.abc import Sequence

from alembic import op

revision: str = '0020'
down_revision: str | Sequence[str] | None = '0019'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLE = 'workerpool_job_dependencies'
NAME = 'ck_workerpool_job_dependencies_kind'


def upgrade() -> None:
    op.drop_constraint(op.f(NAME), TABLE, type_='check')
    op.create_check_constraint(op.f(NAME), TABLE, "kind IN ('after', 'sequence', 'await')")


def downgrade() -> None:
    op.execute(f"DELETE FROM {TABLE} WHERE kind = 'await'")
    op.drop_constraint(op.f(NAME), TABLE, type_='check')
    op.create_check_constraint(op.f(NAME), TABLE, "kind IN ('after', 'sequence')")
