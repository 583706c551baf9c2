"""doors in: workerpool_enqueue() for SQL and triggers, the registered tasks, bounded queues

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-06 20:00:00.000000

``workerpool_tasks`` holds each task as its workers registered it (queue, defaults, accepted
arguments), so SQL and HTTP can enqueue without the application's code;
``workerpool_queue_bounds`` holds each bounded queue's ``max_pending``.

``workerpool_queue_room(queue, adding, max_pending)`` is the one definition of "full": it
counts the queue's jobs waiting to run (pending, failed, waiting), reading at most
``max_pending`` index entries of each state's index, and returns the room left once ``adding``
more are in (below zero: they do not fit). It raises nothing, so Python's check leaves a
caller's transaction usable.

``workerpool_enqueue(task, payload, queue =>, key =>, run_at =>, priority =>, max_attempts =>,
tags =>)`` (its checks in ``workerpool_enqueue_check``) checks what Python's enqueue checks, inserts the job in the
caller's transaction (so in a trigger the job exists if and only if the row change commits)
and sends the workers' NOTIFY. Its errors carry a SQLSTATE a client can act on: WP001 queue
full, WP002 unknown task, WP003 key held by another job, 22023 a bad argument.

They run with the caller's rights (the caller needs the worker role's table privileges);
EXECUTE is revoked from PUBLIC and ``workerpool roles`` grants it to the worker group.

Locks: none beyond the catalog rows of two new tables and three new functions.
"""
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy import text
from sqlalchemy.dialects import postgresql

revision: str = '0022'
down_revision: str | Sequence[str] | None = '0021'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Waiting to run: due (pending, failed) or held back (waiting); each walk stops at the bound,
# on ix_workerpool_jobs_due and ix_workerpool_jobs_waiting.
QUEUE_ROOM = """
CREATE FUNCTION {s}.workerpool_queue_room(queue text, adding integer, max_pending integer)
RETURNS integer LANGUAGE plpgsql SET search_path = {s}, pg_temp AS $fn$
#variable_conflict use_column
DECLARE
  waiting integer;
BEGIN
  SELECT (SELECT count(*) FROM (
            SELECT 1 FROM {s}.workerpool_jobs AS j
            WHERE j.queue = workerpool_queue_room.queue AND j.state IN ('pending', 'failed')
            LIMIT workerpool_queue_room.max_pending) AS due)
       + (SELECT count(*) FROM (
            SELECT 1 FROM {s}.workerpool_jobs AS j
            WHERE j.queue = workerpool_queue_room.queue AND j.state = 'waiting'
            LIMIT workerpool_queue_room.max_pending) AS held)
    INTO waiting;
  RETURN workerpool_queue_room.max_pending - waiting - adding;
END
$fn$
"""

ENQUEUE = """
CREATE FUNCTION {s}.workerpool_enqueue(
  task text, payload jsonb DEFAULT '{{}}', queue text DEFAULT NULL, key text DEFAULT NULL,
  run_at timestamptz DEFAULT NULL, priority integer DEFAULT NULL,
  max_attempts integer DEFAULT NULL, tags text[] DEFAULT NULL)
RETURNS bigint LANGUAGE plpgsql SET search_path = {s}, pg_temp AS $fn$
#variable_conflict use_column
DECLARE
  t {s}.workerpool_tasks;
  args jsonb := coalesce(workerpool_enqueue.payload, '{{}}');
  bound integer;
  new_id bigint;
  holder record;
BEGIN
  SELECT * INTO t FROM {s}.workerpool_tasks AS r WHERE r.task = workerpool_enqueue.task;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'unknown task %: no worker has registered it (workerpool run registers '
      'its tasks; pool.register_tasks() does it from code)', quote_literal(workerpool_enqueue.task)
      USING ERRCODE = 'WP002';
  END IF;
  PERFORM {s}.workerpool_enqueue_check(t.task, t.queue, t.payload_limit, t.params, args,
    workerpool_enqueue.queue, workerpool_enqueue.key, workerpool_enqueue.priority,
    workerpool_enqueue.max_attempts, workerpool_enqueue.tags);
  SELECT b.max_pending INTO bound FROM {s}.workerpool_queue_bounds AS b WHERE b.queue = t.queue;
  IF FOUND AND {s}.workerpool_queue_room(t.queue, 1, bound) < 0 THEN
    RAISE EXCEPTION 'queue % is full: it holds its bound of % jobs waiting to run', t.queue, bound
      USING ERRCODE = 'WP001';
  END IF;
  INSERT INTO {s}.workerpool_jobs AS j
    (queue, task, payload, payload_version, priority, max_attempts, key, run_at, tags)
  VALUES (t.queue, t.task, args, t.payload_version,
          coalesce(workerpool_enqueue.priority, t.priority),
          coalesce(workerpool_enqueue.max_attempts, t.max_attempts), workerpool_enqueue.key,
          coalesce(workerpool_enqueue.run_at, now()), workerpool_enqueue.tags)
  ON CONFLICT (key) WHERE {key_held} DO NOTHING
  RETURNING j.id INTO new_id;
  IF new_id IS NULL THEN
    SELECT j.id, j.task, j.payload INTO holder FROM {s}.workerpool_jobs AS j
    WHERE j.key = workerpool_enqueue.key AND {key_held_j};
    IF holder.id IS NULL OR holder.task <> t.task OR holder.payload <> args THEN
      RAISE EXCEPTION 'key % already belongs to job % (%) with a different payload',
        quote_literal(workerpool_enqueue.key), holder.id, holder.task
        USING ERRCODE = 'WP003';
    END IF;
    RETURN holder.id;
  END IF;
  PERFORM pg_notify('workerpool_jobs', t.queue);
  RETURN new_id;
END
$fn$
"""

# The checks of Python's enqueue (workerpool.model.new_job), each with one readable line.
CHECK = """
CREATE FUNCTION {s}.workerpool_enqueue_check(
  task text, task_queue text, payload_limit integer, params jsonb, args jsonb, queue text,
  key text, priority integer, max_attempts integer, tags text[])
RETURNS void LANGUAGE plpgsql SET search_path = {s}, pg_temp AS $fn$
DECLARE
  missing text[];
  unknown text[];
BEGIN
  IF queue IS NOT NULL AND queue <> task_queue THEN
    RAISE EXCEPTION 'task % runs on queue %, not %', task, quote_literal(task_queue),
      quote_literal(queue) USING ERRCODE = '22023';
  END IF;
  IF jsonb_typeof(args) <> 'object' THEN
    RAISE EXCEPTION 'payload must be a JSON object, got %', jsonb_typeof(args)
      USING ERRCODE = '22023';
  END IF;
  IF octet_length(args::text) > payload_limit THEN
    RAISE EXCEPTION 'payload is % bytes, over the limit of % bytes',
      octet_length(args::text), payload_limit USING ERRCODE = '22023';
  END IF;
  IF key IS NOT NULL AND (btrim(key) = '' OR length(key) > 255) THEN
    RAISE EXCEPTION 'key must be a non-empty string of at most 255 characters'
      USING ERRCODE = '22023';
  END IF;
  IF priority IS NOT NULL AND priority NOT BETWEEN -32768 AND 32767 THEN
    RAISE EXCEPTION 'priority must be within -32768..32767, got %', priority
      USING ERRCODE = '22023';
  END IF;
  IF max_attempts IS NOT NULL AND max_attempts NOT BETWEEN 1 AND 1000 THEN
    RAISE EXCEPTION 'max_attempts must be within 1..1000, got %', max_attempts
      USING ERRCODE = '22023';
  END IF;
  IF tags IS NOT NULL AND (cardinality(tags) NOT BETWEEN 1 AND 20 OR EXISTS (
      SELECT FROM unnest(tags) AS tag
      WHERE tag IS NULL OR btrim(tag) = '' OR length(tag) > 100 OR tag ~ '[[:cntrl:]]')) THEN
    RAISE EXCEPTION 'tags must hold 1..20 non-empty printable tags of at most 100 characters'
      USING ERRCODE = '22023';
  END IF;
  IF params IS NULL THEN
    RETURN;
  END IF;
  SELECT array_agg(name ORDER BY name) INTO missing
  FROM jsonb_array_elements_text(params -> 'required') AS name WHERE NOT args ? name;
  IF missing IS NOT NULL THEN
    RAISE EXCEPTION 'task % needs argument(s) %', task, array_to_string(missing, ', ')
      USING ERRCODE = '22023';
  END IF;
  IF jsonb_typeof(params -> 'accepted') = 'array' THEN
    SELECT array_agg(name ORDER BY name) INTO unknown FROM jsonb_object_keys(args) AS name
    WHERE NOT (params -> 'accepted') ? name;
    IF unknown IS NOT NULL THEN
      RAISE EXCEPTION 'task % takes no argument(s) %', task, array_to_string(unknown, ', ')
        USING ERRCODE = '22023';
    END IF;
  END IF;
END
$fn$
"""

SIGNATURES = (
    "workerpool_queue_room(text, integer, integer)",
    "workerpool_enqueue_check(text, text, integer, jsonb, jsonb, text, text, integer, integer,"
    " text[])",
    "workerpool_enqueue(text, jsonb, text, text, timestamptz, integer, integer, text[])",
)

# The partial index of held keys (workerpool.sql.schema.KEY_HELD), its columns qualified.
KEY_HELD = (
    "key IS NOT NULL AND (key_scope IS NULL OR key_scope = 'for' OR "
    "(key_scope = 'live' AND state IN ('pending', 'processing', 'failed', 'waiting')))"
)


def _schema() -> tuple[str, str]:
    """The schema the tables are in, as an identifier and as a literal."""
    bind = op.get_bind()
    name = bind.execute(text("SELECT current_schema()")).scalar_one()
    ident = bind.execute(text("SELECT quote_ident(:n)"), {"n": name}).scalar_one()
    literal = bind.execute(text("SELECT quote_literal(:n)"), {"n": name}).scalar_one()
    return ident, literal


def upgrade() -> None:
    op.create_table(
        'workerpool_tasks',
        sa.Column('task', sa.Text(), nullable=False),
        sa.Column('queue', sa.Text(), nullable=False),
        sa.Column('max_attempts', sa.Integer(), nullable=False),
        sa.Column('priority', sa.SmallInteger(), nullable=False),
        sa.Column('payload_version', sa.Integer(), nullable=False),
        sa.Column('payload_limit', sa.Integer(), nullable=False),
        sa.Column('params', postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column(
            'registered_at', sa.DateTime(timezone=True), server_default=sa.text('now()'),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint('task', name=op.f('pk_workerpool_tasks')),
    )
    op.create_table(
        'workerpool_queue_bounds',
        sa.Column('queue', sa.Text(), nullable=False),
        sa.Column('max_pending', sa.Integer(), nullable=False),
        sa.Column(
            'set_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False
        ),
        sa.Column('set_by', sa.Text(), nullable=True),
        sa.CheckConstraint(
            'max_pending > 0', name=op.f('ck_workerpool_queue_bounds_max_pending')
        ),
        sa.PrimaryKeyConstraint('queue', name=op.f('pk_workerpool_queue_bounds')),
    )
    ident, _ = _schema()
    key_held_j = KEY_HELD.replace("key IS", "j.key IS").replace("key_scope", "j.key_scope")
    key_held_j = key_held_j.replace("state IN", "j.state IN")
    for body in (QUEUE_ROOM, CHECK, ENQUEUE):
        op.execute(text(body.format(s=ident, key_held=KEY_HELD, key_held_j=key_held_j)))
    for signature in SIGNATURES:
        op.execute(f"REVOKE ALL ON FUNCTION {ident}.{signature} FROM PUBLIC")


def downgrade() -> None:
    ident, _ = _schema()
    for signature in reversed(SIGNATURES):
        op.execute(f"DROP FUNCTION {ident}.{signature}")
    op.drop_table('workerpool_queue_bounds')
    op.drop_table('workerpool_tasks')
