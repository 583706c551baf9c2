"""owner functions: the DDL and deletes the runtime needs, run with the tables' owner's rights

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-22 12:00:00.000000

The maintenance child creates and drops the history's partitions, and prunes the audit trail.
Under the least-privilege worker role (docs/roles.md) it may do neither directly: creating a
table needs ``CREATE`` on the schema, attaching or dropping a partition needs to own the
history, and the audit trail is append-only to that role. These functions are owned by the
migrating role (the owner) and run with its rights (``SECURITY DEFINER``), each doing one narrow
thing with its arguments checked; ``EXECUTE`` is revoked from PUBLIC (``workerpool roles`` grants
it to the worker group). Their ``search_path`` is fixed to the schema (``pg_temp`` last), so a
caller's temporary tables cannot stand in for workerpool's.

Locks: none beyond the catalog rows of three new functions.
"""
from collections.abc import Sequence

from alembic import op
from sqlalchemy import text

revision: str = '0017'
down_revision: str | Sequence[str] | None = '0016'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

CREATE_PARTITION = """
CREATE FUNCTION {s}.workerpool_history_create_partition(low timestamptz, high timestamptz)
RETURNS text LANGUAGE plpgsql SECURITY DEFINER SET search_path = {s}, pg_temp AS $fn$
DECLARE
  day timestamp := low AT TIME ZONE 'UTC';
  part text := 'workerpool_jobs_history_p' || to_char(day, 'YYYYMMDD');
BEGIN
  IF low IS NULL OR high IS NULL OR high <= low OR day <> date_trunc('day', day)
     OR high > low + interval '366 days' THEN
    RAISE EXCEPTION 'history partition bounds % to % are not whole UTC days', low, high
      USING ERRCODE = '22023';
  END IF;
  EXECUTE format('CREATE TABLE %I.%I (LIKE %I.workerpool_jobs_history)', {q}, part, {q});
  EXECUTE format('ALTER TABLE %I.workerpool_jobs_history ATTACH PARTITION %I.%I'
                 ' FOR VALUES FROM (%L) TO (%L)', {q}, {q}, part, low, high);
  RETURN part;
END
$fn$
"""

DROP_PARTITION = """
CREATE FUNCTION {s}.workerpool_history_drop_partition(part text)
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path = {s}, pg_temp AS $fn$
BEGIN
  IF NOT EXISTS (
      SELECT FROM pg_inherits AS i JOIN pg_class AS c ON c.oid = i.inhrelid
      WHERE i.inhparent = to_regclass(format('%I.workerpool_jobs_history', {q}))
        AND c.relname = part) THEN
    RAISE EXCEPTION '% is not a partition of workerpool_jobs_history', part
      USING ERRCODE = '42P01';
  END IF;
  EXECUTE format('DROP TABLE %I.%I', {q}, part);
END
$fn$
"""

# An hour at the least: whoever may call it can erase old entries, never the last hour's.
PRUNE_AUDIT = """
CREATE FUNCTION {s}.workerpool_prune_audit(older_than double precision, max_rows integer)
RETURNS bigint LANGUAGE sql SECURITY DEFINER SET search_path = {s}, pg_temp AS $fn$
  WITH gone AS (
    DELETE FROM {s}.workerpool_audit WHERE id IN (
      SELECT id FROM {s}.workerpool_audit
      WHERE at < now() - make_interval(secs => greatest(older_than, 3600))
      LIMIT greatest(max_rows, 0))
    RETURNING 1)
  SELECT count(*) FROM gone
$fn$
"""

SIGNATURES = (
    "workerpool_history_create_partition(timestamptz, timestamptz)",
    "workerpool_history_drop_partition(text)",
    "workerpool_prune_audit(double precision, integer)",
)


def _schema() -> tuple[str, str]:
    """The schema the tables are in, as an identifier and as a literal."""
    bind = op.get_bind()
    name = bind.execute(text("SELECT current_schema()")).scalar_one()
    ident = bind.execute(text("SELECT quote_ident(:n)"), {"n": name}).scalar_one()
    literal = bind.execute(text("SELECT quote_literal(:n)"), {"n": name}).scalar_one()
    return ident, literal


def upgrade() -> None:
    ident, literal = _schema()
    for body in (CREATE_PARTITION, DROP_PARTITION, PRUNE_AUDIT):
        op.execute(text(body.format(s=ident, q=literal)))
    for signature in SIGNATURES:
        op.execute(f"REVOKE ALL ON FUNCTION {ident}.{signature} FROM PUBLIC")


def downgrade() -> None:
    ident, _ = _schema()
    for signature in SIGNATURES:
        op.execute(f"DROP FUNCTION {ident}.{signature}")
