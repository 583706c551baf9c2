"""bounded queues without a count per enqueue: workerpool_queue_credits, workerpool_queue_take

Revision ID: 0023
Revises: 0022
Create Date: 2026-12-07 02:30:00.000000

``workerpool_queue_room(queue, adding, max_pending)`` counted the queue's waiting jobs on every
enqueue (a walk of up to ``max_pending`` index entries). An enqueue that is a transaction of its
own (Python's ``pool.enqueue`` without ``conn=``) now calls ``workerpool_queue_take`` instead:
a count grants a credit, a hundredth of the bound at most (none under a bound of 100), kept in
``workerpool_queue_credits``; each such enqueue takes from it (one row's UPDATE) and only the one
that finds it spent counts again. Jobs leaving the queue never give credit back, so a credit is
never more than the room.

A credit is only granted or taken by a statement that commits at once, so its row is never
locked for longer than a statement and never holds a grant others cannot see. Whoever finds it
locked, and every enqueue inside a longer transaction (a trigger, ``conn=``, a batch, SQL and
HTTP), counts instead (``workerpool_queue_room``, which writes nothing and locks nothing) and
leaves room for the credit outstanding: such an enqueue may be refused up to a hundredth of the
bound early, and producers that enqueue at once still pass the bound by at most what they hold
uncommitted.

Locks: none beyond the catalog rows of a new table and two functions.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy import text

revision: str = "0023"
down_revision: str | Sequence[str] | None = "0022"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# The jobs waiting to run (pending, failed, waiting), each state's walk stopping at the bound,
# on ix_workerpool_jobs_due and ix_workerpool_jobs_waiting.
WAITING = """(
  (SELECT count(*) FROM (
     SELECT 1 FROM {s}.workerpool_jobs AS j
     WHERE j.queue = q AND j.state IN ('pending', 'failed') LIMIT bound) AS due)
  + (SELECT count(*) FROM (
     SELECT 1 FROM {s}.workerpool_jobs AS j
     WHERE j.queue = q AND j.state = 'waiting' LIMIT bound) AS held))"""

# Counting: the room once ``adding`` more are in, less the credit granted and not yet taken.
QUEUE_ROOM = """
CREATE OR REPLACE FUNCTION {s}.workerpool_queue_room(queue text, adding integer,
  max_pending integer)
RETURNS integer LANGUAGE plpgsql SET search_path = {s}, pg_temp AS $fn$
DECLARE
  q text := workerpool_queue_room.queue;
  bound integer := workerpool_queue_room.max_pending;
BEGIN
  RETURN bound - {waiting} - workerpool_queue_room.adding
    - coalesce((SELECT r.credit FROM {s}.workerpool_queue_credits AS r WHERE r.queue = q), 0);
END
$fn$
"""

# Taking from the credit; when it is spent, counting and granting a new one. A credit granted
# under one bound is valid under another shifted by their difference (Python's declared bound
# and the one SQL reads may differ without every enqueue counting again).
QUEUE_TAKE = """
CREATE FUNCTION {s}.workerpool_queue_take(queue text, adding integer, max_pending integer)
RETURNS integer LANGUAGE plpgsql SET search_path = {s}, pg_temp AS $fn$
DECLARE
  q text := workerpool_queue_take.queue;
  n integer := workerpool_queue_take.adding;
  bound integer := workerpool_queue_take.max_pending;
  credit integer;
  room integer;
BEGIN
  IF n IS NULL OR n < 1 OR bound IS NULL OR bound < 1 THEN
    RAISE EXCEPTION 'workerpool_queue_take: adding and max_pending must be positive, got % and %',
      n, bound USING ERRCODE = '22023';
  END IF;
  UPDATE {s}.workerpool_queue_credits AS r SET credit = r.credit - n
  WHERE r.queue = (
    SELECT f.queue FROM {s}.workerpool_queue_credits AS f
    WHERE f.queue = q AND f.credit + (bound - f.max_pending) >= n FOR UPDATE SKIP LOCKED)
  RETURNING r.credit + (bound - r.max_pending) INTO credit;
  IF FOUND THEN
    RETURN credit;
  END IF;
  PERFORM FROM {s}.workerpool_queue_credits AS r WHERE r.queue = q FOR UPDATE SKIP LOCKED;
  IF FOUND THEN
    room := bound - {waiting} - n;
    UPDATE {s}.workerpool_queue_credits AS r
    SET max_pending = bound, credit = least(greatest(room, 0), bound / 100),
        counted_at = now()
    WHERE r.queue = q;
    RETURN room;
  END IF;
  room := {s}.workerpool_queue_room(q, n, bound);
  IF NOT EXISTS (SELECT FROM {s}.workerpool_queue_credits AS r WHERE r.queue = q) THEN
    INSERT INTO {s}.workerpool_queue_credits AS r (queue, max_pending, credit)
    VALUES (q, bound, least(greatest(room, 0), bound / 100))
    ON CONFLICT ON CONSTRAINT pk_workerpool_queue_credits DO NOTHING;
  END IF;
  RETURN room;
END
$fn$
"""

# 0022's definition, for the downgrade.
COUNTING_ROOM = """
CREATE OR REPLACE FUNCTION {s}.workerpool_queue_room(queue text, adding integer,
  max_pending integer)
RETURNS integer LANGUAGE plpgsql SET search_path = {s}, pg_temp AS $fn$
DECLARE
  q text := workerpool_queue_room.queue;
  bound integer := workerpool_queue_room.max_pending;
BEGIN
  RETURN bound - {waiting} - workerpool_queue_room.adding;
END
$fn$
"""


def _schema() -> str:
    bind = op.get_bind()
    return bind.execute(text("SELECT quote_ident(current_schema())")).scalar_one()


def _function(body: str) -> str:
    s = _schema()
    return body.format(s=s, waiting=WAITING.format(s=s))


def upgrade() -> None:
    op.create_table(
        "workerpool_queue_credits",
        sa.Column("queue", sa.Text(), nullable=False),
        sa.Column("max_pending", sa.Integer(), nullable=False),
        sa.Column("credit", sa.Integer(), nullable=False),
        sa.Column(
            "counted_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("queue", name=op.f("pk_workerpool_queue_credits")),
    )
    op.execute(text(_function(QUEUE_ROOM)))
    op.execute(text(_function(QUEUE_TAKE)))
    op.execute(
        f"REVOKE ALL ON FUNCTION {_schema()}.workerpool_queue_take(text, integer, integer)"
        " FROM PUBLIC"
    )


def downgrade() -> None:
    op.execute(f"DROP FUNCTION {_schema()}.workerpool_queue_take(text, integer, integer)")
    op.execute(text(_function(COUNTING_ROOM)))
    op.drop_table("workerpool_queue_credits")
