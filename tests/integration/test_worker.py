"""The worker runtime in-process (the Worker on a thread), against real PostgreSQL.

Real processes (database restart, terminated backends, recycle, crash) are in
tests/processes/test_worker_process.py.
"""

from __future__ import annotations

import asyncio
import dataclasses
import socket
import threading
import time
from datetime import timedelta

import psycopg
import pytest

from tests.helpers.db import job_row, states
from tests.helpers.waiting import wait_until
from tests.helpers.workers import on_thread, running
from workerpool import Permanent, RetryLater, WorkerPool
from workerpool import sql as queries
from workerpool.model import exitcodes
from workerpool.runtime.worker import Worker, session_limits
from workerpool.sql import db

ENTRY_KEYS = {"attempt", "at", "type", "class", "message", "traceback", "worker"}


def blocking_task(pool: WorkerPool, name: str) -> tuple[threading.Event, threading.Event]:
    """A task on queue "q" that sets the first event when it starts, then waits for the second."""
    started, finish = threading.Event(), threading.Event()

    def block(job):
        started.set()
        finish.wait(20)

    pool.task(queue="q", name=name)(block)
    return started, finish


# -- concurrency -------------------------------------------------------------------------------


def test_concurrency_overlaps_jobs_and_claims_only_free_slots(pool, sql):
    pool.queue("q", concurrency=4, prefetch=0, poll_interval=0.05)  # test_prefetch.py: >0
    active, peak, processing, lock = [0], [0], [], threading.Lock()
    gate = threading.Barrier(4, timeout=10)

    @pool.task(queue="q")
    def overlap(job):
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        processing.append(
            sql("SELECT count(*) FROM workerpool_jobs WHERE state = 'processing'")[0][0]
        )
        gate.wait()  # only passes when four handlers run at the same time
        with lock:
            active[0] -= 1

    pool.enqueue_many([("overlap", {"n": i}) for i in range(12)])
    with running(pool, "q"):
        wait_until(lambda: states(sql) == {"done": 12}, 20, message="12 jobs done")
    assert peak[0] == 4
    assert max(processing) <= 4  # never claims more than its free slots


def test_async_handlers_overlap_on_the_event_loop(pool, sql):
    pool.queue("q", concurrency=4, poll_interval=0.05)
    active, peak = [0], [0]

    @pool.task(queue="q", max_attempts=1)
    async def gather(job):
        active[0] += 1  # one event loop thread: no lock needed
        peak[0] = max(peak[0], active[0])
        deadline = time.monotonic() + 10
        while peak[0] < 4:  # only finishes once four coroutines ran at the same time
            if time.monotonic() > deadline:
                raise AssertionError("async handlers did not overlap")
            await asyncio.sleep(0.01)
        active[0] -= 1

    pool.enqueue_many([("gather", {"n": i}) for i in range(8)])
    with running(pool, "q"):
        wait_until(lambda: states(sql) == {"done": 8}, 20, message="8 async jobs done")
    assert peak[0] == 4


# -- wake-ups ----------------------------------------------------------------------------------


def test_notification_wakes_an_idle_worker_long_before_the_poll(pool, sql):
    pool.queue("q", poll_interval=30)
    started: list[float] = []
    pool.task(queue="q", name="ping")(lambda job: started.append(time.monotonic()))
    with running(pool, "q") as worker:
        wait_until(
            lambda: worker.listener and worker.listener.connected.is_set(),
            10,
            message="listener connected",
        )
        wait_until(lambda: worker.counters.claimed == 0 and not worker._wake.is_set(), 5)
        sent = time.monotonic()
        pool.enqueue("ping", {})
        wait_until(lambda: started, 10, message="job started")
    assert started[0] - sent < 5  # the poll would take 30 s


def test_with_notifications_off_the_poll_still_finds_the_job(db_url, sql):
    pool = WorkerPool(db_url, notify=False)  # e.g. behind PgBouncer transaction pooling
    pool.queue("q", poll_interval=0.1)
    pool.task(queue="q", name="ping")(lambda job: None)
    try:
        with running(pool, "q") as worker:
            assert worker.listener is None
            pool.enqueue("ping", {})
            wait_until(lambda: states(sql) == {"done": 1}, 10, message="job done by polling")
    finally:
        pool.dispose()


def test_the_listener_subscribes_again_after_its_connection_is_killed(pool, sql):
    pool.queue("q", poll_interval=30)
    started: list[float] = []
    pool.task(queue="q", name="ping")(lambda job: started.append(time.monotonic()))
    with running(pool, "q") as worker:
        wait_until(lambda: worker.listener and worker.listener.connected.is_set(), 10)
        killed = sql(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database()"
            " AND application_name = 'workerpool-listen:q'"
        )
        assert killed == [(True,)]
        wait_until(
            lambda: worker.listener.reconnects == 1 and worker.listener.connected.is_set(),
            10,
            message="listener reconnected",
        )
        wait_until(lambda: not worker._wake.is_set(), 5)
        sent = time.monotonic()
        pool.enqueue("ping", {})
        wait_until(lambda: started, 10, message="job started after the reconnect")
    assert started[0] - sent < 5


# -- leases ------------------------------------------------------------------------------------


def test_a_job_running_three_times_stale_after_is_never_reclaimed(pool, sql):
    pool.queue("q", concurrency=2, poll_interval=0.05, stale_after=1.0)  # renewed every ~0.33 s
    runs: list[int] = []

    @pool.task(queue="q")
    def long(job):
        runs.append(job.attempt)
        time.sleep(3.0)  # the handler's own work: 3x stale_after

    job_id = pool.enqueue("long", {})
    with running(pool, "q") as first:
        wait_until(lambda: runs, 10, message="first worker started the job")
        with running(pool, "q") as second:  # polls the stale arm every 50 ms meanwhile
            wait_until(lambda: states(sql) == {"done": 1}, 10, message="job done")
    row = job_row(sql, job_id)
    assert (row["state"], row["attempts"], row["claimed_by"]) == ("done", 1, first.id)
    assert runs == [1] and second.counters.claimed == 0 and first.counters.lost == 0


def test_without_renewal_the_second_owner_wins_and_the_late_completion_is_rejected(pool, sql):
    # prefetch=0: with buffer room the first worker could re-claim its own stale job itself
    pool.queue("q", concurrency=1, prefetch=0, poll_interval=0.05, stale_after=0.5)
    runs: list[int] = []
    second_done = threading.Event()

    @pool.task(queue="q")
    def contested(job):
        runs.append(job.attempt)
        if job.attempt == 1:
            second_done.wait(20)  # the first owner finishes late, after the second owner
        else:
            second_done.set()

    job_id = pool.enqueue("contested", {})
    with running(pool, "q", renew_leases=False) as first:
        wait_until(lambda: runs, 10, message="first owner started")
        with running(pool, "q") as second:
            wait_until(lambda: first.counters.lost == 1, 15, message="late completion rejected")
    row = job_row(sql, job_id)
    assert (row["state"], row["attempts"], row["claimed_by"]) == ("done", 2, second.id)
    assert runs == [1, 2]
    assert first.counters.states == {} and second.counters.states == {"done": 1}


# -- outcomes ----------------------------------------------------------------------------------


class Unprintable(Exception):
    def __str__(self):
        raise RuntimeError("no")


def test_every_outcome_path_writes_the_state_and_history_of_design_section_4(pool, sql):
    pool.queue("q", poll_interval=0.05)
    pool.task(queue="q", name="ok")(lambda job: None)

    @pool.task(queue="q", name="flaky", max_attempts=3)
    def flaky(job):
        raise ValueError(f"boom on attempt {job.attempt}")

    @pool.task(queue="q", name="last", max_attempts=1)
    def last(job):
        raise ConnectionError("x" * 10_000)

    @pool.task(queue="q", name="perm")
    def perm(job):
        raise Permanent("422: invalid address")

    @pool.task(queue="q", name="later", max_attempts=1)
    def later(job):
        raise RetryLater(3600)

    @pool.task(queue="q", name="weird", max_attempts=1)
    def weird(job):
        raise Unprintable()

    ids = {
        name: pool.enqueue(name, {}) for name in ("ok", "flaky", "last", "perm", "later", "weird")
    }
    with running(pool, "q") as worker:
        wait_until(lambda: worker.counters.finished == 6, 10, message="6 outcomes")
    rows = {name: job_row(sql, job_id) for name, job_id in ids.items()}
    summary = {
        name: (r["state"], r["dead_reason"], r["attempts"], r["finished"], len(r["errors"]))
        for name, r in rows.items()
    }
    assert summary == {
        "ok": ("done", None, 1, True, 0),
        "flaky": ("failed", None, 1, False, 1),
        "last": ("dead", "exhausted", 1, True, 1),
        "perm": ("dead", "permanent", 1, True, 1),
        "later": ("pending", None, 0, False, 0),  # snoozed: the attempt is given back
        "weird": ("dead", "exhausted", 1, True, 1),
    }
    assert timedelta(seconds=10) < rows["flaky"]["wait"] <= timedelta(seconds=30)  # backoff
    assert timedelta(minutes=59) < rows["later"]["wait"] <= timedelta(hours=1)
    for name in ("flaky", "last", "perm", "weird"):
        entry = rows[name]["errors"][0]
        assert set(entry) == ENTRY_KEYS
        assert (entry["attempt"], entry["worker"]) == (1, worker.id)
        assert "Traceback" in entry["traceback"] and len(entry["traceback"]) <= 8100
    assert rows["flaky"]["errors"][0]["type"] == "ValueError"
    assert rows["flaky"]["errors"][0]["class"] == "builtins.ValueError"  # importable, by path
    assert rows["flaky"]["errors"][0]["message"] == "boom on attempt 1"
    assert rows["last"]["errors"][0]["message"].endswith("… [8000 more characters]")
    assert rows["weird"]["errors"][0]["message"] == (
        "<unprintable Unprintable: str() raised RuntimeError>"
    )
    assert worker.counters.states == {"done": 1, "failed": 1, "dead": 3, "pending": 1}


def test_a_timeout_is_a_failure_and_a_handler_that_ignores_it_recycles_the_worker(
    pool, sql, monkeypatch
):
    monkeypatch.setattr("workerpool.runtime.worker.timeouts.RECYCLE_GRACE", 0.3)
    pool.queue("q", poll_interval=0.05)
    release = threading.Event()

    @pool.task(queue="q", timeout=0.2, max_attempts=2)
    def stuck(job):
        release.wait(20)

    job_id = pool.enqueue("stuck", {})
    worker = Worker(pool.registry, pool.url, "q")
    _, code = on_thread(worker)
    wait_until(lambda: code, 15, message="worker to exit for recycling")
    release.set()
    assert code == [exitcodes.RECYCLE]
    row = job_row(sql, job_id)
    assert (row["state"], row["attempts"]) == ("failed", 1)
    entry = row["errors"][0]
    assert (entry["type"], entry["attempt"]) == ("TimeoutError", 1)
    assert "exceeded its timeout of 0.2s" in entry["message"]
    assert "in stuck" in entry["traceback"]  # where the handler was when time ran out


def test_an_async_handler_past_its_timeout_is_cancelled_and_frees_its_slot(pool, sql):
    pool.queue("q", concurrency=1, poll_interval=0.05)
    cancelled = threading.Event()

    @pool.task(queue="q", timeout=0.2, max_attempts=1)
    async def sleepy(job):
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    pool.task(queue="q", name="after")(lambda job: None)
    slow_id = pool.enqueue("sleepy", {})
    after_id = pool.enqueue("after", {}, priority=-1)
    with running(pool, "q") as worker:  # exits 0: no recycle needed
        wait_until(
            lambda: job_row(sql, after_id)["state"] == "done",
            10,
            message="the next job ran in the freed slot",
        )
    assert cancelled.is_set()
    row = job_row(sql, slow_id)
    assert (row["state"], row["dead_reason"], row["errors"][0]["type"]) == (
        "dead",
        "exhausted",
        "TimeoutError",
    )
    assert worker.counters.timeouts == 1


# -- checkpoints and drain ---------------------------------------------------------------------


def test_a_checkpoint_survives_a_drain_release_and_the_next_attempt_resumes(pool, sql):
    pool.queue("q", poll_interval=0.05, drain_timeout=0.3)
    release = threading.Event()
    seen: list = []

    @pool.task(queue="q")
    def resumable(job):
        seen.append((job.attempt, job.checkpoint_data))
        if job.checkpoint_data is None:
            job.checkpoint({"step": 1})
            release.wait(20)

    job_id = pool.enqueue("resumable", {})
    with running(pool, "q") as worker:
        wait_until(lambda: job_row(sql, job_id)["checkpoint"], 10, message="checkpoint saved")
    release.set()
    assert worker.counters.released == 1
    row = job_row(sql, job_id)
    assert (row["state"], row["attempts"], row["checkpoint"]) == ("pending", 0, {"step": 1})
    assert row["errors"][-1]["type"] == "Interrupted"
    with running(pool, "q"):
        wait_until(lambda: job_row(sql, job_id)["state"] == "done", 10)
    assert seen == [(1, None), (1, {"step": 1})]  # same attempt number: the drain refunded it


def test_a_drain_whose_release_is_refused_exits_non_zero_and_keeps_the_claim(
    pool, sql, dsn, monkeypatch
):
    """Exit 0 tells the supervisor "released"; a worker that could not give its jobs back says
    otherwise, so the supervisor's releaser takes them instead of leaving them to stale_after."""
    monkeypatch.setattr("workerpool.runtime.worker.session.LOCK_TIMEOUT", 0.2)
    pool.queue("q", poll_interval=0.05, drain_timeout=0.5)
    started, release = blocking_task(pool, "stuck")
    job_id = pool.enqueue("stuck", {})
    worker = Worker(pool.registry, pool.url, "q")
    blocker = psycopg.connect(dsn)
    try:
        thread, code = on_thread(worker)
        wait_until(started.is_set, 10, message="job started")
        blocker.execute("LOCK TABLE workerpool_jobs IN ACCESS EXCLUSIVE MODE")
        worker.stop()
        thread.join(30)
        assert code == [exitcodes.UNRELEASED]
        blocker.rollback()
        row = job_row(sql, job_id)
        assert (row["state"], row["claimed_by"]) == ("processing", worker.id)
    finally:
        release.set()
        blocker.close()
        worker.stop()


def test_the_drain_deadline_counts_from_the_stop_request_not_from_when_the_loop_notices(
    pool, sql, caplog
):
    """The supervisor's SIGKILL comes drain_timeout + margin after SIGTERM: a loop that notices
    the stop late (here held inside a pass) must not give its jobs a full drain_timeout more."""
    caplog.set_level("INFO", logger="workerpool.worker")
    pool.queue("q", poll_interval=0.05, drain_timeout=3.0)
    started, finish = blocking_task(pool, "slow")
    hold, holding, resume = threading.Event(), threading.Event(), threading.Event()

    def on_tick() -> None:  # runs on the main loop's thread
        if hold.is_set() and not resume.is_set():
            holding.set()
            resume.wait(20)

    job_id = pool.enqueue("slow", {})
    worker = Worker(pool.registry, pool.url, "q", on_tick=on_tick)
    try:
        thread, code = on_thread(worker)
        wait_until(started.is_set, 10, message="job started")
        hold.set()
        wait_until(holding.is_set, 10, message="main loop held")
        drain_deadline = time.monotonic() + 3.0  # drain_timeout, counted from here
        worker.stop()
        wait_until(
            lambda: time.monotonic() > drain_deadline + 0.2,
            10,
            message="the drain deadline passed while the loop is held",
        )
        resumed = time.monotonic()
        resume.set()
        wait_until(
            lambda: any(getattr(r, "event", "") == "drain_started" for r in caplog.records),
            10,
            message="drain started",
        )
        # a drain that still had time left would wait for the job (a new drain_timeout): this
        # one gives it back at once, while the handler still runs
        wait_until(
            lambda: job_row(sql, job_id)["state"] == "pending",
            10,
            message="the running job given back",
        )
        assert time.monotonic() - resumed < 3.0, "the drain waited a new drain_timeout"
        finish.set()  # too late now: its lease is gone
        thread.join(10)
        assert code == [exitcodes.OK]
    finally:
        resume.set()
        finish.set()
        worker.stop()
    row = job_row(sql, job_id)
    assert (row["state"], row["errors"][-1]["type"]) == ("pending", "Interrupted")


def test_a_job_draining_past_stale_after_keeps_its_lease(pool, sql):
    """The drain renews leases like any pass, so drain_timeout may exceed stale_after: no other
    worker's stale arm takes a job that is still finishing."""
    # stale_after 2 s, not 1: a worker starved of CPU by a busy suite must still renew in time
    pool.queue("q", poll_interval=0.05, stale_after=2.0, drain_timeout=10.0)
    started, finish = blocking_task(pool, "long_finish")
    job_id = pool.enqueue("long_finish", {})
    stolen: list = []

    def thief() -> bool:
        with pool.engine.begin() as conn:
            stolen.extend(
                queries.claim(
                    conn,
                    queue="q",
                    worker="thief",
                    limit=1,
                    task_versions=pool.registry.task_versions("q"),
                )
            )
        return bool(stolen)

    worker = Worker(pool.registry, pool.url, "q")
    try:
        thread, code = on_thread(worker)
        wait_until(started.is_set, 10, message="job started")
        worker.stop()
        deadline = time.monotonic() + 5.0  # 2.5 x stale_after into the drain
        while time.monotonic() < deadline:
            assert not thief(), stolen
            time.sleep(0.1)  # the thief's pace: it tries ten times per second, not a wait
        finish.set()
        thread.join(10)
        assert code == [exitcodes.OK]
    finally:
        finish.set()
        worker.stop()
    row = job_row(sql, job_id)
    assert (row["state"], row["attempts"]) == ("done", 1)


def test_worker_releases_its_predecessors_claims_at_boot(pool, sql):
    pool.queue("q", poll_interval=0.05)
    pool.task(queue="q", name="ok", max_attempts=1)(lambda job: None)
    pool.task(queue="q", name="ok2", max_attempts=3)(lambda job: None)
    sql(
        "INSERT INTO workerpool_jobs (queue, task, state, attempts, max_attempts, claimed_by,"
        " claimed_at) VALUES ('q','ok','processing',1,1,'dead:1:x', now()),"
        " ('q','ok2','processing',1,3,'dead:1:x', now())"
    )
    with running(pool, "q", orphans=("dead:1:x",)):
        wait_until(lambda: states(sql) == {"done": 2}, 10)
    # it held two jobs: neither is charged, each ran again alone as a suspect
    assert sql(
        "SELECT task, attempts, crashes, errors->0->>'type' FROM workerpool_jobs ORDER BY task"
    ) == [("ok", 1, 1, "WorkerLost"), ("ok2", 1, 1, "WorkerLost")]


# -- payload versions --------------------------------------------------------------------------


def test_an_old_worker_never_claims_a_newer_payload_version(pool, db_url, sql):
    pool.queue("q", poll_interval=0.05)  # the old deployment: greet v1
    old_seen: list = []
    pool.task(queue="q", name="greet", version=1)(lambda job: old_seen.append(job.payload))
    new = WorkerPool(db_url)  # the new deployment: greet v2, with an upcaster from v1
    new.queue("q", poll_interval=0.05)
    new_seen: list = []

    @new.task(queue="q", version=2, upcasters={1: lambda p: {"first_name": p["name"]}})
    def greet(job):
        new_seen.append((job.payload_version, job.payload))

    try:
        v2 = new.enqueue("greet", {"first_name": "Grace"}, priority=5)
        v1 = pool.enqueue("greet", {"name": "Ada"})
        ticks = [0]
        with running(pool, "q", on_tick=lambda: ticks.__setitem__(0, ticks[0] + 1)):
            wait_until(lambda: job_row(sql, v1)["state"] == "done", 10)
            seen_at = ticks[0]
            wait_until(lambda: ticks[0] >= seen_at + 5, 10, message="more claim passes")
        assert old_seen == [{"name": "Ada"}]
        assert job_row(sql, v2)["state"] == "pending"  # left alone by the old worker
        v1_again = pool.enqueue("greet", {"name": "Alan"})
        with running(new, "q"):
            wait_until(lambda: states(sql) == {"done": 3}, 10)
        assert sorted(new_seen) == [(1, {"first_name": "Alan"}), (2, {"first_name": "Grace"})]
        assert sql("SELECT payload_version FROM workerpool_jobs WHERE id = %s", v1_again) == [(1,)]
    finally:
        new.dispose()


def test_an_upcaster_that_raises_fails_the_attempt_and_the_worker_carries_on(pool, db_url, sql):
    old = WorkerPool(db_url)
    old.task(queue="q", name="greet", version=1)(lambda job: None)
    bad = old.enqueue("greet", {"nom": "Ada"})
    old.dispose()
    pool.queue("q", poll_interval=0.05)
    pool.task(
        queue="q",
        name="greet",
        version=2,
        max_attempts=2,
        upcasters={1: lambda p: {"first_name": p["name"]}},
    )(lambda job: None)
    good = pool.enqueue("greet", {"first_name": "Grace"})
    with running(pool, "q"):
        wait_until(
            lambda: (
                job_row(sql, good)["state"] == "done" and job_row(sql, bad)["state"] == "failed"
            ),
            10,
        )
    entry = job_row(sql, bad)["errors"][0]
    assert entry["type"] == "UpcastError"
    assert entry["message"] == "task greet: upcaster 1->2 raised KeyError: 'name'"


# -- transactions and time limits --------------------------------------------------------------


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_handler_holding_its_own_transaction_does_not_make_the_worker_hold_one(
    pool, sql, dsn, kind
):
    pool.queue("q", poll_interval=0.05, concurrency=2)
    inside, release = threading.Event(), threading.Event()

    def own_transaction():
        conn = psycopg.connect(dsn, application_name="handler-own")
        conn.execute("SELECT 1")  # psycopg opens a transaction and leaves it open
        return conn

    if kind == "sync":

        @pool.task(queue="q", name="hold")
        def hold(job):
            with own_transaction():
                inside.set()
                release.wait(20)
    else:

        @pool.task(queue="q", name="hold")
        async def hold(job):
            with own_transaction():
                inside.set()
                while not release.is_set():
                    await asyncio.sleep(0.01)

    pool.enqueue("hold", {})
    samples: list[list[tuple]] = []

    def sample() -> bool:
        samples.append(
            sql(
                "SELECT application_name, state, clock_timestamp() - xact_start > interval '300 ms'"
                " FROM pg_stat_activity WHERE datname = current_database()"
                " AND pid <> pg_backend_pid()"
                " AND xact_start IS NOT NULL"
            )
        )
        return len(samples) >= 20

    with running(pool, "q"):
        wait_until(inside.is_set, 10)
        wait_until(sample, 10, interval=0.05, message="20 samples of pg_stat_activity")
        release.set()
        wait_until(lambda: states(sql) == {"done": 1}, 10)
    held = {(name, state, old) for rows in samples for name, state, old in rows}
    assert ("handler-own", "idle in transaction", True) in held  # the check sees a held one
    assert {row for row in held if row[0].startswith("workerpool") and row[2]} == set()


def test_the_claim_is_bounded_by_lock_timeout_and_ticks_stop_while_it_fails(
    pool, sql, dsn, monkeypatch
):
    monkeypatch.setattr("workerpool.runtime.worker.session.LOCK_TIMEOUT", 0.2)
    pool.queue("q", poll_interval=0.05)
    pool.task(queue="q", name="ok")(lambda job: None)
    pool.enqueue("ok", {})
    ticks = [0]
    blocker = psycopg.connect(dsn)
    try:
        blocker.execute("LOCK TABLE workerpool_jobs IN ACCESS EXCLUSIVE MODE")  # DDL-like lock
        with running(pool, "q", on_tick=lambda: ticks.__setitem__(0, ticks[0] + 1)) as worker:
            wait_until(lambda: worker.counters.db_errors >= 3, 10, message="claims time out")
            assert ticks[0] == 0  # no heartbeat while the database cannot serve the claim
            blocker.rollback()
            wait_until(lambda: states(sql) == {"done": 1}, 10, message="job done after unlock")
            wait_until(lambda: ticks[0] > 0, 5, message="ticks resume")
    finally:
        blocker.close()


@pytest.mark.parametrize("pooled", [False, True], ids=["direct", "pgbouncer"])
def test_worker_connections_start_with_the_limits_and_keep_the_urls_options(
    db_url, monkeypatch, pooled
):
    """The one-statement claim runs outside any transaction of ours: its limits are the
    session's. Behind PgBouncer a session is shared, so nothing is set there."""
    url = db_url.update_query_dict({"options": "-c work_mem=7MB"})
    engine = db.create(url, session_settings=session_limits(), pooled=pooled)
    try:
        with engine.connect() as conn:
            shown = [
                conn.exec_driver_sql(f"SHOW {name}").scalar()
                for name in ("statement_timeout", "lock_timeout", "work_mem")
            ]
    finally:
        engine.dispose()
    assert shown == (["0", "0", "7MB"] if pooled else ["15s", "3s", "7MB"])


def test_a_black_holed_database_errors_out_instead_of_hanging(monkeypatch):
    """A server that accepts TCP and never answers: connect_timeout bounds every attempt."""
    monkeypatch.setitem(db.CONNECT_ARGS, "connect_timeout", 2)  # libpq's minimum
    hole = socket.create_server(("127.0.0.1", 0), backlog=16)  # never accept()s, never replies
    port = hole.getsockname()[1]
    pool = WorkerPool(f"postgresql://postgres@127.0.0.1:{port}/nowhere")
    pool.queue("q", poll_interval=0.05)
    pool.task(queue="q", name="ok")(lambda job: None)
    ticks = [0]
    worker = Worker(
        pool.registry, pool.url, "q", on_tick=lambda: ticks.__setitem__(0, ticks[0] + 1)
    )
    thread = threading.Thread(target=worker.run, daemon=True)
    try:
        thread.start()
        wait_until(lambda: worker.counters.db_errors >= 1, 8, message="connect attempt timed out")
        assert ticks[0] == 0 and thread.is_alive()
        worker.stop()
        thread.join(10)
        assert not thread.is_alive()
    finally:
        worker.stop()
        hole.close()


def test_a_spec_given_to_the_worker_replaces_the_pools_queue_spec():
    """Settings loaded for a run reach the worker without changing the pool."""
    pool = WorkerPool("postgresql://nobody@127.0.0.1:1/none")
    pool.queue("q", drain_timeout=30)
    spec = dataclasses.replace(pool.registry.queue_spec("q"), drain_timeout=0.5)
    worker = Worker(pool.registry, pool.url, "q", spec=spec)
    assert worker.spec is spec and pool.registry.queue_spec("q").drain_timeout == 30
