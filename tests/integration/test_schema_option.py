"""`WorkerPool(schema=...)` / `$WORKERPOOL_SCHEMA` on real PostgreSQL: two pools in two schemas
of one database, side by side.

Each schema is migrated by `workerpool migrate` (one with `--schema`, one by the environment);
real supervisors of `tests/apps/schemas.py` run in each, their handlers and cron ticks report
the schema their own connections are in, and neither pool sees the other's rows. Around them:
a caller's connection (`conn=`) in the application's schema, the roles script granting on the
schema, a downgrade of one schema, PgBouncer, and bad names refused before anything is written.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import URL

from tests.helpers import databases
from tests.helpers.cli import run_cli
from tests.helpers.db import libpq
from tests.helpers.processes import Supervisor, kill_all, start_supervisor
from tests.helpers.waiting import wait_until
from workerpool import ConfigError, InvalidSchema, WorkerPool
from workerpool.client import database_url
from workerpool.migrate import VERSION_TABLE, downgrade, drift
from workerpool.ops.roles import print_sql
from workerpool.process import settings
from workerpool.sql import db
from workerpool.sql.schema import metadata

pytestmark = pytest.mark.slow  # subprocesses: Python starts, servers, migrations

A, B = "jobs_a", "jobs_b"
APP = "tests.apps.schemas:pool"
TABLES = {*metadata.tables, VERSION_TABLE}


def run(url: URL, statement: str, *params: object) -> list[tuple]:
    with psycopg.connect(libpq(url), autocommit=True) as conn:
        cur = conn.execute(statement, params or None)
        return cur.fetchall() if cur.description else []


def tables_in(url: URL, schema: str) -> set[str]:
    return {
        name
        for (name,) in run(url, "SELECT tablename FROM pg_tables WHERE schemaname = %s", schema)
    }


def jobs(url: URL, schema: str, task: str) -> list[tuple]:
    """(state, result) of every job of ``task`` in ``schema``'s table."""
    return run(
        url, f"SELECT state, result FROM {schema}.workerpool_jobs WHERE task = %s ORDER BY id", task
    )


def app_pool(url: URL, schema: str) -> WorkerPool:
    """A producer of the app's tasks in ``schema``."""
    pool = WorkerPool(url, schema=schema)
    pool.queue("q")
    pool.task(queue="q", name="where")(lambda job: None)
    return pool


@pytest.fixture(scope="module")
def two_schemas_template(
    server_url: URL, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """One database, migrated into ``jobs_a`` (``--schema``) and ``jobs_b`` (the environment),
    once per module: each test gets a copy (two migrations by the CLI take seconds)."""
    cwd = tmp_path_factory.mktemp("migrate")
    with databases.scratch_database(server_url, "wp_2s") as url:
        first = run_cli("migrate", "--schema", A, url=url, cwd=cwd)
        assert first.returncode == 0, first.stderr
        assert f"in schema {A}" in first.stdout
        second = run_cli("migrate", url=url, cwd=cwd, extra_env={settings.SCHEMA_ENV: B})
        assert second.returncode == 0, second.stderr
        yield url.database


@pytest.fixture
def two_schemas(server_url: URL, two_schemas_template: str) -> Iterator[URL]:
    with databases.scratch_database(server_url, "wp_t", two_schemas_template) as url:
        yield url


@pytest.fixture
def launch(two_schemas: URL, tmp_path: Path) -> Iterator:
    running: list[Supervisor] = []

    def start(schema: str) -> Supervisor:
        home = tmp_path / schema
        home.mkdir()
        sup = start_supervisor(APP, two_schemas, home, **{settings.SCHEMA_ENV: schema})
        running.append(sup)
        return sup

    yield start
    kill_all(running, show_logs=True)


def test_migrate_puts_every_table_and_the_version_table_in_the_schema(two_schemas):
    assert tables_in(two_schemas, A) == TABLES
    assert tables_in(two_schemas, B) == TABLES
    assert tables_in(two_schemas, "public") == set()
    heads = {run(two_schemas, f"SELECT version_num FROM {s}.{VERSION_TABLE}")[0][0] for s in (A, B)}
    assert len(heads) == 1
    for schema in (A, B):
        pool = WorkerPool(two_schemas, schema=schema)
        with pool.engine.connect() as conn:
            assert conn.execute(text("SELECT current_schema()")).scalar() == schema
            assert drift(conn) == []
        pool.dispose()


def test_two_pools_run_their_own_jobs_and_crons_only(two_schemas, launch, tmp_path):
    producer_a, producer_b = app_pool(two_schemas, A), app_pool(two_schemas, B)
    only_a = producer_a.enqueue("where", {})
    only_b = producer_b.enqueue("where", {})
    assert only_a == only_b == 1  # each schema's own sequence: the same id, two jobs

    launch(B).wait_running("q", "@maintenance")
    wait_until(
        lambda: jobs(two_schemas, B, "where") == [("done", B)], 30, message="B's job done in B"
    )
    wait_until(
        lambda: len([r for r in jobs(two_schemas, B, "tick") if r[0] == "done"]) >= 2,
        30,
        message="B's cron ticks",
    )
    assert {result for _, result in jobs(two_schemas, B, "tick") if result} == {B}
    # B's workers were woken by A's enqueue too (one channel): they claimed nothing of A's
    assert jobs(two_schemas, A, "where") == [("pending", None)]
    assert jobs(two_schemas, A, "tick") == []
    assert run(two_schemas, f"SELECT count(*) FROM {A}.workerpool_workers")[0][0] == 0

    launch(A).wait_running("q", "@maintenance")
    wait_until(
        lambda: jobs(two_schemas, A, "where") == [("done", A)], 30, message="A's job done in A"
    )
    wait_until(
        lambda: any(state == "done" for state, _ in jobs(two_schemas, A, "tick")),
        30,
        message="A's cron ticks",
    )
    assert {result for _, result in jobs(two_schemas, A, "tick") if result} == {A}
    assert jobs(two_schemas, B, "where") == [("done", B)]

    for schema in (A, B):
        shown = run_cli(
            "status",
            "--json",
            url=two_schemas,
            cwd=tmp_path,
            extra_env={settings.SCHEMA_ENV: schema},
        )
        assert shown.returncode == 0, shown.stderr
        data = json.loads(shown.stdout)
        workers = run(two_schemas, f"SELECT id FROM {schema}.workerpool_workers")
        assert {w["id"] for w in data["workers"]} == {w for (w,) in workers}
    producer_a.dispose()
    producer_b.dispose()


def test_a_callers_connection_enqueues_into_the_schema_and_keeps_its_own_path(two_schemas):
    pool = app_pool(two_schemas, A)
    app = create_engine(db.normalise(two_schemas))  # the application's own engine: public
    with app.begin() as conn:
        before = conn.execute(text("SHOW search_path")).scalar()
        job_id = pool.enqueue("where", {}, conn=conn)
        many = pool.enqueue_many([("where", {}), ("where", {})], conn=conn)
        assert conn.execute(text("SHOW search_path")).scalar() == before
        assert conn.execute(text("SELECT current_schema()")).scalar() == "public"
    assert [
        row[0] for row in run(two_schemas, f"SELECT id FROM {A}.workerpool_jobs ORDER BY id")
    ] == [job_id, *many]
    assert run(two_schemas, f"SELECT count(*) FROM {B}.workerpool_jobs")[0][0] == 0

    with app.connect() as conn, conn.begin() as txn:
        pool.enqueue("where", {}, conn=conn)
        txn.rollback()
    with app.begin() as conn:
        result = pool.cancel([job_id], conn=conn)
        assert conn.execute(text("SHOW search_path")).scalar() == before
    assert result.verdicts[job_id] == "cancelled"
    assert run(
        two_schemas,
        f"SELECT count(*), count(*) FILTER (WHERE state = 'cancelled') FROM {A}.workerpool_jobs",
    ) == [(3, 1)]
    with app.begin() as conn, pytest.raises(ConfigError, match=r"batch.*not supported"):
        pool.batch(conn=conn)
    app.dispose()
    pool.dispose()


def test_an_async_callers_connection_enqueues_into_the_schema(two_schemas):
    from sqlalchemy.ext.asyncio import create_async_engine

    pool = app_pool(two_schemas, A)

    async def enqueue() -> tuple[str, str, list[int]]:
        app = create_async_engine(
            db.normalise(two_schemas).set(drivername="postgresql+psycopg_async")
        )
        async with app.begin() as conn:
            before = (await conn.execute(text("SHOW search_path"))).scalar()
            ids = [
                await pool.enqueue_async("where", {}, conn=conn),
                *await pool.enqueue_many_async([("where", {})], conn=conn),
            ]
            after = (await conn.execute(text("SHOW search_path"))).scalar()
        await app.dispose()
        return before, after, ids

    before, after, ids = asyncio.run(enqueue())
    assert after == before
    assert [
        row[0] for row in run(two_schemas, f"SELECT id FROM {A}.workerpool_jobs ORDER BY id")
    ] == ids
    pool.dispose()


def test_a_call_failing_in_the_callers_transaction_is_undone_by_its_rollback(two_schemas):
    pool = app_pool(two_schemas, A)
    app = create_engine(db.normalise(two_schemas))
    with app.connect() as conn:
        conn.begin()
        with pytest.raises(Exception, match="unknown job"):
            pool.cancel([999], conn=conn)
        conn.rollback()
        assert conn.execute(text("SELECT current_schema()")).scalar() == "public"
    app.dispose()
    pool.dispose()


def test_each_schema_has_its_own_history_mover(two_schemas):
    # the mover's advisory lock is per schema: a replica moving in one schema does not make
    # the other schema's movers skip their turn
    from workerpool.sql import history

    pools = {schema: app_pool(two_schemas, schema) for schema in (A, B)}
    try:
        with pools[A].engine.begin() as moving_a:
            assert history.try_lock(moving_a)
            with pools[B].engine.begin() as moving_b:
                assert history.try_lock(moving_b)
            with pools[A].engine.begin() as other_replica_of_a:
                assert not history.try_lock(other_replica_of_a)
    finally:
        for pool in pools.values():
            pool.dispose()


def test_each_schema_keeps_its_own_history_partitions(two_schemas):
    """The owner's partition functions are per schema and act on their own schema's history."""
    from workerpool.runtime.maintenance import Maintenance

    pool = app_pool(two_schemas, A)
    try:
        assert Maintenance(pool.registry, pool.engine, worker_id="m").keep_history() == 0
    finally:
        pool.dispose()
    parts = run(
        two_schemas,
        "SELECT n.nspname, count(*) FROM pg_inherits AS i"
        " JOIN pg_class AS c ON c.oid = i.inhrelid"
        " JOIN pg_namespace AS n ON n.oid = c.relnamespace"
        " GROUP BY 1",
    )
    assert dict(parts).keys() == {A}, parts


def test_downgrade_of_one_schema_leaves_the_other(two_schemas):
    url_a = WorkerPool(two_schemas, schema=A).url
    downgrade(url_a, "base", schema=A)
    assert tables_in(two_schemas, A) <= {VERSION_TABLE}
    assert tables_in(two_schemas, B) == TABLES
    WorkerPool(two_schemas, schema=A).migrate()
    for schema in (A, B):
        pool = WorkerPool(two_schemas, schema=schema)
        with pool.engine.connect() as conn:
            assert drift(conn) == []
        pool.dispose()


@pytest.mark.parametrize(
    "bad",
    ["Jobs", "1jobs", "pg_jobs", "information_schema", "jobs;drop", "jobs a", "a" * 64, "", 5],
)
def test_a_bad_schema_name_is_refused_by_name(bad):
    with pytest.raises(InvalidSchema, match=r"schema .* is invalid"):
        WorkerPool("postgresql://nobody@127.0.0.1:1/none", schema=bad)


def test_bad_names_are_refused_before_anything_is_written(empty_db_url, tmp_path, monkeypatch):
    monkeypatch.setenv(settings.SCHEMA_ENV, "Not-A-Schema")
    with pytest.raises(InvalidSchema):
        WorkerPool(empty_db_url)
    namespaces = run(empty_db_url, "SELECT count(*) FROM pg_namespace")
    for args, env in (
        (("migrate", "--schema", "x;drop"), {}),
        (("migrate",), {"Bad": 1}),
        (("status",), {"Bad": 1}),
        (("roles", "--print-sql", "--schema", "x y"), {}),
    ):
        extra = {settings.SCHEMA_ENV: "Bad-Name"} if env else {}
        done = run_cli(*args, url=empty_db_url, cwd=tmp_path, extra_env=extra)
        assert done.returncode != 0, args
        assert "is invalid" in done.stderr and len(done.stderr.strip().splitlines()) == 1, (
            done.stderr
        )
    assert run(empty_db_url, "SELECT count(*) FROM pg_namespace") == namespaces
    assert tables_in(empty_db_url, "public") == set()


def test_a_schema_never_migrated_is_named_not_created(two_schemas):
    pool = app_pool(two_schemas, "jobs_c")
    with pytest.raises(ConfigError, match=r"schema 'jobs_c' does not exist.*migrate --schema"):
        pool.enqueue("where", {})
    assert run(two_schemas, "SELECT count(*) FROM pg_namespace WHERE nspname = 'jobs_c'") == [(0,)]
    pool.dispose()


def test_the_default_schema_changes_nothing(db_url):
    pool = WorkerPool(db_url)
    assert pool.schema == "public"
    assert pool.url == database_url(db_url)
    assert "options" not in pool.url.query
    assert db.in_schema(pool.url, "public") is pool.url
    pool.dispose()


# -- roles ----------------------------------------------------------------------------------------


def psql(url: URL, script: str) -> None:
    done = subprocess.run(
        ["psql", "-X", "-q", libpq(url)], input=script, text=True, capture_output=True, timeout=60
    )
    assert done.returncode == 0 and "ERROR" not in done.stderr, done.stderr


@contextmanager
def roles(admin_url: URL, prefix: str) -> Iterator[None]:
    """Roles are cluster-wide: every one the test made is dropped, with what it owns here."""
    try:
        yield
    finally:
        names = [f"{prefix}_{role}" for role in ("mig", "app", "ro", "owner", "worker", "reader")]
        made = [n for n in names if run(admin_url, "SELECT 1 FROM pg_roles WHERE rolname = %s", n)]
        if made:
            run(admin_url, f"DROP OWNED BY {', '.join(made)}")
        for name in made:
            run(admin_url, f"DROP ROLE {name}")


def test_roles_are_granted_on_the_schema(empty_db_url, tmp_path):
    prefix, schema = f"wps_{secrets.token_hex(4)}", "jobs_r"
    with roles(empty_db_url, prefix):
        psql(empty_db_url, print_sql(prefix, schema))  # before: the roles and the schema
        for login, group in (("mig", "owner"), ("app", "worker"), ("ro", "reader")):
            run(empty_db_url, f"CREATE ROLE {prefix}_{login} LOGIN IN ROLE {prefix}_{group}")
        run(empty_db_url, f"ALTER ROLE {prefix}_mig SET role = '{prefix}_owner'")
        owner = empty_db_url.set(username=f"{prefix}_mig")
        migrated = run_cli("migrate", "--schema", schema, url=owner, cwd=tmp_path)
        assert migrated.returncode == 0, migrated.stderr
        psql(empty_db_url, print_sql(prefix, schema))  # after: the grants on the tables
        owners = run(
            empty_db_url, "SELECT DISTINCT tableowner FROM pg_tables WHERE schemaname = %s", schema
        )
        assert owners == [(f"{prefix}_owner",)]

        worker = app_pool(empty_db_url.set(username=f"{prefix}_app"), schema)
        job_id = worker.enqueue("where", {})
        worker.dispose()
        reader = empty_db_url.set(username=f"{prefix}_ro")
        shown = run_cli(
            "status", "--json", url=reader, cwd=tmp_path, extra_env={settings.SCHEMA_ENV: schema}
        )
        assert shown.returncode == 0, shown.stderr
        assert json.loads(shown.stdout)["queues"]["q"]["counts"]["pending"] == 1
        read_only = WorkerPool(reader, schema=schema)
        with pytest.raises(Exception, match="permission denied"), read_only.engine.begin() as c:
            c.execute(text("DELETE FROM workerpool_jobs WHERE id = :id"), {"id": job_id})
        read_only.dispose()
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            run(
                empty_db_url.set(username=f"{prefix}_app"),
                f"CREATE TABLE {schema}.intruder (id int)",
            )


# -- PgBouncer ------------------------------------------------------------------------------------


def test_behind_pgbouncer_the_server_sets_the_schema(two_schemas, bouncer, monkeypatch):
    """The bouncer (transaction pooling, ``ignore_startup_parameters = options``) drops the
    search_path the URL carries: the pool refuses its connections rather than use ``public``,
    unless the server itself puts the role's sessions in the schema."""
    monkeypatch.setenv(settings.PGBOUNCER_ENV, "1")
    pool = app_pool(bouncer.url(two_schemas), A)
    with pytest.raises(ConfigError, match=r"schema 'public', not 'jobs_a'.*ALTER ROLE"):
        pool.enqueue("where", {})
    pool.dispose()
    assert run(two_schemas, f"SELECT count(*) FROM {A}.workerpool_jobs") == [(0,)]

    # another database, whose sessions the server puts in the schema (the bouncer's server
    # sessions of the first one started before any such setting)
    configured = two_schemas.set(database=f"{two_schemas.database}_s")
    run(two_schemas, f'CREATE DATABASE "{configured.database}"')
    try:
        WorkerPool(configured, schema=A).migrate()
        run(
            configured,
            f'ALTER ROLE postgres IN DATABASE "{configured.database}" SET search_path = {A}',
        )
        pool = app_pool(bouncer.url(configured), A)
        ids = pool.enqueue_many([("where", {}), ("where", {"n": 2}, {"key": "k"})])
        assert pool.job(ids[0]).state == "pending"
        pool.dispose()
        assert run(configured, f"SELECT id FROM {A}.workerpool_jobs ORDER BY id") == [(1,), (2,)]
    finally:
        run(two_schemas, f'DROP DATABASE IF EXISTS "{configured.database}" WITH (FORCE)')
