"""A private database per benchmark run: created with a random name, migrated, dropped at the end.

The setup statements here (truncate, bulk-load finished rows, VACUUM) are benchmark scaffolding,
not job-state changes: the library's own SQL stays in ``workerpool.sql``.
"""

from __future__ import annotations

import logging
import os
import secrets
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Any

import psycopg
from sqlalchemy.engine import URL, make_url

from workerpool.client import database_url
from workerpool.migrate import upgrade
from workerpool.sql import db
from workerpool.sql.history import union


def every_job(columns: str, where: str = "true", alias: str = "j") -> str:
    """A FROM item of ``columns`` of every job, the jobs table and the history together (the
    maintenance child moves finished jobs to the history a minute after they end)."""
    return f"{union(columns, where)} AS {alias}"


log = logging.getLogger("workerpool.bench")

NAME_PREFIX = "wp_bench_"


def libpq(url: URL) -> str:
    """A libpq connection string for raw psycopg (the password stays inside; never print it)."""
    return url.set(drivername="postgresql").render_as_string(hide_password=False)


class BenchDatabase:
    """``with BenchDatabase(server_url) as bench_db:`` — a fresh migrated database, then dropped."""

    def __init__(self, server_url: URL, keep: str | None = None) -> None:
        self.server_url = server_url
        self.keep = keep is not None  # a named database is kept (and reused) after the run
        self.name = keep or f"{NAME_PREFIX}{secrets.token_hex(5)}"
        self.url = server_url.set(database=self.name)
        self.dsn = libpq(self.url)
        self._conn: psycopg.Connection | None = None

    def __enter__(self) -> BenchDatabase:
        with self._admin() as admin:
            exists = admin.execute(
                "SELECT 1 FROM pg_database WHERE datname = %s", (self.name,)
            ).fetchone()
            if not exists:
                admin.execute(f'CREATE DATABASE "{self.name}"')
        log.info(
            "%s %s",
            "using" if exists else "created",
            self.name,
            extra={"event": "bench_db_created"},
        )
        try:
            upgrade(self.url)
        except BaseException:
            self.drop()
            raise
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.drop()

    def drop(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        if self.keep:
            log.info("kept %s", self.name)
            return
        with self._admin() as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')
        log.info("dropped %s", self.name, extra={"event": "bench_db_dropped"})

    def _admin(self) -> psycopg.Connection:
        admin_db = self.server_url.database or "postgres"
        return psycopg.connect(libpq(self.server_url.set(database=admin_db)), autocommit=True)

    # -- statements on the bench database (autocommit) -------------------------------------------

    def sql(self, statement: str, params: Any = None) -> list[tuple]:
        if self._conn is None or self._conn.closed:
            self._conn = psycopg.connect(self.dsn, autocommit=True)
        cur = self._conn.execute(statement, params)
        return cur.fetchall() if cur.description else []

    def reset(self) -> None:
        """An empty jobs table and no registered workers, statistics refreshed."""
        self.sql(
            "TRUNCATE workerpool_jobs, workerpool_jobs_history, workerpool_job_logs,"
            " workerpool_workers"
        )
        self.vacuum()

    def vacuum(self) -> None:
        self.sql("VACUUM ANALYZE workerpool_jobs")

    def load_finished(self, queue: str, task: str, count: int) -> None:
        """``count`` rows already ``done`` (history a long-running system accumulates)."""
        self.sql(
            "INSERT INTO workerpool_jobs (queue, task, state, attempts, claimed_by, claimed_at,"
            " finished_at) SELECT %s, %s, 'done', 1, 'bench:history', now(), now()"
            " FROM generate_series(1, %s)",
            (queue, task, count),
        )

    def load_pending(self, queue: str, task: str, count: int) -> None:
        """``count`` due rows inserted server-side (for the scale figure's backlog)."""
        self.sql(
            "INSERT INTO workerpool_jobs (queue, task, payload)"
            " SELECT %s, %s, jsonb_build_object('i', i) FROM generate_series(1, %s) AS i",
            (queue, task, count),
        )

    def drain_window(self) -> tuple[int, float]:
        """``(done rows, seconds from the first claim to the last completion)``, database clock."""
        count, seconds = self.sql(
            "SELECT count(*), extract(epoch FROM max(finished_at) - min(claimed_at))::float8"
            " FROM " + every_job("finished_at, claimed_at", "state = 'done'")
        )[0]
        return count, seconds or 0.0

    def live_jobs(self) -> int:
        """Rows not yet finished (served by the claim's partial indexes, cheap to poll)."""
        return self.sql(
            "SELECT (SELECT count(*) FROM workerpool_jobs WHERE state IN ('pending', 'failed'))"
            " + (SELECT count(*) FROM workerpool_jobs WHERE state = 'processing')"
            " + (SELECT count(*) FROM workerpool_jobs WHERE state = 'waiting')"
        )[0][0]

    def server_facts(self) -> dict[str, str]:
        names = ("server_version", "shared_buffers", "synchronous_commit", "fsync", "max_wal_size")
        rows = self.sql(
            "SELECT name, setting || coalesce(unit, '') FROM pg_settings WHERE name = ANY(%s)",
            (list(names),),
        )
        facts = dict(rows)
        facts["server_version"] = self.sql("SHOW server_version")[0][0]
        return facts


@contextmanager
def scratch_embedded_server() -> Iterator[URL]:
    """A private embedded PostgreSQL (pgserver) in a temporary directory, removed afterwards.

    Its autovacuum is PostgreSQL's default (on), unlike a server an operator turned it off on.
    """
    import pgserver

    with tempfile.TemporaryDirectory(prefix="wp-bench-pg-") as data:
        os.chmod(data, 0o755)  # run as root, pgserver's own user must reach its data directory
        server = pgserver.get_server(Path(data) / "pgdata", cleanup_mode="stop")
        try:
            yield db.normalise(make_url(server.get_uri()))
        finally:
            server.cleanup()


def server_url(raw: str | None) -> URL:
    """The server to benchmark: ``--url``, else ``$WORKERPOOL_DATABASE_URL``, else embedded."""
    return database_url(raw)
