"""The ledger: what every execution did, written by the handlers outside workerpool's own SQL.

Each execution writes a row to ``chaos_exec`` when it starts (job, attempt, worker, pid) and
again when it ends (outcome), and samples its own lease into ``chaos_probe``: *valid* means the
jobs table says, at that statement's time, that this worker holds this attempt's lease and it is
not stale. Each run of a durable step's work is a row in ``chaos_step`` (a step must never run
again once its job recorded it finished). The "external effect" is a row in ``chaos_effect``
keyed by the job's idempotency key (``ON CONFLICT DO NOTHING``: a re-run after a crash finds it
there). Ledger rows are written on a connection of their own in autocommit, so they survive the
job's rollback and any kill; all but one: a ``once`` job's effect, a row in ``chaos_once`` with
no key to absorb a repeat, is written by the handler in the transaction that ends its job
(``job.complete_in``), so it must be there exactly once for a done job and never for another.

Times are ``statement_timestamp()`` (the database clock): a probe's time is never later than the
snapshot it judged the lease in, so a probe that saw a lease valid happened before any re-claim
it did not see."""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import psycopg
from sqlalchemy.engine import URL

from ..sql import db

DDL = """
CREATE TABLE IF NOT EXISTS chaos_exec (
    exec_id text PRIMARY KEY, job_id bigint NOT NULL, kind text NOT NULL, attempt int NOT NULL,
    worker text NOT NULL, pid int NOT NULL, tick text,
    started_at timestamptz NOT NULL, finished_at timestamptz, outcome text);
CREATE INDEX IF NOT EXISTS chaos_exec_job ON chaos_exec (job_id);
CREATE TABLE IF NOT EXISTS chaos_probe (
    exec_id text NOT NULL, at timestamptz NOT NULL, valid boolean NOT NULL);
CREATE INDEX IF NOT EXISTS chaos_probe_exec ON chaos_probe (exec_id);
CREATE TABLE IF NOT EXISTS chaos_effect (
    key text PRIMARY KEY, job_id bigint NOT NULL, exec_id text NOT NULL, at timestamptz NOT NULL);
CREATE TABLE IF NOT EXISTS chaos_business (
    key text PRIMARY KEY, at timestamptz NOT NULL DEFAULT now());
CREATE TABLE IF NOT EXISTS chaos_step (
    job_id bigint NOT NULL, step text NOT NULL, exec_id text NOT NULL, at timestamptz NOT NULL);
CREATE INDEX IF NOT EXISTS chaos_step_job ON chaos_step (job_id);
CREATE TABLE IF NOT EXISTS chaos_once (
    job_id bigint NOT NULL, attempt int NOT NULL, exec_id text NOT NULL,
    at timestamptz NOT NULL DEFAULT statement_timestamp());
CREATE INDEX IF NOT EXISTS chaos_once_job ON chaos_once (job_id);
CREATE TABLE IF NOT EXISTS chaos_callback (
    exec_id text PRIMARY KEY, job_id bigint NOT NULL, batch_id bigint NOT NULL,
    live int NOT NULL, at timestamptz NOT NULL);
"""

PROBE = """
INSERT INTO chaos_probe (exec_id, at, valid)
SELECT %(exec)s, statement_timestamp(), EXISTS (
    SELECT 1 FROM workerpool_jobs
    WHERE id = %(job)s AND state = 'processing' AND claimed_by = %(worker)s
      AND attempts = %(attempt)s
      AND claimed_at > statement_timestamp() - make_interval(secs => %(stale)s))
RETURNING valid
"""
START = """
INSERT INTO chaos_exec (exec_id, job_id, kind, attempt, worker, pid, tick, started_at)
VALUES (%(exec)s, %(job)s, %(kind)s, %(attempt)s, %(worker)s, %(pid)s, %(tick)s,
        statement_timestamp())
ON CONFLICT (exec_id) DO NOTHING
"""
FINISH = """
UPDATE chaos_exec SET finished_at = statement_timestamp(), outcome = %(outcome)s
WHERE exec_id = %(exec)s
"""
#: A batch's callback as it starts: how many members of its batch were still live (the
#: callbacks themselves left out), on the database's clock.
CALLBACK = """
INSERT INTO chaos_callback (exec_id, job_id, batch_id, live, at)
SELECT %(exec)s, %(job)s, %(batch)s, count(*), statement_timestamp()
FROM workerpool_jobs
WHERE batch_id = %(batch)s AND state IN ('pending', 'processing', 'failed')
  AND NOT id = ANY(COALESCE((SELECT callback_ids FROM workerpool_batches WHERE id = %(batch)s),
                            '{}'))
ON CONFLICT (exec_id) DO NOTHING
"""
#: One run of a durable step's work (``job.step``'s function), before the step is recorded.
STEP = """
INSERT INTO chaos_step (job_id, step, exec_id, at)
VALUES (%(job)s, %(step)s, %(exec)s, statement_timestamp())
"""
#: A ``once`` job's effect, written in the job's own transaction (``job.complete_in``): no
#: key, so a repeat would be a second row.
ONCE = """
INSERT INTO chaos_once (job_id, attempt, exec_id) VALUES (:job, :attempt, :exec)
"""
EFFECT = """
INSERT INTO chaos_effect (key, job_id, exec_id, at)
VALUES (%(key)s, %(job)s, %(exec)s, statement_timestamp())
ON CONFLICT (key) DO NOTHING
"""

#: The URL the handlers' ledger connects to, straight to the server: the workers' own URL may
#: go through the blackhole proxy, and a ledger write stuck forever would hide the fault.
LEDGER_URL_ENV = "WORKERPOOL_CHAOS_LEDGER_URL"
#: Seconds a ledger write keeps retrying through a database restart or failover; after that
#: the handler raises and the job is retried like any failed job.
RETRY_FOR = 30.0


def connect_kwargs(url: URL) -> dict[str, Any]:
    return {**db.connect_kwargs(url), "connect_timeout": 3}


class Ledger:
    """One autocommit connection per thread and process; every write retried across outages."""

    def __init__(self, url: URL) -> None:
        self.kwargs = connect_kwargs(url)
        self._local = threading.local()

    def _conn(self) -> psycopg.Connection:
        held = getattr(self._local, "conn", None)
        if held is not None and held[0] == os.getpid() and not held[1].closed:
            return held[1]
        conn = psycopg.connect(autocommit=True, application_name="chaos ledger", **self.kwargs)
        self._local.conn = (os.getpid(), conn)
        return conn

    def execute(self, statement: str, params: dict[str, Any]) -> Any:
        deadline = time.monotonic() + RETRY_FOR
        while True:
            try:
                cursor = self._conn().execute(statement, params)  # type: ignore[arg-type]
                return cursor.fetchone() if cursor.description else None
            except psycopg.OperationalError:
                self._drop()
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def _drop(self) -> None:
        held = getattr(self._local, "conn", None)
        self._local.conn = None
        if held is not None:
            try:
                held[1].close()
            except Exception:  # a broken connection may fail to close; it is gone either way
                pass


def create_tables(conn: psycopg.Connection) -> None:
    conn.execute(DDL)  # type: ignore[arg-type]
