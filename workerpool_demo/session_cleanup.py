"""An hourly session cleanup as a cron job: a TTL sweep of expired sessions, tokens, audit rows.

Run it on its own::

    export WORKERPOOL_DATABASE_URL=postgresql://app@db/app
    workerpool migrate
    workerpool run workerpool_demo.session_cleanup:pool   # one run an hour, across replicas

or attach it to an application's pool::

    from workerpool_demo import session_cleanup
    session_cleanup.register(pool, queue="housekeeping")

The sweep deletes in small batches (each its own short transaction, ``SKIP LOCKED`` so it never
waits on rows the application is using), records its progress with ``job.checkpoint`` so a run
interrupted by a deploy resumes at the table it was on, and never overlaps itself: a run still
going at the next hour makes that tick a counted skip (``workerpool status`` shows it).
"""

from __future__ import annotations

import logging
import os
from datetime import timedelta
from typing import Any

from sqlalchemy import (
    BigInteger,
    Column,
    DateTime,
    Engine,
    Identity,
    MetaData,
    Table,
    Text,
    bindparam,
    delete,
    func,
    select,
)

from workerpool import Job, WorkerPool

log = logging.getLogger(__name__)

SCHEDULE = os.environ.get("SESSION_CLEANUP_SCHEDULE", "0 * * * *")  # hourly, on the hour
AUDIT_RETENTION = timedelta(days=90)
BATCH = 1000

metadata = MetaData()
TZ = DateTime(timezone=True)
sessions = Table(
    "example_sessions",
    metadata,
    Column("id", BigInteger, Identity(), primary_key=True),
    Column("user_id", BigInteger, nullable=False),
    Column("expires_at", TZ, nullable=False, index=True),
)
api_tokens = Table(
    "example_api_tokens",
    metadata,
    Column("id", BigInteger, Identity(), primary_key=True),
    Column("user_id", BigInteger, nullable=False),
    Column("token_hash", Text, nullable=False),
    Column("expires_at", TZ, nullable=False, index=True),
)
audit_log = Table(
    "example_audit_log",
    metadata,
    Column("id", BigInteger, Identity(), primary_key=True),
    Column("at", TZ, nullable=False, server_default=func.now(), index=True),
    Column("event", Text, nullable=False),
)


def create_tables(engine: Engine) -> None:
    """The example's own tables, created if missing (an application has its own migrations)."""
    metadata.create_all(engine, checkfirst=True)


def expired_rows() -> dict[str, tuple[Table, Any]]:
    """What the sweep removes, in order: table name → (table, condition on the database clock)."""
    retention = bindparam("retention", AUDIT_RETENTION)
    return {
        "sessions": (sessions, sessions.c.expires_at < func.now()),
        "api_tokens": (api_tokens, api_tokens.c.expires_at < func.now()),
        "audit_log": (audit_log, audit_log.c.at < func.now() - retention),
    }


def sweep_table(engine: Engine, table: Table, expired: Any, batch: int = BATCH) -> int:
    """Delete expired rows ``batch`` at a time; returns how many went."""
    total = 0
    while True:
        doomed = (
            select(table.c.id)
            .where(expired)
            .limit(batch)
            .with_for_update(skip_locked=True)
            .scalar_subquery()
        )
        with engine.begin() as conn:
            deleted = conn.execute(delete(table).where(table.c.id.in_(doomed))).rowcount
        total += deleted
        if deleted < batch:
            return total


def register(pool: WorkerPool, *, queue: str = "housekeeping", schedule: str = SCHEDULE) -> None:
    """Add the sweep to ``pool`` as the cron job ``session_cleanup`` on ``queue``."""

    @pool.cron(
        schedule,
        queue=queue,
        name="session_cleanup",
        overlap="skip",
        missed="run_once",
        max_attempts=3,
        timeout=15 * 60,
    )
    def session_cleanup(job: Job) -> None:
        create_tables(pool.engine)
        progress = dict(job.checkpoint_data or {"done": {}})
        for name, (table, expired) in expired_rows().items():
            if name in progress["done"]:
                continue  # finished by an earlier, interrupted attempt
            progress["done"][name] = sweep_table(pool.engine, table, expired)
            job.checkpoint(progress)
        log.info(
            "session cleanup for tick %s: %s",
            job.payload.get("tick"),
            progress["done"],
            extra={"event": "session_cleanup_done", **progress["done"]},
        )


pool = WorkerPool()
pool.queue("housekeeping", concurrency=1)
register(pool)
