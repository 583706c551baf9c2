"""Attribution of a lost worker's jobs and the isolation of suspects, against real PostgreSQL.

A process that dies holding one job is that job's fault (charged); one that dies holding
several cannot say which (each gets its attempt back and becomes a suspect); a suspect runs
alone. The same rules hold for the three ways a lost worker is found: the crash release, the
stale arm of the claim, and the sweep of stale exhausted leases.
"""

from __future__ import annotations

import threading

import psycopg
import pytest

from tests.helpers.waiting import wait_until
from tests.helpers.workers import running
from workerpool import WorkerPool
from workerpool import sql as queries
from workerpool.ops import status
from workerpool.ops.dead import list_dead
from workerpool.runtime.worker import Worker


@pytest.fixture
def app(pool: WorkerPool) -> WorkerPool:
    pool.queue("q", stale_after=300, concurrency=4, poll_interval=0.05)

    @pool.task(queue="q", max_attempts=3)
    def work(job):
        return None

    return pool


def claim(app: WorkerPool, worker: str, limit: int = 10, *, alone: bool = False):
    with app.engine.begin() as conn:
        return queries.claim(
            conn,
            queue="q",
            worker=worker,
            limit=limit,
            task_versions=app.registry.task_versions("q"),
            alone=alone,
        )


def reclaim(app: WorkerPool, worker: str):
    with app.engine.begin() as conn:
        return queries.reclaim_from_dead_worker(conn, worker)


def rows(sql) -> dict[int, tuple]:
    return {
        r[0]: r[1:]
        for r in sql(
            "SELECT id, state, attempts, crashes, dead_reason,"
            # held back: run_at later than the recovery that wrote the last entry (not now(): the
            # hold is one second, and a loaded machine may take that long to look)
            " coalesce(run_at > (errors->-1->>'at')::timestamptz, false) FROM workerpool_jobs"
        )
    }


def lost_entry(sql, job_id: int) -> dict:
    return sql("SELECT errors->-1 FROM workerpool_jobs WHERE id = %s", job_id)[0][0]


def test_a_death_holding_several_jobs_refunds_each_and_makes_them_suspects(app, sql):
    ids = app.enqueue_many([("work", {"n": n}) for n in range(3)])
    claim(app, "crashed")
    changed = reclaim(app, "crashed")
    assert sorted(r.id for r in changed) == ids
    assert all(rows(sql)[i] == ("pending", 0, 1, None, False) for i in ids), rows(sql)
    entry = lost_entry(sql, ids[0])
    assert (entry["type"], entry["worker"], entry["alone"], entry["attempt"]) == (
        "WorkerLost",
        "crashed",
        False,
        1,
    )
    assert sorted(entry["with"]) == ids[1:]
    assert "the attempt does not count" in entry["message"]


def test_a_death_holding_one_job_charges_it_and_holds_it_back(app, sql):
    job = app.enqueue("work", {})
    claim(app, "crashed")
    reclaim(app, "crashed")
    assert rows(sql)[job] == ("pending", 1, 1, None, True)  # attempt spent, waits a little
    entry = lost_entry(sql, job)
    assert (entry["alone"], entry["with"]) == (True, [])
    assert "alone: the attempt counts" in entry["message"]


def test_a_job_that_dies_alone_on_its_last_attempt_is_dead_abandoned_and_says_why(app, sql):
    job = app.enqueue("work", {})
    sql(
        "UPDATE workerpool_jobs SET attempts = 2, crashes = 2, errors ="
        ' \'[{"type": "WorkerLost", "alone": true}]\' WHERE id = %s',
        job,
    )
    [row] = claim(app, "crashed", alone=True)
    assert row.attempts == 3
    [changed] = reclaim(app, "crashed")
    assert (changed.state, changed.attempts, changed.crashes) == ("dead", 3, 3)
    assert rows(sql)[job][:4] == ("dead", 3, 3, "abandoned")
    assert "killed its process 2 times while running alone" in changed.last_error["message"]
    [listed] = list_dead(app).jobs  # what `workerpool dead list` shows
    assert (listed.id, listed.reason) == (job, "abandoned")
    assert "killed its process 2 times while running alone" in listed.last_error["message"]


def test_status_counts_the_suspects_of_each_queue(app, sql):
    app.enqueue_many([("work", {"n": n}) for n in range(3)])
    sql("UPDATE workerpool_jobs SET crashes = 1 WHERE id IN (SELECT min(id) FROM workerpool_jobs)")
    assert status.collect(app.engine)["queues"]["q"]["suspects"] == 1


def test_a_worker_holding_jobs_never_takes_a_suspect(app, sql):
    suspect = app.enqueue("work", {}, priority=9)
    ordinary = app.enqueue_many([("work", {"n": n}) for n in range(3)])
    sql("UPDATE workerpool_jobs SET crashes = 1 WHERE id = %s", suspect)
    assert sorted(r.id for r in claim(app, "busy", alone=False)) == ordinary
    assert rows(sql)[suspect][0] == "pending"


def test_a_worker_holding_nothing_takes_one_suspect_and_nothing_else(app, sql):
    suspect = app.enqueue("work", {})
    app.enqueue_many([("work", {"n": n}) for n in range(3)])
    sql("UPDATE workerpool_jobs SET crashes = 1 WHERE id = %s", suspect)
    assert [(r.id, r.crashes) for r in claim(app, "idle", alone=True)] == [(suspect, 1)]
    assert len(claim(app, "idle-too", alone=True)) == 3  # no suspect left: a full batch


def test_an_ordinary_outcome_clears_the_suspicion(app, sql):
    failing, snoozed = app.enqueue("work", {}), app.enqueue("work", {})
    sql("UPDATE workerpool_jobs SET crashes = 1")
    claimed = {r.id: r for r in claim(app, "w", alone=True)}
    claimed |= {r.id: r for r in claim(app, "w", alone=True)}
    with app.engine.begin() as conn:
        queries.fail(conn, queries.Lease(failing, claimed[failing].attempts, "w"), {"type": "X"}, 0)
        queries.snooze(conn, queries.Lease(snoozed, claimed[snoozed].attempts, "w"), 0)
    assert sql("SELECT crashes FROM workerpool_jobs ORDER BY id") == [(0,), (0,)]


def test_stale_recovery_attributes_a_vanished_hosts_jobs_like_a_crash(app, sql):
    gang = app.enqueue_many([("work", {"n": n}) for n in range(3)])
    claim(app, "vanished-with-three")
    lone = app.enqueue("work", {})
    claim(app, "vanished-with-one")
    sql("UPDATE workerpool_jobs SET claimed_at = now() - interval '301 seconds'")
    assert claim(app, "rescuer", alone=True) == []  # a claim never takes a stale lease
    with app.engine.begin() as conn:  # a worker's renewal beat recovers them
        assert len(queries.recover_stale(conn, "q", 300).rows) == 4
    now = rows(sql)
    assert all(now[i] == ("pending", 0, 1, None, False) for i in gang), now
    assert now[lone] == ("pending", 1, 1, None, True)
    assert lost_entry(sql, lone)["worker"] == "vanished-with-one"
    assert "lease went stale" in lost_entry(sql, lone)["message"]


def test_the_sweep_refunds_an_exhausted_bystander_and_buries_a_lone_culprit(app, sql):
    bystander, neighbour = app.enqueue("work", {}), app.enqueue("work", {})
    claim(app, "gang")
    culprit = app.enqueue("work", {})
    claim(app, "alone")
    sql("UPDATE workerpool_jobs SET attempts = 3, claimed_at = now() - interval '10 minutes'")
    with app.engine.begin() as conn:
        swept = queries.sweep_abandoned(conn, "q", 300).rows
    assert {r.id: r.state for r in swept} == {
        bystander: "pending",
        neighbour: "pending",
        culprit: "dead",
    }
    assert rows(sql)[bystander][:3] == ("pending", 2, 1)
    assert rows(sql)[culprit][:4] == ("dead", 3, 1, "abandoned")


def test_a_worker_that_claims_a_suspect_claims_nothing_else_until_it_finishes(app, sql):
    release = threading.Event()

    @app.task(queue="q", name="slow_suspect")
    def slow_suspect(job):
        release.wait(30)

    suspect = app.enqueue("slow_suspect", {})
    sql("UPDATE workerpool_jobs SET crashes = 1 WHERE id = %s", suspect)
    app.enqueue_many([("work", {"n": n}) for n in range(20)])
    ticks: list[int] = []
    worker = Worker(app.registry, app.url, "q", on_tick=lambda: ticks.append(1))
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        wait_until(
            lambda: (
                sql("SELECT state FROM workerpool_jobs WHERE id = %s", suspect) == [("processing",)]
            ),
            15,
            message="the suspect claimed",
        )
        seen: list[int] = []
        passes = len(ticks) + 10  # ten more passes of the loop while the suspect runs

        def sampled() -> bool:
            seen.append(
                sql("SELECT count(*) FROM workerpool_jobs WHERE state = 'processing'")[0][0]
            )
            return len(ticks) >= passes

        wait_until(sampled, 15, message="ten passes of the worker's loop")
        assert set(seen) == {1}
        release.set()
        wait_until(
            lambda: sql("SELECT count(*) FROM workerpool_jobs WHERE state = 'done'") == [(21,)],
            30,
            message="every job done",
        )
    finally:
        release.set()
        worker.stop()
        thread.join(30)


def test_suspects_run_one_after_another_without_waiting_for_the_poll_interval(pool, sql):
    """Each suspect runs alone; the next one is claimed with the outcome of the one before, not
    a poll interval later (an hour here, and as long to the next lease renewal or hang check:
    without that, only the first would run)."""
    pool.queue("q", stale_after=3600, concurrency=4, poll_interval=3600, hang_timeout=3600)

    @pool.task(queue="q")
    def work(job):
        return None

    ids = pool.enqueue_many([("work", {"n": n}) for n in range(5)])
    sql("UPDATE workerpool_jobs SET crashes = 1")
    with running(pool, "q"):
        wait_until(
            lambda: (
                sql("SELECT count(*) FROM workerpool_jobs WHERE state = 'done'") == [(len(ids),)]
            ),
            20,
            message="every suspect done",
        )
    claimers = sql("SELECT count(DISTINCT claimed_at) FROM workerpool_jobs")
    assert claimers == [(len(ids),)], "each suspect was claimed alone"


class LostClaimReply:
    """A planted fault in a worker's connection: the first claim that takes rows commits on
    the server, then the connection drops before the worker sees the reply (a failover, a
    network cut at commit). The drop waits for :attr:`go`, so the test can change the queue
    while the worker is blind."""

    def __init__(self, worker: Worker) -> None:
        self.lost: list[int] = []
        self.dropped, self.go = threading.Event(), threading.Event()
        self._armed = False
        session, claims = worker.session, worker.claims
        real_claim, real_contacted = claims._claim, session._contacted

        def claim(conn):
            rows = real_claim(conn)
            if rows and not self.lost:
                self.lost, self._armed = [row.id for row in rows], True
            return rows

        def contacted():  # runs once the server has committed
            if self._armed:
                self._armed = False
                self.dropped.set()
                self.go.wait(30)
                session._drop_main_connection()
                raise psycopg.OperationalError(
                    "server closed the connection unexpectedly (planted, after the commit)"
                )
            real_contacted()

        claims._claim, session._contacted = claim, contacted


def test_a_claim_whose_reply_was_lost_is_given_back_so_the_poison_bound_holds(pool, sql):
    """Round after round, a worker's first claim commits unseen (its rows stay ``processing``
    under the worker), then the worker, holding nothing it knows of, takes a poison suspect
    and dies with it. The rows it never knew it held are given back before that claim, so
    each death is the suspect's alone: it ends ``dead/abandoned`` after ``max_attempts``
    deaths, and the ordinary jobs the lost claims took run once each, attempt refunded."""
    pool.queue("q", stale_after=300, concurrency=4, poll_interval=0.05)
    poisoned, release = threading.Event(), threading.Event()

    @pool.task(queue="q")
    def ordinary(job):
        return None

    @pool.task(queue="q", max_attempts=3)
    def poison(job):
        poisoned.set()
        release.wait(30)  # the process is "dead" by then: the test released its rows

    culprit = pool.enqueue("poison", {})
    sql("UPDATE workerpool_jobs SET crashes = 1, run_at = now() + interval '1 hour'")
    for round_ in range(4):  # max_attempts + 1: the bound
        if sql("SELECT state FROM workerpool_jobs WHERE id = %s", culprit) == [("dead",)]:
            break
        pool.enqueue_many([("ordinary", {"round": round_, "n": n}) for n in range(2)])
        poisoned.clear(), release.clear()
        worker = Worker(pool.registry, pool.url, "q")
        fault = LostClaimReply(worker)
        thread = threading.Thread(target=worker.run, daemon=True)
        thread.start()
        try:
            assert fault.dropped.wait(30), "the worker claimed"
            assert culprit not in fault.lost
            sql("UPDATE workerpool_jobs SET run_at = now() WHERE id = %s", culprit)
            fault.go.set()
            assert poisoned.wait(30), "the suspect ran"
            reclaim(pool, worker.id)  # the process died: what its supervisor does
        finally:
            worker.stop()
            release.set()
            thread.join(30)
        assert not thread.is_alive()
        entry = lost_entry(sql, culprit)
        assert entry["alone"] is True, entry  # the death is the suspect's own
        sql(
            "UPDATE workerpool_jobs SET run_at = now() + interval '1 hour'"
            " WHERE id = %s AND state = 'pending'",
            culprit,
        )
    assert sql(
        "SELECT state, dead_reason, attempts FROM workerpool_jobs WHERE id = %s", culprit
    ) == [("dead", "abandoned", 3)]
    with running(pool, "q"):
        wait_until(
            lambda: (
                sql(
                    "SELECT count(*) FROM workerpool_jobs WHERE task = 'ordinary'"
                    " AND state <> 'done'"
                )
                == [(0,)]
            ),
            20,
            message="ordinary done",
        )
    assert sql("SELECT DISTINCT attempts FROM workerpool_jobs WHERE task = 'ordinary'") == [(1,)]
