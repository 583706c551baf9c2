"""waiting and dependencies: jobs held back for their parents or their sequence

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-20 12:00:00.000000

A job in the new state ``waiting`` is live: it holds a key of scope 'live', so the unique key
index is rebuilt with the new predicate (in this transaction: enqueues with a key wait for the
build, which reads only the rows that have a key). The state check is replaced NOT VALID and
validated in a second step, which does not block writers. ``sequence`` and ``workflow_id`` are
nullable without a default and ``has_dependents`` has a constant one (no row rewritten) and their indexes partial (empty on an existing
table). The edges live in ``workerpool_job_dependencies``, indexed by parent.
"""
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0011'
down_revision: str | Sequence[str] | None = '0010'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

OLD_STATES = "'pending', 'processing', 'failed', 'done', 'dead', 'cancelled'"
NEW_STATES = f"{OLD_STATES}, 'waiting'"
OLD_LIVE = "'pending', 'processing', 'failed'"
NEW_LIVE = f"{OLD_LIVE}, 'waiting'"


def key_held(live: str) -> str:
    return ("key IS NOT NULL AND (key_scope IS NULL OR key_scope = 'for' OR "
            f"(key_scope = 'live' AND state IN ({live})))")


def replace_state_check(states: str) -> None:
    op.execute('ALTER TABLE workerpool_jobs DROP CONSTRAINT ck_workerpool_jobs_state')
    op.execute('ALTER TABLE workerpool_jobs ADD CONSTRAINT ck_workerpool_jobs_state'
               f' CHECK (state IN ({states})) NOT VALID')
    op.execute('ALTER TABLE workerpool_jobs VALIDATE CONSTRAINT ck_workerpool_jobs_state')


def replace_key_index(live: str) -> None:
    op.drop_index('uq_workerpool_jobs_key', table_name='workerpool_jobs')
    op.create_index('uq_workerpool_jobs_key', 'workerpool_jobs', ['key'], unique=True,
                    postgresql_where=sa.text(key_held(live)))


def upgrade() -> None:
    replace_state_check(NEW_STATES)
    replace_key_index(NEW_LIVE)
    op.create_index('ix_workerpool_jobs_waiting', 'workerpool_jobs', ['queue', 'id'],
                    postgresql_where=sa.text("state = 'waiting'"))
    op.add_column('workerpool_jobs', sa.Column('sequence', sa.Text(), nullable=True))
    op.add_column('workerpool_jobs', sa.Column('workflow_id', sa.BigInteger(), nullable=True))
    op.add_column('workerpool_jobs', sa.Column('has_dependents', sa.Boolean(),
                                               server_default=sa.text('false'), nullable=False))
    op.create_index('ix_workerpool_jobs_sequence', 'workerpool_jobs', ['sequence', 'id'],
                    postgresql_where=sa.text(
                        f"sequence IS NOT NULL AND state IN ({NEW_LIVE}, 'dead')"))
    op.create_index('ix_workerpool_jobs_workflow', 'workerpool_jobs', ['workflow_id', 'id'],
                    postgresql_where=sa.text('workflow_id IS NOT NULL'))
    op.create_table(
        'workerpool_job_dependencies',
        sa.Column('job_id', sa.BigInteger(), nullable=False),
        sa.Column('parent_id', sa.BigInteger(), nullable=False),
        sa.Column('kind', sa.Text(), server_default=sa.text("'after'"), nullable=False),
        sa.Column('if_failed', sa.Text(), server_default=sa.text("'cancel'"), nullable=False),
        sa.CheckConstraint("kind IN ('after', 'sequence')",
                           name=op.f('ck_workerpool_job_dependencies_kind')),
        sa.CheckConstraint("if_failed IN ('cancel', 'run', 'hold')",
                           name=op.f('ck_workerpool_job_dependencies_if_failed')),
        sa.PrimaryKeyConstraint('job_id', 'parent_id',
                                name=op.f('pk_workerpool_job_dependencies')),
    )
    op.create_index('ix_workerpool_job_dependencies_parent_id', 'workerpool_job_dependencies',
                    ['parent_id'])


def downgrade() -> None:
    # A waiting job has no state to go back to (pending would run it before its parents).
    op.execute("""
        DO $$ BEGIN
          IF EXISTS (SELECT 1 FROM workerpool_jobs WHERE state = 'waiting') THEN
            RAISE EXCEPTION 'workerpool_jobs has waiting jobs: cancel them or let them run'
              ' before downgrading below 0011';
          END IF;
        END $$""")
    op.drop_index('ix_workerpool_job_dependencies_parent_id',
                  table_name='workerpool_job_dependencies')
    op.drop_table('workerpool_job_dependencies')
    op.drop_index('ix_workerpool_jobs_workflow', table_name='workerpool_jobs')
    op.drop_index('ix_workerpool_jobs_sequence', table_name='workerpool_jobs')
    op.drop_column('workerpool_jobs', 'has_dependents')
    op.drop_column('workerpool_jobs', 'workflow_id')
    op.drop_column('workerpool_jobs', 'sequence')
    op.drop_index('ix_workerpool_jobs_waiting', table_name='workerpool_jobs')
    replace_key_index(OLD_LIVE)
    replace_state_check(OLD_STATES)
