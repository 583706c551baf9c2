"""`workerpool roles --print-sql` on real PostgreSQL: everything works under the three roles.

The script (run through psql, as a DBA would) creates the group roles on an empty database; a
login role in the owner group migrates; the script runs again and grants on the new tables.
Then a real supervisor and the CLI run as a login role in the worker group, `status` as one in
the reader group, and each role is refused what it must not do. Roles are cluster-wide, so each
test run uses its own prefix and drops every role it made.
"""

from __future__ import annotations

import json
import secrets
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from psycopg import errors
from sqlalchemy.engine import URL

from tests.apps import basic
from tests.helpers.cli import run_cli
from tests.helpers.db import libpq
from tests.helpers.processes import kill_all, start_supervisor
from tests.helpers.waiting import wait_until
from workerpool.ops.roles import print_sql


@dataclass(frozen=True)
class Logins:
    admin: URL  # the superuser, on the test's database
    owner: URL
    worker: URL
    reader: URL


def psql(url: URL, script: str) -> None:
    done = subprocess.run(
        ["psql", "-X", "-q", libpq(url)], input=script, text=True, capture_output=True, timeout=60
    )
    assert done.returncode == 0 and "ERROR" not in done.stderr, done.stderr


@pytest.fixture
def logins(server_url: URL, tmp_path) -> Iterator[Logins]:
    prefix = f"wpt_{secrets.token_hex(4)}"
    name = f"{prefix}_db"
    admin = psycopg.connect(libpq(server_url), autocommit=True)
    admin.execute(f'CREATE DATABASE "{name}"')
    made = [f"{prefix}_{group}" for group in ("owner", "worker", "reader")]
    try:
        database = server_url.set(database=name)
        psql(database, print_sql(prefix))  # before the migration: the roles, no tables yet
        for login, group in (("mig", "owner"), ("app", "worker"), ("ro", "reader")):
            made.insert(0, f"{prefix}_{login}")
            admin.execute(f"CREATE ROLE {prefix}_{login} LOGIN IN ROLE {prefix}_{group}")
        admin.execute(f"ALTER ROLE {prefix}_mig SET role = '{prefix}_owner'")
        owner = database.set(username=f"{prefix}_mig")
        migrated = run_cli("migrate", url=owner, cwd=tmp_path)
        assert migrated.returncode == 0, migrated.stderr
        psql(database, print_sql(prefix))  # after it: the grants on the tables
        yield Logins(
            database,
            owner,
            database.set(username=f"{prefix}_app"),
            database.set(username=f"{prefix}_ro"),
        )
    finally:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        for role in made:
            admin.execute(f"DROP ROLE IF EXISTS {role}")
        admin.close()


@pytest.fixture
def db_url(logins: Logins) -> URL:
    """The `start` fixture's supervisor connects as the worker login."""
    return logins.worker


def refused(url: URL, statement: str) -> bool:
    with psycopg.connect(libpq(url), autocommit=True) as conn:
        try:
            conn.execute(statement)
        except errors.InsufficientPrivilege:
            return True
    return False


def test_the_tables_belong_to_the_owner_group(logins):
    with psycopg.connect(libpq(logins.admin)) as conn:
        owners = set(
            conn.execute(
                "SELECT tableowner FROM pg_tables WHERE tablename LIKE 'workerpool%'"
            ).fetchall()
        )
    assert owners == {(logins.owner.username.replace("_mig", "_owner"),)}


def test_the_worker_role_runs_the_supervisor_and_the_cli(logins, start, tmp_path):
    sup = start()
    sup.wait_running("fast", "slow")
    pool = basic.build(logins.worker)
    try:
        ids = [
            pool.enqueue("quick", {"seconds": 0.05}),
            *pool.enqueue_many([("quick", {"seconds": 0.01})] * 5),
            pool.enqueue("steps", {"n": 3, "step": 0.05}),
        ]
        later = pool.enqueue("quick", {}, delay=3600)
    finally:
        pool.dispose()
    wait_until(lambda: done_count(logins, ids) == len(ids), 30, message=f"done\n{sup.log()}")
    cancelled = run_cli("cancel", str(later), url=logins.worker, cwd=tmp_path)
    assert cancelled.returncode == 0, cancelled.stderr
    for args in (("pause", "fast"), ("resume", "fast"), ("dead", "list")):
        result = run_cli(*args, url=logins.worker, cwd=tmp_path)
        assert result.returncode == 0, (args, result.stderr)
    sup.proc.terminate()
    assert sup.wait_exit(30) == 0, sup.log()
    assert "permission denied" not in sup.log().lower(), sup.log()
    with psycopg.connect(libpq(logins.admin)) as conn:
        state = conn.execute("SELECT state FROM workerpool_jobs WHERE id = %s", (later,)).fetchone()
    assert state == ("cancelled",)


def done_count(logins: Logins, ids: list[int]) -> int:
    with psycopg.connect(libpq(logins.admin)) as conn:
        return conn.execute(
            "SELECT count(*) FROM workerpool_jobs WHERE id = ANY(%s) AND state = 'done'", (ids,)
        ).fetchone()[0]


def test_the_worker_role_cannot_alter_drop_or_truncate(logins):
    for statement in (
        "ALTER TABLE workerpool_jobs ADD COLUMN x int",
        "DROP TABLE workerpool_jobs",
        "TRUNCATE workerpool_jobs",
        "CREATE TABLE not_ours (x int)",
        "UPDATE workerpool_alembic_version SET version_num = 'x'",
        "CREATE INDEX ON workerpool_jobs (task)",
    ):
        assert refused(logins.worker, statement), statement


def test_the_reader_reads_status_and_writes_nothing(logins, tmp_path):
    status = run_cli("status", "--json", url=logins.reader, cwd=tmp_path)
    assert status.returncode == 0, status.stderr
    assert isinstance(json.loads(status.stdout), dict)
    listed = run_cli("dead", "list", url=logins.reader, cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    for statement in (
        "INSERT INTO workerpool_jobs (queue, task) VALUES ('fast', 'quick')",
        "UPDATE workerpool_jobs SET priority = 1",
        "DELETE FROM workerpool_workers",
        "INSERT INTO workerpool_queues (queue, paused) VALUES ('fast', true)",
    ):
        assert refused(logins.reader, statement), statement
    paused = run_cli(
        "pause", "fast", "--app", "tests.apps.basic:pool", url=logins.reader, cwd=tmp_path
    )
    assert paused.returncode != 0 and "permission denied" in paused.stderr, paused.stderr


def test_the_worker_role_prunes_but_leaves_vacuum_to_autovacuum(logins):
    """The maintenance child's duties as the worker role: pruning (DELETE) works; ANALYZE and
    VACUUM need the owner (or PostgreSQL 17's MAINTAIN), and the duty knows it beforehand."""
    from workerpool import sql as queries
    from workerpool.sql import db
    from workerpool.sql import table_health as health_queries

    with psycopg.connect(libpq(logins.admin)) as conn:
        conn.execute(
            "INSERT INTO workerpool_jobs (queue, task, state, finished_at) "
            "VALUES ('fast', 'quick', 'done', now() - interval '30 days')"
        )
    engine = db.create(logins.worker)
    try:
        with engine.begin() as conn:
            assert queries.prune_finished(conn, older_than=7 * 86400, limit=100) == 1
            allowed, why = health_queries.may_maintain(conn)
    finally:
        engine.dispose()
    with psycopg.connect(libpq(logins.admin)) as conn:
        version = conn.execute("SHOW server_version_num").fetchone()[0]
    assert allowed == (int(version) >= 170000), why
    assert "neither the owner" in why or allowed


def test_the_reader_serves_the_read_only_dashboard(logins):
    from tests.apps import web
    from tests.helpers.web import client

    pool = web.build(logins.reader)
    try:
        with client(pool, read_only=True) as http:
            for path in ("/", "/jobs", "/dead"):
                page = http.get(path)
                assert page.status_code == 200, (path, page.status_code, page.text[:500])
    finally:
        pool.dispose()


def admin_rows(logins: Logins, query: str, params: tuple = ()) -> list[tuple]:
    with psycopg.connect(libpq(logins.admin)) as conn:
        return conn.execute(query, params).fetchall()


def test_the_worker_role_runs_every_maintenance_duty_across_a_day_boundary(logins, tmp_path):
    """The state the day boundary brings, made by the owner: the history's partitions end at
    tonight's midnight (UTC), one is past the retention, rows finished on both sides of last
    midnight wait to move; an old audit entry, an old finished job and a worker gone for an
    hour wait to be pruned. A real supervisor as the worker role must do every duty."""
    with psycopg.connect(libpq(logins.admin), autocommit=True) as conn:
        conn.execute("SET ROLE " + logins.owner.username.replace("_mig", "_owner"))
        conn.execute("""
            SELECT workerpool_history_create_partition(d, d + interval '1 day')
            FROM (SELECT date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' + s.n
                  AS d FROM unnest(ARRAY[interval '-30 days', interval '-1 day',
                                         interval '0 days']) AS s(n)) AS days""")
        conn.execute("RESET ROLE")
        conn.execute("""
            INSERT INTO workerpool_jobs (queue, task, state, finished_at) VALUES
              ('cron', 'beat', 'done', date_trunc('day', now() AT TIME ZONE 'UTC')
                                       AT TIME ZONE 'UTC' - interval '1 second'),
              ('cron', 'beat', 'done', now() - interval '2 minutes'),
              ('cron', 'beat', 'done', now() - interval '20 days')""")
        conn.execute(
            "INSERT INTO workerpool_audit (at, actor, source, action, target)"
            " VALUES (now() - interval '100 days', 'old', 'cli', 'pause', 'cron')"
        )
        conn.execute(
            "INSERT INTO workerpool_workers (id, host, pid, queue, last_seen)"
            " VALUES ('gone', 'h', 1, 'cron', now() - interval '1 hour')"
        )
    sup = start_supervisor("tests.apps.cron_runtime:pool", logins.worker, tmp_path)
    try:

        def done() -> bool:
            parts = {
                row[0]
                for row in admin_rows(
                    logins,
                    """
                SELECT c.relname FROM pg_inherits AS i JOIN pg_class AS c ON c.oid = i.inhrelid
                WHERE i.inhparent = 'workerpool_jobs_history'::regclass""",
                )
            }
            return (
                len(parts) >= 5  # yesterday, today, and three days ahead: none 30 days old
                and min(parts) > f"workerpool_jobs_history_p{before(8):%Y%m%d}"
                and count(logins, "workerpool_jobs_history") == 2
                and count(logins, "workerpool_jobs WHERE finished_at < now() - interval '10 days'")
                == 0
                and count(logins, "workerpool_audit") == 0
                and count(logins, "workerpool_workers WHERE id = 'gone'") == 0
                and count(logins, "workerpool_cron WHERE last_job_id IS NOT NULL") > 0
            )

        wait_until(done, 60, message=f"every duty done as the worker role\n{sup.log()}")
        assert sup.proc.poll() is None, sup.log()
        sup.proc.terminate()
        assert sup.wait_exit(30) == 0, sup.log()
    finally:
        kill_all([sup])
    for refusal in ("permission denied", "maintenance duty", "maintenance pass failed"):
        assert refusal not in sup.log().lower(), sup.log()


def before(days: int) -> datetime:
    return datetime.now(UTC) - timedelta(days=days)


def count(logins: Logins, relation: str) -> int:
    return admin_rows(logins, f"SELECT count(*) FROM {relation}")[0][0]


def test_the_audit_trail_is_append_only_to_the_worker(logins):
    for statement in (
        "UPDATE workerpool_audit SET actor = 'someone else'",
        "DELETE FROM workerpool_audit",
        "INSERT INTO workerpool_audit (at, actor, source, action, target)"
        " VALUES (now() - interval '1 year', 'x', 'cli', 'pause', 'q')",
    ):
        assert refused(logins.worker, statement), statement
    assert refused(logins.reader, "SELECT workerpool_prune_audit(7200, 10)")
    with psycopg.connect(libpq(logins.worker), autocommit=True) as conn:
        conn.execute(
            "INSERT INTO workerpool_audit (actor, source, action, target)"
            " VALUES ('app', 'cli', 'pause', 'q')"
        )
        assert conn.execute("SELECT workerpool_prune_audit(0, 10)").fetchone() == (0,)


def test_public_may_not_create_in_the_schema_after_the_script(logins):
    """PostgreSQL 13 and 14 grant CREATE on public to PUBLIC: the script takes it back."""
    with psycopg.connect(libpq(logins.admin), autocommit=True) as conn:
        conn.execute("GRANT CREATE ON SCHEMA public TO PUBLIC")
    assert not refused(logins.worker, "CREATE TABLE through_public (x int)")
    psql(logins.admin, print_sql(logins.owner.username.removesuffix("_mig")))
    assert refused(logins.worker, "CREATE TABLE through_public_again (x int)")
    assert refused(logins.reader, "CREATE TABLE through_public_again (x int)")


def test_the_worker_enqueues_from_sql_and_the_reader_may_not(logins):
    with psycopg.connect(libpq(logins.worker), autocommit=True) as conn:
        conn.execute(
            "INSERT INTO workerpool_tasks (task, queue, max_attempts, priority, payload_version,"
            " payload_limit) VALUES ('quick', 'fast', 3, 0, 1, 65536)"
        )
        conn.execute("INSERT INTO workerpool_queue_bounds (queue, max_pending) VALUES ('fast', 9)")
        job_id = conn.execute("SELECT workerpool_enqueue('quick', '{}')").fetchone()[0]
        assert conn.execute("SELECT task FROM workerpool_jobs").fetchall() == [("quick",)]
    assert job_id > 0
    assert refused(logins.reader, "SELECT workerpool_enqueue('quick', '{}')")
