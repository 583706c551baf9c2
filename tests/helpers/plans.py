"""The hot statements as the worker sends them, a loaded table to explain them on, and what
their plans may not hold (``tests/integration/test_plan_stale_statistics.py`` and
``test_plan_claims.py``)."""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from sqlalchemy import Connection, Engine
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import URL

from tests.helpers.db import libpq
from workerpool import sql as queries
from workerpool.model.limits import ClaimLimits, KeyLimit, Rate
from workerpool.runtime.worker import (
    IDLE_IN_TRANSACTION_TIMEOUT,
    LOCK_TIMEOUT,
    STATEMENT_TIMEOUT,
    session_limits,
)
from workerpool.sql import batches as batches_sql
from workerpool.sql import db
from workerpool.sql import results as results_sql

PENDING = 200_000
LIVE_LEASES = 2_000  # 40 each for wk0 .. wk49
STALE_LEASES = 5_000  # the last 100 have no attempts left (the sweep's)
SUSPECTS = 10
FINISHED = 50_000  # past the retention (the prune's)
LIMIT = 100
KEYS = 1_000  # concurrency keys of the backlog (the per-key claims')
RETENTION = 7 * 24 * 3600.0
BATCH_MEMBERS = 20_000
#: Nodes that read a whole backlog (or a whole lease set) instead of stopping at the limit.
FORBIDDEN = {"Sort", "Incremental Sort", "Bitmap Heap Scan", "Seq Scan"}
DIALECT = postgresql.psycopg.dialect()


LOAD = [
    "ALTER TABLE workerpool_jobs SET (autovacuum_enabled = off)",  # no analyze behind our back
    "ANALYZE workerpool_jobs",  # statistics taken while the table is empty
    f"""INSERT INTO workerpool_jobs (queue, task, payload, run_at, concurrency_key)
        SELECT 'q', 'work', jsonb_build_object('n', g), now() - g * interval '1 ms',
               'k' || (g % {KEYS})
        FROM generate_series(1, {PENDING}) g""",
    f"""INSERT INTO workerpool_jobs (queue, task, run_at, crashes)
        SELECT 'q', 'work', now() - interval '1 s', 1 FROM generate_series(1, {SUSPECTS})""",
    f"""INSERT INTO workerpool_jobs (queue, task, state, attempts, claimed_by, claimed_at)
        SELECT 'q', 'work', 'processing', 1, 'wk' || (g % 50), now()
        FROM generate_series(1, {LIVE_LEASES}) g""",
    f"""INSERT INTO workerpool_jobs (queue, task, state, attempts, max_attempts, claimed_by,
                                    claimed_at)
        SELECT 'q', 'work', 'processing', CASE WHEN g > {STALE_LEASES - 100} THEN 5 ELSE 1 END,
               5, 'lost' || (g % 100), now() - interval '1 hour'
        FROM generate_series(1, {STALE_LEASES}) g""",
    f"""INSERT INTO workerpool_jobs (queue, task, state, attempts, claimed_by, claimed_at,
                                    finished_at)
        SELECT 'q', 'work', 'done', 1, 'old', now() - interval '30 days',
               now() - interval '30 days' FROM generate_series(1, {FINISHED})""",
    # a batch of BATCH_MEMBERS members, all ended but one (its settle and its finish)
    """INSERT INTO workerpool_batches (id, callbacks) VALUES (1, '[{"on": "complete",
        "queue": "q", "task": "work", "payload_version": 1, "priority": 0,
        "max_attempts": 5}]')""",
    f"""INSERT INTO workerpool_jobs (queue, task, state, attempts, finished_at, batch_id)
        SELECT 'q', 'work', 'done', 1, now(), 1 FROM generate_series(1, {BATCH_MEMBERS})""",
    """INSERT INTO workerpool_jobs (queue, task, state, attempts, claimed_by, claimed_at,
                                    batch_id)
        VALUES ('q', 'work', 'processing', 1, 'wk1', now(), 1)""",
    # the claimer of the limited claims, registered (its capacity makes the shared lock safe)
    "INSERT INTO workerpool_workers (id, host, pid, queue, capacity) VALUES ('me', 'h', 1, 'q',"
    f" {LIMIT})",
    "VACUUM workerpool_jobs",  # refreshes reltuples, not pg_stats: the trigger of the bad plan
]


@contextmanager
def loaded(server_url: URL, template_db: str, load: list[str]) -> Iterator[URL]:
    """A database of the template, then ``load`` run on it (loading takes seconds; every test
    rolls back)."""
    name = f"wp_plan_{secrets.token_hex(6)}"
    with psycopg.connect(libpq(server_url), autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template_db}"')
    url = server_url.set(database=name)
    try:
        with psycopg.connect(libpq(url), autocommit=True) as conn:
            for statement in load:
                conn.execute(statement)
        yield url
    finally:
        with psycopg.connect(libpq(server_url), autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


# -- the connections, as workerpool opens them ----------------------------------------------------


def worker_engine(url: URL) -> Engine:
    """The worker's engine: the planner settings in its startup options."""
    return db.create(url, application_name="plan-test", session_settings=session_limits())


def plain_engine(url: URL) -> Engine:
    """``pool.engine`` as the maintenance child has it, and the releaser's and PgBouncer's."""
    return db.create(url, application_name="plan-test")


def bounded(conn: Connection) -> None:
    queries.bound_transaction(
        conn,
        statement_timeout=STATEMENT_TIMEOUT,
        lock_timeout=LOCK_TIMEOUT,
        idle_timeout=IDLE_IN_TRANSACTION_TIMEOUT,
    )


#: name → (engine factory, what opens each transaction)
SESSIONS: dict[str, tuple[Callable[[URL], Engine], Callable[[Connection], None]]] = {
    "worker startup options": (worker_engine, lambda conn: None),
    "bound transaction": (plain_engine, bounded),
}


# -- the statements, exactly as the queries functions execute them -------------------------------


class Recorder:
    """Stands in for a Connection: keeps the statement a queries function executes."""

    rowcount = 0

    def __init__(self) -> None:
        self.calls: list[tuple[Any, dict[str, Any]]] = []

    dialect = DIALECT

    def execute(self, statement: Any, params: Any = None) -> Recorder:
        self.calls.append((statement, dict(params or {})))
        return self

    def exec_driver_sql(self, sql: str, params: Any = None) -> Recorder:
        self.calls.append((sql, dict(params or {})))  # already the driver's SQL and values
        return self

    def scalars(self) -> list[Any]:
        return []

    def scalar(self) -> None:
        return None

    def first(self) -> None:
        return None

    def all(self) -> list[Any]:
        return []

    def __iter__(self) -> Iterator[Any]:
        return iter(())


def compiled(run: Callable[[Any], object]) -> tuple[str, dict[str, Any]]:
    """The SQL text (psycopg's ``%(name)s`` style) and parameters of what ``run`` executes."""
    recorder = Recorder()
    run(recorder)
    statement, params = recorder.calls[-1]
    if isinstance(statement, str):
        return statement, params
    comp = statement.compile(dialect=DIALECT, compile_kwargs={"render_postcompile": True})
    return str(comp), comp.construct_params(params)


def leases_of(url: URL, worker: str) -> list[tuple[int, int]]:
    with psycopg.connect(libpq(url)) as conn:
        return conn.execute(
            "SELECT id, attempts FROM workerpool_jobs WHERE claimed_by = %s"
            " AND state = 'processing' ORDER BY id",
            (worker,),
        ).fetchall()


def statements(url: URL, *, leases: bool = True) -> dict[str, tuple[str, dict[str, Any]]]:
    """Each hot statement; ``leases=False``: the claims only (the table holds no lease)."""
    held = leases_of(url, "wk0") if leases else [(0, 1)]
    lease = queries.Lease(held[0][0], held[0][1], "wk0")
    interrupted = {"type": "Interrupted", "message": "drain"}
    versions = {"work": 1}
    unbinding = ClaimLimits(global_concurrency=100_000, rate=Rate(1_000_000, 3600.0))
    per_key = ClaimLimits(keys=(KeyLimit("work", 1, Rate(1_000, 60.0)),))
    return {
        "claim limited": compiled(
            lambda c: queries.claim(
                c,
                queue="q",
                worker="me",
                limit=LIMIT,
                task_versions=versions,
                limits=unbinding,
            )
        ),
        "claim limited shared": compiled(
            lambda c: queries.claim(
                c,
                queue="q",
                worker="me",
                limit=LIMIT,
                task_versions=versions,
                limits=unbinding,
                shared=True,
            )
        ),
        "claim per key": compiled(
            lambda c: queries.claim(
                c,
                queue="q",
                worker="me",
                limit=LIMIT,
                task_versions=versions,
                limits=per_key,
            )
        ),
        "claim per key alone": compiled(
            lambda c: queries.claim(
                c,
                queue="q",
                worker="me",
                limit=LIMIT,
                task_versions=versions,
                alone=True,
                limits=per_key,
            )
        ),
        "claim": compiled(
            lambda c: queries.claim(
                c,
                queue="q",
                worker="me",
                limit=LIMIT,
                task_versions=versions,
            )
        ),
        "claim alone": compiled(
            lambda c: queries.claim(
                c,
                queue="q",
                worker="me",
                limit=LIMIT,
                task_versions=versions,
                alone=True,
            )
        ),
        "complete": compiled(lambda c: queries.complete(c, "wk0", held)),
        "complete settling": compiled(
            lambda c: results_sql.complete_settling(
                c, "wk0", [(job_id, attempt, None) for job_id, attempt in held]
            )
        ),
        "complete settling with results": compiled(
            lambda c: results_sql.complete_settling(
                c, "wk0", [(job_id, attempt, '{"n": 1}') for job_id, attempt in held]
            )
        ),
        "settle batches (lock)": compiled(lambda c: batches_sql.settle(c, [1])),
        "settle batches (finish)": compiled(lambda c: batches_sql.finish(c, [1], "outcome")),
        "renew": compiled(lambda c: queries.renew(c, "wk0", held)),
        "return_unstarted": compiled(lambda c: queries.return_unstarted(c, "wk0", held)),
        "return_unheld": compiled(
            lambda c: queries.return_unheld(c, "wk0", [job_id for job_id, _ in held])
        ),
        "give_back": compiled(lambda c: queries.give_back(c, lease, interrupted)),
        "reclaim_from_dead_worker": compiled(lambda c: queries.reclaim_from_dead_worker(c, "wk1")),
        "sweep_abandoned": compiled(lambda c: queries.sweep_abandoned(c, "q", 300.0)),
        "recover_stale": compiled(lambda c: queries.recover_stale(c, "q", 300.0)),
        "prune_finished": compiled(lambda c: queries.prune_finished(c, RETENTION, 1000)),
    }


# -- explaining -----------------------------------------------------------------------------------


@contextmanager
def rolled_back(engine: Engine, opening: Callable[[Connection], None]) -> Iterator[Any]:
    """A transaction opened as workerpool opens it; yields the psycopg connection under it."""
    with engine.connect() as conn:
        trans = conn.begin()
        try:
            opening(conn)
            raw = conn.connection.driver_connection
            assert raw.execute("SHOW enable_sort").fetchone()[0] == "off", "settings in force"
            assert raw.execute("SHOW jit").fetchone()[0] == "off", "no JIT of a priced-out plan"
            yield raw
        finally:
            trans.rollback()


def custom_plan(raw: psycopg.Connection, sql: str, params: dict[str, Any]) -> dict:
    return raw.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, params).fetchone()[0][0]["Plan"]


def generic_plan(raw: psycopg.Connection, sql: str, params: dict[str, Any]) -> dict:
    """The plan a worker's prepared statement caches: prepared by psycopg (so with the types it
    sends), planned generically, then explained by name with the same values."""
    raw.execute("SET LOCAL plan_cache_mode = force_generic_plan")
    raw.execute(sql, params, prepare=True)
    name, types = raw.execute(
        "SELECT name, parameter_types FROM pg_prepared_statements"
        " ORDER BY prepare_time DESC LIMIT 1"
    ).fetchone()
    names = list(dict.fromkeys(re.findall(r"%\(([^)]+)\)s", sql)))  # psycopg numbers them so
    assert len(names) == len(types), (names, types)
    values = psycopg.ClientCursor(raw).mogrify(
        ", ".join(["%s"] * len(names)), [params[n] for n in names]
    )
    explain = f"EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE {name}({values})"
    return raw.execute(explain).fetchone()[0][0]["Plan"]


def nodes(plan: dict) -> Iterator[dict]:
    yield plan
    for child in plan.get("Plans", []):
        yield from nodes(child)


def offending(plan: dict) -> list[str]:
    """Sorts, bitmap heap scans and sequential scans of the jobs table."""
    found = []
    for node in nodes(plan):
        kind = node["Node Type"]
        if kind in FORBIDDEN and (
            kind != "Seq Scan" or node.get("Relation Name") == "workerpool_jobs"
        ):
            found.append(
                f"{kind} ({node.get('Relation Name', '-')}, {node.get('Actual Rows')} rows)"
            )
    return found


def index_scans(plan: dict) -> dict[str, int]:
    """Index name → the most rows any scan of it returned."""
    scans: dict[str, int] = {}
    for node in nodes(plan):
        if node.get("Index Name"):
            scans[node["Index Name"]] = max(scans.get(node["Index Name"], 0), node["Actual Rows"])
    return scans


EXPLAIN = {"custom": custom_plan, "generic": generic_plan}
ARM_INDEXES = {
    "claim": {"ix_workerpool_jobs_due"},
    "claim alone": {"ix_workerpool_jobs_suspects"},
    "claim limited": {
        "ix_workerpool_jobs_due",
        "ix_workerpool_jobs_leased",
        "pk_workerpool_rate_counts",
    },
    "claim limited shared": {
        "ix_workerpool_jobs_due",
        "ix_workerpool_jobs_leased",
        "pk_workerpool_rate_counts",
    },
    "claim per key": {
        "ix_workerpool_jobs_due",
        "ix_workerpool_jobs_running_key",
        "ix_workerpool_jobs_started_key",
        "ix_workerpool_jobs_due_key",
    },
    "claim per key alone": {"ix_workerpool_jobs_suspects"},
    "recover_stale": {"ix_workerpool_jobs_leased"},
}
