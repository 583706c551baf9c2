"""The history table on real PostgreSQL: finished rows moved out of the jobs table by the
maintenance child, partitions created ahead and dropped whole, the readers that read across
both tables, keys held forever, and a move cut at any instant (docs/storage.md).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

from tests.helpers.waiting import wait_until
from workerpool import WorkerPool, testing
from workerpool.model.errors import ConfigError
from workerpool.model.history import PARTITION_PREFIX
from workerpool.ops import status
from workerpool.runtime.maintenance import Maintenance
from workerpool.sql import batches as batches_sql
from workerpool.sql import dashboard_reads, db, dependencies
from workerpool.sql import history as history_sql

LATER = datetime.now(UTC) + timedelta(days=1)
MOVE_SQL = "WITH doomed AS ("  # the head of the move (pg_stat_activity cuts long texts)


@pytest.fixture
def app(pool: WorkerPool) -> WorkerPool:
    pool.queue("q", poll_interval=0.05)
    pool.maintenance(history_delay=0)

    @pool.task(queue="q")
    def add(job):
        return job.payload["a"] + job.payload["b"]

    @pool.task(queue="q")
    def parents(job):
        return sorted(job.parent_results.values())

    @pool.task(queue="q")
    def member(job):
        return {"n": job.payload["n"]}

    @pool.task(queue="q")
    def report(job):
        return "reported"

    return pool


def maintenance(app: WorkerPool, **settings) -> Maintenance:
    if settings:
        app.maintenance(**{"history_delay": 0, **settings})
    return Maintenance(app.registry, app.engine, worker_id="m")


def where(sql, job_id: int) -> tuple[int, int]:
    """(rows with this id in the jobs table, in the history)."""
    return (
        sql("SELECT count(*) FROM workerpool_jobs WHERE id = %s", job_id)[0][0],
        sql("SELECT count(*) FROM workerpool_jobs_history WHERE id = %s", job_id)[0][0],
    )


def partition_names(sql) -> list[str]:
    return [
        name
        for (name,) in sql(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
            " WHERE i.inhparent = 'workerpool_jobs_history'::regclass ORDER BY 1"
        )
    ]


def test_done_and_cancelled_rows_move_and_every_reader_still_finds_them(app, sql):
    done = app.enqueue("add", {"a": 1, "b": 2})
    cancelled = app.enqueue("add", {"a": 0, "b": 0}, run_at=LATER)
    app.cancel([cancelled])
    dead = app.enqueue("add", {"a": 1, "b": 2})
    testing.drain(app, "q")
    sql("UPDATE workerpool_jobs SET state = 'dead', dead_reason = 'permanent' WHERE id = %s", dead)

    assert maintenance(app).keep_history() == 2
    assert where(sql, done) == (0, 1) and where(sql, cancelled) == (0, 1)
    assert where(sql, dead) == (1, 0)  # the dead-letter queue replays in place
    assert app.result(done, timeout=1) == 3
    assert app.job(done).state == "done" and app.job(cancelled).state == "cancelled"
    with app.engine.connect() as conn:
        assert dashboard_reads.job_detail(conn, done).result == 3
    assert maintenance(app).keep_history() == 0  # nothing left to move, nothing moved twice


def test_a_row_stays_until_the_delay_has_passed(app, sql):
    job = app.enqueue("add", {"a": 1, "b": 1})
    testing.drain(app, "q")
    assert maintenance(app, history_delay=3600).keep_history() == 0
    assert where(sql, job) == (1, 0)
    sql("UPDATE workerpool_jobs SET finished_at = now() - interval '2 hours' WHERE id = %s", job)
    assert maintenance(app, history_delay=3600).keep_history() == 1
    assert where(sql, job) == (0, 1)


def test_history_off_moves_nothing_and_creates_no_partition(app, sql):
    app.enqueue("add", {"a": 1, "b": 1})
    testing.drain(app, "q")
    assert maintenance(app, history=False).keep_history() == 0
    assert partition_names(sql) == []


def test_partitions_are_created_ahead_and_dropped_whole_at_the_retention(app, sql):
    maintenance(app, retention=2 * 86400, history_ahead=3).keep_history()
    names = partition_names(sql)
    today = sql("SELECT to_char(now() AT TIME ZONE 'UTC', 'YYYYMMDD')")[0][0]
    assert len(names) == 6 and f"{PARTITION_PREFIX}{today}" in names  # 2 back, today, 3 ahead
    assert names.index(f"{PARTITION_PREFIX}{today}") == 2
    old = sql(
        "INSERT INTO workerpool_jobs (queue, task, state, finished_at) VALUES"
        " ('q', 'add', 'done', now() - interval '36 hours') RETURNING id"
    )[0][0]
    assert maintenance(app, retention=2 * 86400).keep_history() == 1
    assert where(sql, old) == (0, 1)

    # A shorter retention: the partitions wholly past it go whole; the rows in them with them.
    # (In the first hour of a UTC day yesterday's partition still holds the last hour.)
    maintenance(app, retention=3600).keep_history()
    left = partition_names(sql)
    cut = sql("SELECT to_char((now() - interval '1 hour') AT TIME ZONE 'UTC', 'YYYYMMDD')")[0][0]
    kept = [name for name in names if name.removeprefix(PARTITION_PREFIX) >= cut]
    gone = [name for name in names if name not in kept]
    assert left[: len(kept)] == kept and len(gone) >= 1 and not set(gone) & set(left)
    assert where(sql, old) == (0, 0)
    assert sql("SELECT count(*) FROM pg_class WHERE relname = ANY(%s)", gone) == [(0,)]


def test_no_default_partition_a_row_older_than_every_partition_stays_for_the_pruning(app, sql):
    ancient = sql(
        "INSERT INTO workerpool_jobs (queue, task, state, finished_at) VALUES"
        " ('q', 'add', 'done', now() - interval '30 days') RETURNING id"
    )[0][0]
    m = maintenance(app, retention=86400)
    assert m.keep_history() == 0 and where(sql, ancient) == (1, 0)
    assert sql(
        "SELECT count(*) FROM pg_partitioned_table p JOIN pg_class c"
        " ON c.oid = p.partrelid WHERE c.relname = 'workerpool_jobs_history'"
        " AND p.partdefid <> 0"
    ) == [(0,)]
    m.prune_finished()
    assert where(sql, ancient) == (0, 0)


def test_keys_held_forever_stay_in_the_jobs_table_and_stay_held(app, sql):
    forever = app.enqueue("add", {"a": 1, "b": 1}, key="forever")
    live = app.enqueue("add", {"a": 2, "b": 2}, key="live", unique="live")
    testing.drain(app, "q")
    maintenance(app).keep_history()
    assert where(sql, forever) == (1, 0) and where(sql, live) == (0, 1)
    assert app.enqueue("add", {"a": 1, "b": 1}, key="forever") == forever
    again = app.enqueue("add", {"a": 2, "b": 2}, key="live", unique="live")
    assert again != live  # a live key was free once its job ended, moved or not


def test_concurrent_enqueuers_of_held_keys_during_moves_always_get_the_holder(app, sql):
    holders = {f"k{i}": app.enqueue("add", {"a": i, "b": 0}, key=f"k{i}") for i in range(20)}
    testing.drain(app, "q")
    # Finished after the holders: the moves take the oldest first, so the holders' turn comes
    # while the enqueuers run, and they keep running through forty more batches.
    sql(
        "INSERT INTO workerpool_jobs (queue, task, state, finished_at)"
        " SELECT 'q', 'add', 'done', now() FROM generate_series(1, 20000)"
    )
    m = maintenance(app, history_batch=500)
    seen: dict[str, set[int]] = {key: set() for key in holders}
    errors: list[BaseException] = []
    stop = threading.Event()

    def enqueuer() -> None:
        try:
            while not stop.is_set():
                for key in holders:
                    seen[key].add(app.enqueue("add", {"a": int(key[1:]), "b": 0}, key=key))
        except BaseException as exc:  # reported below, in the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=enqueuer) for _ in range(3)]
    for t in threads:
        t.start()
    try:
        moved = 0
        while moved < 20000:
            moved += m.history.move_batch() if m.history.floor else m.keep_history()
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert not errors
    for key in holders:  # and once the moves are over
        seen[key].add(app.enqueue("add", {"a": int(key[1:]), "b": 0}, key=key))
    assert seen == {key: {job_id} for key, job_id in holders.items()}
    assert sql("SELECT count(*) FROM workerpool_jobs WHERE key IS NOT NULL") == [(20,)]
    assert sql("SELECT count(*) FROM workerpool_jobs_history WHERE key IS NOT NULL") == [(0,)]


def test_a_moved_parent_is_done_for_a_new_dependent_and_its_result_is_read(app, sql):
    parent = app.enqueue("add", {"a": 40, "b": 2})
    testing.drain(app, "q")
    maintenance(app).keep_history()
    assert where(sql, parent) == (0, 1)
    child = app.enqueue("parents", {}, after=[parent])
    assert app.job(child).state == "pending"  # not waiting: its parent is done
    testing.drain(app, "q")
    assert app.result(child, timeout=1) == [42]
    with app.engine.connect() as conn:
        [edge] = dependencies.parents_of(conn, child)
    assert (edge.parent_id, edge.state) == (parent, "done")


def test_a_cancelled_dependent_stays_so_that_a_replayed_parent_can_reopen_it(app, sql):
    parent = app.enqueue("add", {"a": 1, "b": 1})
    child = app.enqueue("add", {"a": 1, "b": 1}, after=[parent])
    sql(
        "UPDATE workerpool_jobs SET state = 'dead', dead_reason = 'permanent',"
        " finished_at = now() WHERE id = %s",
        parent,
    )
    sql("UPDATE workerpool_jobs SET state = 'cancelled', finished_at = now() WHERE id = %s", child)
    maintenance(app).keep_history()
    assert where(sql, child) == (1, 0)


def test_a_batch_reads_its_moved_members_and_an_open_batch_keeps_them(app, sql):
    with app.batch(on_complete="report") as batch:
        ids = [batch.enqueue("member", {"n": n}) for n in range(3)]
    testing.drain(app, "q")
    with app.batch(on_complete="report") as still_open:
        first = still_open.enqueue("member", {"n": 0})
        still_open.enqueue("member", {"n": 1}, run_at=LATER)
    testing.drain(app, "q")
    maintenance(app).keep_history()
    assert all(where(sql, job_id) == (0, 1) for job_id in ids)
    assert where(sql, first) == (1, 0)  # its batch's outcome still counts it
    status_now = app.batch_status(batch.id)
    assert (status_now.total, status_now.done, status_now.finished) == (3, 3, True)
    with app.engine.connect() as conn:
        page = batches_sql.member_page(conn, batch.id, "done", 0, 10, status_now.callback_ids)
        states = batches_sql.callback_states(conn, status_now.callback_ids)
    assert [(row.id, row.result) for row in page] == [(i, {"n": n}) for n, i in enumerate(ids)]
    assert set(states.values()) == {"done"}


def test_status_shows_the_history_as_a_labelled_estimate(app, sql):
    for n in range(50):
        app.enqueue("add", {"a": n, "b": 0})
    testing.drain(app, "q")
    maintenance(app).keep_history()
    for name in partition_names(sql):
        sql(f"ANALYZE {name}")
    shown = status.collect(app.engine)["history"]
    assert shown["rows_estimate"] == 50 and shown["partitions"] == 11
    assert "~50 finished jobs (estimated) in 11 partitions" in status.render(
        status.collect(app.engine)
    )


def test_status_counts_the_moved_jobs_before_any_analyze(app, sql):
    for n in range(7):
        app.enqueue("add", {"a": n, "b": 0})
    cancelled = app.enqueue("add", {"a": 0, "b": 0}, run_at=LATER)
    app.cancel([cancelled])
    testing.drain(app, "q")
    assert maintenance(app).keep_history() == 8
    app.enqueue("add", {"a": 1, "b": 1})
    testing.drain(app, "q")  # one more done, still in the jobs table
    shown = status.collect(app.engine)
    counts = shown["queues"]["q"]["counts"]
    assert (counts["done"], counts["cancelled"]) == (8, 1)  # 7 moved + 1 here; 1 moved
    assert shown["history"]["rows_estimate"] == 8  # a fresh partition, never analyzed


def test_the_dashboard_shows_a_moved_job_and_counts_it_in_the_overview(app_pool, http, sql):
    app_pool.maintenance(history_delay=0)
    job = sql(
        "INSERT INTO workerpool_jobs (queue, task, state, finished_at, result)"
        " VALUES ('default', 'noop', 'done', now(), '\"answer-42\"') RETURNING id"
    )[0][0]
    Maintenance(app_pool.registry, app_pool.engine, worker_id="m").keep_history()
    assert where(sql, job) == (0, 1)
    page = http.get(f"/jobs/{job}")
    assert page.status_code == 200 and "answer-42" in page.text
    with app_pool.engine.connect() as conn:
        minutes = dashboard_reads.finished_per_minute(conn, 60)
    assert [(row.count, row.moved) for row in minutes] == [(1, True)]


def test_moved_jobs_are_counted_by_the_minute_and_the_chart_reads_the_counts(app, sql):
    sql(
        "INSERT INTO workerpool_jobs (queue, task, state, finished_at)"
        " SELECT 'q', 'add', 'done', date_trunc('minute', now()) FROM generate_series(1, 30)"
    )
    sql(
        "INSERT INTO workerpool_jobs (queue, task, state, finished_at, dead_reason)"
        " SELECT 'q', 'add', 'dead', now(), 'exhausted' FROM generate_series(1, 3)"
    )
    assert maintenance(app).keep_history() == 30
    assert sql("SELECT queue, state, count FROM workerpool_finished_minutes") == [("q", "done", 30)]
    sql("TRUNCATE workerpool_jobs_history")  # the chart counts moved jobs without their rows
    with app.engine.connect() as conn:
        rows = dashboard_reads.finished_per_minute(conn, 60, cap=2)
    assert sorted((r.state, r.count, r.moved) for r in rows) == [
        ("dead", 2, False),
        ("done", 30, True),
    ]

    # A second move into the same minute adds to its count; the retention prunes the counts.
    sql(
        "INSERT INTO workerpool_jobs (queue, task, state, finished_at)"
        " VALUES ('q', 'add', 'done', date_trunc('minute', now()))"
    )
    assert maintenance(app).keep_history() == 1
    assert sql("SELECT count FROM workerpool_finished_minutes") == [(31,)]
    sql("UPDATE workerpool_finished_minutes SET minute = minute - interval '8 days'")
    maintenance(app, retention=7 * 86400).keep_history()
    assert sql("SELECT count(*) FROM workerpool_finished_minutes") == [(0,)]


@pytest.mark.parametrize(
    "setting",
    [
        {"history_partition_days": 0},
        {"history_ahead": 400},
        {"history_batch": "5"},
        {"history_delay": -1},
        {"history_delay": float("inf")},
        {"history": "yes"},
    ],
)
def test_bad_history_settings_are_refused_by_name(pool, setting):
    [name] = setting
    with pytest.raises(ConfigError, match=f"maintenance: {name} must be"):
        pool.maintenance(**setting)


# -- a move cut at any instant ----------------------------------------------------------------


ROWS = 200_000


def load_done(sql, count: int = ROWS) -> None:
    sql(
        "INSERT INTO workerpool_jobs (queue, task, state, finished_at, result)"
        " SELECT 'q', 'add', 'done', now() - interval '1 minute', to_jsonb(n)"
        " FROM generate_series(1, %s) AS n",
        count,
    )


def intact(sql, count: int = ROWS) -> None:
    """Every row in exactly one of the two tables."""
    hot = sql("SELECT count(*) FROM workerpool_jobs")[0][0]
    moved = sql("SELECT count(*) FROM workerpool_jobs_history")[0][0]
    both = sql("SELECT count(*) FROM workerpool_jobs j JOIN workerpool_jobs_history h USING (id)")[
        0
    ][0]
    assert (hot + moved, both) == (count, 0)


def moving_backend(sql) -> int | None:
    rows = sql(
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
        " AND state = 'active' AND query LIKE %s",
        f"%{MOVE_SQL}%",
    )
    return rows[0][0] if rows else None


def test_a_backend_terminated_mid_move_loses_and_duplicates_nothing(app, sql):
    load_done(sql)
    m = maintenance(app, history_batch=100_000, prune_batches_per_pass=1)
    m.history.keep_partitions()
    failure: list[BaseException] = []

    def mover() -> None:
        try:
            m.history.move_batch()
        except BaseException as exc:  # the terminated connection's error, expected
            failure.append(exc)

    thread = threading.Thread(target=mover)
    thread.start()
    pid = wait_until(
        lambda: moving_backend(sql),
        timeout=20,
        interval=0.005,
        message="the move statement running",
    )
    sql("SELECT pg_terminate_backend(%s)", pid)
    thread.join()
    assert failure, "the move finished before it was cut: nothing was tested"
    intact(sql)
    while m.keep_history():
        pass
    intact(sql)
    assert sql("SELECT count(*) FROM workerpool_jobs_history")[0][0] == ROWS


MOVER_SCRIPT = """
import sys
from workerpool import WorkerPool
from workerpool.runtime.maintenance import Maintenance
pool = WorkerPool(sys.argv[1])
pool.maintenance(history_delay=0, history_batch=100_000)
Maintenance(pool.registry, pool.engine, worker_id="doomed").keep_history()
"""


@pytest.mark.slow
def test_a_maintenance_process_killed_mid_move_loses_and_duplicates_nothing(app, sql, db_url):
    load_done(sql)
    maintenance(app).history.keep_partitions()
    url = db_url.render_as_string(hide_password=False)
    child = subprocess.Popen(
        [sys.executable, "-c", MOVER_SCRIPT, url], env={**os.environ, "PYTHONPATH": os.getcwd()}
    )
    try:
        pid = wait_until(
            lambda: moving_backend(sql),
            timeout=30,
            interval=0.005,
            message="the child's move statement running",
        )
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.wait(timeout=10)
    assert child.returncode == -signal.SIGKILL
    wait_until(
        lambda: not sql("SELECT 1 FROM pg_stat_activity WHERE pid = %s", pid),
        timeout=30,
        message="the killed client's backend gone",
    )
    intact(sql)
    m = maintenance(app, history_batch=100_000)
    while m.keep_history():
        pass
    intact(sql)


def test_one_mover_at_a_time_across_replicas(app, sql, dsn):
    load_done(sql, 1000)
    with psycopg.connect(dsn) as other:  # another replica's move, in progress
        other.execute("SELECT pg_advisory_xact_lock(%s)", (history_sql.HISTORY_LOCK,))
        assert maintenance(app).keep_history() == 0
    assert maintenance(app).keep_history() == 1000


def test_cancelling_a_moved_job_says_it_had_finished_and_changes_nothing(app, sql):
    job = app.enqueue("add", {"a": 1, "b": 2})
    testing.drain(app, "q")
    assert maintenance(app).keep_history() == 1
    result = app.cancel([job])
    assert where(sql, job) == (0, 1)
    assert app.job(job).state == "done"
    assert result.finished == [job] and result.cancelled == []


def test_the_chaos_checker_reads_the_jobs_the_history_holds(app, sql):
    from workerpool.chaos import ledger, runner

    moved = app.enqueue("add", {"a": 1, "b": 2})
    testing.drain(app, "q")
    assert maintenance(app).keep_history() == 1 and where(sql, moved) == (0, 1)
    with psycopg.connect(**db.connect_kwargs(app.url), autocommit=True) as conn:
        ledger.create_tables(conn)
    history = runner.read_history(app.url, [])
    assert history.jobs[moved]["state"] == "done" and history.jobs[moved]["task"] == "add"


def test_moved_jobs_stay_in_the_jobs_list_its_tabs_and_the_overview(app_pool, http, sql):
    """Finished jobs move a minute after they end: the list, its tabs and the overview read the
    history too (they showed Done 0, and a job cancelled a minute ago had left its tab)."""
    app_pool.maintenance(history_delay=0)
    done = [app_pool.enqueue("ok", {"n": n}) for n in range(3)]
    testing.drain(app_pool, "email")
    cancelled = app_pool.enqueue("ok", {"n": 9}, delay=600)
    app_pool.cancel([cancelled])
    waiting = app_pool.enqueue("ok", {"n": 10}, delay=600)
    Maintenance(app_pool.registry, app_pool.engine, worker_id="m").keep_history()
    assert [where(sql, i) for i in [*done, cancelled]] == [(0, 1)] * 4

    def listed(path: str) -> list[int]:
        return [int(i) for i in re.findall(r'<tr class="job" data-id="(\d+)"', http.get(path).text)]

    assert listed("/jobs?state=done") == done[::-1]
    assert listed("/jobs?state=cancelled") == [cancelled]
    assert listed("/jobs") == [waiting, cancelled, *done[::-1]]
    assert listed("/jobs?state=done&task=ok&queue=email") == done[::-1]  # filters on both
    first = http.get("/jobs?state=done&limit=2").text  # keyset paging across the history
    older = re.search(r'href="([^"]+)" id="page-older"', first)[1].replace("&amp;", "&")
    assert listed("/jobs?state=done&limit=2") == done[:0:-1] and listed(older) == done[:1]
    tabs = dict(
        re.findall(
            r'id="tab-(\w+)"[^>]*>\w+ <span class="count">(\d+)</span>', http.get("/jobs").text
        )
    )
    assert (tabs["all"], tabs["done"], tabs["cancelled"], tabs["pending"]) == ("5", "3", "1", "1")
    overview = http.get("/").text
    row = re.search(r'<tr id="queue-email">(.*?)</tr>', overview, re.S)[1]
    assert re.search(r'class="count-done">(?:≈ )?3<', row), row
    assert re.search(r'class="count-cancelled">(?:≈ )?1<', row), row
