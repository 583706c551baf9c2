"""the jobs table's json rules as domains: checked when a value is written, not on every UPDATE

Revision ID: 0024
Revises: 0023
Create Date: 2026-12-07 15:00:00.000000

PostgreSQL evaluates a table's CHECK constraints on every UPDATE of a row, whatever the UPDATE
sets. So every claim, outcome write and lease renewal read the payload back (detoasted when it
was large), wrote it out as text to measure it, and did the same for the error history and the
steps: with a 16 kB payload, a third of the server's CPU per job. A domain's CHECK runs when
a value is written to a column of its type, and not when an UPDATE carries the old value over.
So ``payload``, ``result``, ``errors`` and ``steps`` become domains over jsonb holding their old
rules, and the five CHECKs go.

The domains are created bare and the columns moved to them first: a domain without a
constraint is binary-compatible with jsonb, so ``ALTER COLUMN ... TYPE`` rewrites nothing (with
a constraint it would rewrite the table). The rules are then added ``NOT VALID``: every row
already met them (the CHECKs being dropped in the same transaction held them), and validating
a domain's constraint holds a SHARE lock on the table (no enqueue) for a scan of every row.

Locks: ACCESS EXCLUSIVE on workerpool_jobs for one catalog change (no rewrite, no scan).
"""

from collections.abc import Sequence

from alembic import op
from sqlalchemy import text

revision: str = "0024"
down_revision: str | Sequence[str] | None = "0023"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

LIMIT = 1024 * 1024  # model.payload.PAYLOAD_HARD_LIMIT when this was written

#: column -> (domain, {constraint of the domain: its rule on VALUE}, the table's CHECKs it
#: replaces as {name: rule on the column}).
DOMAINS = {
    "payload": (
        "workerpool_payload",
        {
            "ck_workerpool_payload_object": "jsonb_typeof(VALUE) = 'object'",
            "ck_workerpool_payload_size": f"octet_length(VALUE::text) <= {LIMIT}",
        },
        {
            "ck_workerpool_jobs_payload_object": "jsonb_typeof(payload) = 'object'",
            "ck_workerpool_jobs_payload_size": f"octet_length(payload::text) <= {LIMIT}",
        },
    ),
    "result": (
        "workerpool_result",
        {"ck_workerpool_result_size": f"octet_length(VALUE::text) <= {LIMIT}"},
        {"ck_workerpool_jobs_result_size": f"octet_length(result::text) <= {LIMIT}"},
    ),
    "errors": (
        "workerpool_errors",
        {"ck_workerpool_errors_array": "jsonb_typeof(VALUE) = 'array'"},
        {"ck_workerpool_jobs_errors_array": "jsonb_typeof(errors) = 'array'"},
    ),
    "steps": (
        "workerpool_steps",
        {"ck_workerpool_steps_object": "jsonb_typeof(VALUE) = 'object'"},
        {"ck_workerpool_jobs_steps_object": "jsonb_typeof(steps) = 'object'"},
    ),
}


def _schema() -> str:
    bind = op.get_bind()
    return bind.execute(text("SELECT quote_ident(current_schema())")).scalar_one()


def upgrade() -> None:
    s = _schema()
    changes = []
    for column, (domain, _, checks) in DOMAINS.items():
        op.execute(f"CREATE DOMAIN {s}.{domain} AS jsonb")
        changes += [f"DROP CONSTRAINT {name}" for name in checks]
        changes.append(f"ALTER COLUMN {column} TYPE {s}.{domain}")
    op.execute(f"ALTER TABLE {s}.workerpool_jobs {', '.join(changes)}")
    for domain, rules, _ in DOMAINS.values():
        for name, rule in rules.items():
            op.execute(f"ALTER DOMAIN {s}.{domain} ADD CONSTRAINT {name} CHECK ({rule}) NOT VALID")


def downgrade() -> None:
    s = _schema()
    changes = []
    for column, (_, _, checks) in DOMAINS.items():
        changes.append(f"ALTER COLUMN {column} TYPE jsonb")
        changes += [f"ADD CONSTRAINT {name} CHECK ({rule}) NOT VALID" for name, rule in checks.items()]
    op.execute(f"ALTER TABLE {s}.workerpool_jobs {', '.join(changes)}")
    for _, _, checks in DOMAINS.values():
        for name in checks:
            op.execute(f"ALTER TABLE {s}.workerpool_jobs VALIDATE CONSTRAINT {name}")
    for domain, _, _ in DOMAINS.values():
        op.execute(f"DROP DOMAIN {s}.{domain}")
