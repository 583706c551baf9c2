"""Jobs that wait for other jobs (``after=``), on real PostgreSQL: waiting until every parent is
done, released in the parent's own transaction, cancelled transitively when a parent fails
(or run where the task says so), re-opened by a replay of the failed parent, repaired by the
sweep, and bad input refused with nothing written.

Jobs run through ``testing.drain`` (the worker's outcome code, one job at a time) or through
``record_many`` on rows leased by hand, where a test needs two transactions at once.
"""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from sqlalchemy import text

from tests.helpers.db import job_state
from tests.helpers.metrics import scraped
from tests.helpers.waiting import wait_until
from tests.helpers.workers import running
from workerpool import Backoff, InvalidJob, Permanent, WorkerPool, testing
from workerpool import sql as queries
from workerpool.dead import purge, retry
from workerpool.model.attempt import Outcome
from workerpool.model.errors import InvalidDependency, UnknownTask
from workerpool.model.states import OutcomeKind
from workerpool.runtime.maintenance.duties import Maintenance
from workerpool.runtime.worker.outcomes import record_many
from workerpool.sql import dependencies as deps_sql
from workerpool.sql import settled as settled_module

NO_RETRY = Backoff(base=0, cap=0, jitter=0)
SEEN: dict[int, dict] = {}  # job id -> the parent_results its handler saw


@pytest.fixture
def app(pool: WorkerPool) -> WorkerPool:
    pool.queue("q")

    @pool.task(queue="q")
    def step(job):
        SEEN[job.id] = dict(job.parent_results)
        return {"step": job.payload.get("n")}

    @pool.task(queue="q", max_attempts=1)
    def boom(job):
        raise Permanent("no")

    @pool.task(queue="q", on_dependency_failure="run")
    def cleanup(job):
        SEEN[job.id] = dict(job.parent_results)
        return "cleaned"

    return pool


def states(sql, *ids: int) -> list[str]:
    return [job_state(sql, job_id) for job_id in ids]


def lease(sql, job_id: int, worker: str) -> None:
    sql(
        "UPDATE workerpool_jobs SET state = 'processing', attempts = 1, claimed_by = %s,"
        " claimed_at = now() WHERE id = %s",
        worker,
        job_id,
    )


def complete(app: WorkerPool, job_id: int, worker: str, kind=OutcomeKind.DONE) -> None:
    with app.engine.begin() as conn:
        record_many(conn, worker, [(queries.Lease(job_id, 1, worker), Outcome(kind))])


# -- waiting, then due -------------------------------------------------------------------------


def test_a_dependent_waits_until_every_parent_is_done(app, sql):
    a = app.enqueue("step", {"n": 1})
    b = app.enqueue("step", {"n": 2})
    c = app.enqueue("step", {"n": 3}, after=[a, b])
    assert states(sql, c) == ["waiting"]
    lease(sql, a, "w")
    complete(app, a, "w")
    assert states(sql, a, c) == ["done", "waiting"]  # b is not done yet
    lease(sql, b, "w")
    complete(app, b, "w")
    assert states(sql, c) == ["pending"]  # released in b's transaction
    testing.drain(app)
    assert states(sql, c) == ["done"]
    assert SEEN[c] == {a: None, b: None}  # completed by hand, without results
    assert sql("SELECT attempts FROM workerpool_jobs WHERE id = %s", c) == [(1,)]


def test_a_chain_runs_in_order_and_passes_results(app, sql):
    ids = app.chain([("step", {"n": 1}), ("step", {"n": 2}), ("step", {"n": 3})])
    assert states(sql, *ids) == ["pending", "waiting", "waiting"]
    ran = testing.drain(app)
    assert [r.job_id for r in ran] == ids
    assert SEEN[ids[2]] == {ids[1]: {"step": 2}}
    rows = sql("SELECT DISTINCT workflow_id FROM workerpool_jobs WHERE id = ANY(%s)", ids)
    assert rows == [(ids[0],)]


def test_a_job_after_a_parent_already_done_is_due_at_once(app, sql):
    a = app.enqueue("step", {"n": 1})
    testing.drain(app)
    b = app.enqueue("step", {}, after=[a])
    assert states(sql, b) == ["pending"]
    testing.drain(app)
    assert SEEN[b] == {a: {"step": 1}}


def test_a_waiting_job_is_never_claimed(app, sql):
    a = app.enqueue("step", {}, delay=3600)
    b = app.enqueue("step", {}, after=[a])
    assert testing.drain(app) == []
    assert states(sql, b) == ["waiting"]


def test_after_works_in_the_callers_transaction_on_enqueue_many_and_in_a_batch(app, sql):
    with app.engine.begin() as conn:
        a = app.enqueue("step", {"n": 1}, conn=conn)
        b = app.enqueue("step", {"n": 2}, conn=conn, after=[a])
    c, d = app.enqueue_many([("step", {"n": 3}, {"after": [b]}), ("step", {"n": 4})])
    with app.batch() as batch:
        e = batch.enqueue("step", {"n": 5}, after=[c, d])
    assert states(sql, a, b, c, d, e) == ["pending", "waiting", "waiting", "pending", "waiting"]
    testing.drain(app)
    assert states(sql, a, b, c, d, e) == ["done"] * 5
    assert app.batch_status(batch.id).finished


def test_a_rolled_back_transaction_leaves_no_job_and_no_edge(app, sql):
    a = app.enqueue("step", {})
    with pytest.raises(RuntimeError), app.engine.begin() as conn:
        app.enqueue("step", {}, conn=conn, after=[a])
        raise RuntimeError("the business write failed")
    assert sql("SELECT count(*) FROM workerpool_job_dependencies") == [(0,)]
    assert sql("SELECT count(*) FROM workerpool_jobs") == [(1,)]


def test_async_enqueue_takes_after(app, sql):
    a = app.enqueue("step", {})

    async def go():
        try:
            return await app.enqueue_async("step", {}, after=[a])
        finally:
            await app.dispose_async()

    b = asyncio.run(go())
    assert states(sql, b) == ["waiting"]


# -- failure -------------------------------------------------------------------------------------


def test_a_failed_parent_cancels_its_dependents_transitively_naming_it(app, sql):
    a = app.enqueue("boom", {})
    b = app.enqueue("step", {}, after=[a])
    c = app.enqueue("step", {}, after=[b])
    testing.drain(app)
    assert states(sql, a, b, c) == ["dead", "cancelled", "cancelled"]
    [entry] = sql("SELECT errors -> -1 FROM workerpool_jobs WHERE id = %s", b)[0]
    assert entry["type"] == "DependencyFailed" and entry["parent"] == a
    assert f"parent job {a} ended dead" in entry["message"]
    [entry] = sql("SELECT errors -> -1 FROM workerpool_jobs WHERE id = %s", c)[0]
    assert entry["parent"] == b and "ended cancelled" in entry["message"]


def test_an_operator_cancel_of_a_parent_cancels_the_dependents(app, sql):
    a = app.enqueue("step", {}, delay=60)
    b = app.enqueue("step", {}, after=[a])
    app.cancel([a])
    assert states(sql, a, b) == ["cancelled", "cancelled"]


def test_on_dependency_failure_run_runs_without_the_failed_parent(app, sql):
    ok = app.enqueue("step", {"n": 1})
    bad = app.enqueue("boom", {})
    c = app.enqueue("cleanup", {}, after=[ok, bad])
    testing.drain(app)
    assert states(sql, c) == ["done"]
    assert SEEN[c] == {ok: {"step": 1}}


def test_a_cancelled_dependent_settles_its_batch(app, sql):
    a = app.enqueue("boom", {})
    with app.batch() as batch:
        b = batch.enqueue("step", {}, after=[a])
    testing.drain(app)
    status = app.batch_status(batch.id)
    assert states(sql, b) == ["cancelled"] and status.finished and status.cancelled == 1


def test_replaying_the_dead_parent_reopens_what_its_failure_cancelled(app, sql):
    a = app.enqueue("boom", {})
    b = app.enqueue("step", {}, after=[a])
    c = app.enqueue("step", {}, after=[b])
    other = app.enqueue("step", {}, delay=60)
    d = app.enqueue("step", {}, after=[other])
    testing.drain(app)
    app.cancel([other])  # d was cancelled by another parent: not re-opened
    assert states(sql, b, c, d) == ["cancelled", "cancelled", "cancelled"]
    assert retry(app, [a]).ids == [a]
    assert states(sql, a, b, c, d) == ["pending", "waiting", "waiting", "cancelled"]
    sql("UPDATE workerpool_jobs SET task = 'step' WHERE id = %s", a)  # it works this time
    testing.drain(app)
    assert states(sql, a, b, c) == ["done", "done", "done"]


# -- bad input -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "after, message",
    [
        ([10**12], "does not exist"),
        (["1"], "job ids"),
        ([True], "job ids"),
        (7, "list of job ids"),
        ("12", "list of job ids"),
        ([1.5], "job ids"),
    ],
)
def test_bad_parents_are_refused_by_name_with_nothing_written(app, sql, after, message):
    with pytest.raises(InvalidDependency, match=message):
        app.enqueue("step", {}, after=after)
    assert sql("SELECT count(*) FROM workerpool_jobs") == [(0,)]


def test_a_parent_that_ended_dead_or_cancelled_or_was_pruned_is_refused(app, sql):
    dead = app.enqueue("boom", {})
    cancelled = app.enqueue("step", {}, delay=60)
    app.cancel([cancelled])
    pruned = app.enqueue("step", {})
    testing.drain(app)
    sql("DELETE FROM workerpool_jobs WHERE id = %s", pruned)
    for parent, word in (
        (dead, "ended dead"),
        (cancelled, "ended cancelled"),
        (pruned, "does not exist"),
    ):
        with pytest.raises(InvalidDependency, match=word):
            app.enqueue("step", {}, after=[parent])
    with pytest.raises(InvalidDependency, match="ended dead"):
        app.enqueue_many([("step", {}), ("step", {}, {"after": [dead]})])
    assert sql("SELECT count(*) FROM workerpool_jobs") == [(2,)]
    assert sql("SELECT count(*) FROM workerpool_job_dependencies") == [(0,)]


def test_after_with_a_key_is_refused(app, sql):
    a = app.enqueue("step", {})
    for option in ({"key": "k"}, {"key": "k", "unique": "live"}):
        with pytest.raises(InvalidDependency, match="key="):
            app.enqueue("step", {}, after=[a], **option)
    with pytest.raises(UnknownTask):
        app.enqueue("nope", {}, after=[a])
    with pytest.raises(InvalidJob):
        app.enqueue("step", {}, after=[a], priority="high")
    assert sql("SELECT count(*) FROM workerpool_jobs") == [(1,)]


def test_a_workflow_cycle_is_refused_with_nothing_written(app, sql):
    from workerpool.model.errors import WorkflowCycle

    wf = app.workflow()
    wf.step("a", "step", {}, after=["c"])
    wf.step("b", "step", {}, after=["a"])
    wf.step("c", "step", {}, after=["b"])
    with pytest.raises(WorkflowCycle, match="cycle"):
        wf.run()
    wf = app.workflow()
    wf.step("a", "step", {}, after=["missing"])
    with pytest.raises(InvalidDependency, match="missing"):
        wf.run()
    assert sql("SELECT count(*) FROM workerpool_jobs") == [(0,)]


def test_a_workflow_runs_its_graph(app, sql):
    wf = app.workflow()
    wf.step("fetch", "step", {"n": 1})
    wf.step("left", "step", {"n": 2}, after=["fetch"])
    wf.step("right", "step", {"n": 3}, after=["fetch"])
    wf.step("join", "step", {"n": 4}, after=["left", "right"])
    ids = wf.run()
    assert set(ids) == {"fetch", "left", "right", "join"}
    testing.drain(app)
    assert SEEN[ids["join"]] == {ids["left"]: {"step": 2}, ids["right"]: {"step": 3}}
    assert sql("SELECT DISTINCT workflow_id FROM workerpool_jobs") == [(ids["fetch"],)]


# -- two parents ending at once ----------------------------------------------------------------


def _race(app, sql, monkeypatch, *, hold_after_lock: bool) -> str:
    """Two parents of one dependent, leased by two workers, complete in two transactions that
    both write their parent before either resolves the dependent."""
    a, b = app.enqueue("step", {}), app.enqueue("step", {})
    c = app.enqueue("step", {}, after=[a, b])
    lease(sql, a, "wa")
    lease(sql, b, "wb")
    both_wrote = threading.Barrier(2, timeout=20)
    after_check = threading.Barrier(2, timeout=20)
    real = deps_sql.resolve
    real_release = deps_sql.release

    def release_when_both_wrote(conn, ids, **kw):
        both_wrote.wait()
        return real_release(conn, ids, **kw)

    def resolve_then_wait(conn, locked, **kw):
        out = real(conn, locked, **kw)
        if hold_after_lock:
            after_check.wait()  # neither commits before both have decided
        return out

    monkeypatch.setattr(deps_sql, "release", release_when_both_wrote)
    monkeypatch.setattr(deps_sql, "resolve", resolve_then_wait)
    monkeypatch.setattr(settled_module, "release", release_when_both_wrote)
    errors: list[BaseException] = []

    def run(job_id: int, worker: str) -> None:
        try:
            complete(app, job_id, worker)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=args) for args in ((a, "wa"), (b, "wb"))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    monkeypatch.setattr(deps_sql, "release", real_release)
    monkeypatch.setattr(deps_sql, "resolve", real)
    monkeypatch.setattr(settled_module, "release", real_release)
    assert errors == []
    return job_state(sql, c)


def test_two_parents_ending_at_once_release_the_dependent(app, sql, monkeypatch):
    results = [_race(app, sql, monkeypatch, hold_after_lock=False) for _ in range(20)]
    assert results == ["pending"] * 20


def test_without_the_dependent_row_lock_the_race_strands_the_dependent(app, sql, monkeypatch):
    """The planted fault: the same race with the lock taken out leaves the dependent waiting
    (each releaser sees the other parent still live), which is what the lock prevents."""
    no_lock = text(str(deps_sql._LOCK_DEPENDENTS).replace("FOR UPDATE", ""))
    monkeypatch.setattr(deps_sql, "_LOCK_DEPENDENTS", no_lock)
    results = [_race(app, sql, monkeypatch, hold_after_lock=True) for _ in range(3)]
    assert results == ["waiting"] * 3


def test_an_enqueue_racing_the_flush_that_finishes_its_parents_never_fails(app, sql):
    """The enqueue locks its parents in id order; a worker's outcome flush finishes the same
    rows in the order its plan visits them (reversed here), so the two can deadlock. The flush
    waits longer before it looks for a deadlock, so the enqueue is the one PostgreSQL aborts:
    it must run again on its own, never fail its caller, and its dependent must not be left
    waiting behind parents that are all done. The start is staggered across the race's window,
    round by round."""
    surfaced: list[BaseException] = []
    dependents: list[int] = []
    for round_ in range(40):
        parents = app.enqueue_many([("step", {"n": n}) for n in range(100)])
        sql(
            "UPDATE workerpool_jobs SET state = 'processing', attempts = 1, claimed_by = 'w',"
            " claimed_at = now() WHERE id = ANY(%s)",
            parents,
        )
        start = threading.Barrier(2, timeout=20)

        def flush() -> None:
            start.wait()
            with app.engine.begin() as conn:
                conn.exec_driver_sql("SET LOCAL deadlock_timeout = '10s'")
                record_many(
                    conn,
                    "w",
                    [
                        (queries.Lease(job_id, 1, "w"), Outcome(OutcomeKind.DONE))
                        for job_id in reversed(parents)
                    ],
                )

        def enqueue(delay: float = (round_ % 8) * 0.00025) -> None:
            start.wait()
            time.sleep(delay)
            try:
                dependents.append(app.enqueue("step", {}, after=parents))
            except BaseException as exc:
                surfaced.append(exc)

        threads = [threading.Thread(target=flush), threading.Thread(target=enqueue)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
    assert surfaced == []
    assert sql(
        "SELECT state, count(*) FROM workerpool_jobs WHERE id = ANY(%s) GROUP BY 1", dependents
    ) == [("pending", 40)]


def test_a_dependent_cancelled_by_its_parents_failure_is_a_cancel_like_any_other(
    pool, sql, metrics_recorder
):
    """The worker that wrote the parent's death calls the ``on_cancel`` hooks for each
    dependent it cancelled (transitively), counts them in the finished-jobs metric under their
    own queue, and the audit trail names the parent."""
    pool.queue("q", poll_interval=0.05)
    pool.queue("other")
    cancelled = []
    pool.on_cancel(cancelled.append)

    @pool.task(queue="q", max_attempts=1)
    def doomed(job):
        raise Permanent("no")

    @pool.task(queue="other")
    def follower(job):
        return None

    parent = pool.enqueue("doomed", {})
    child = pool.enqueue("follower", {}, after=[parent])
    grandchild = pool.enqueue("follower", {}, after=[child])
    with running(pool, "q"):
        wait_until(lambda: len(cancelled) == 2, 20, message="both dependents reported")
    assert {(n.id, n.queue, n.task, n.by) for n in cancelled} == {
        (child, "other", "follower", "workerpool"),
        (grandchild, "other", "follower", "workerpool"),
    }
    assert [n.reason for n in sorted(cancelled, key=lambda n: n.id)] == [
        f"parent job {parent} ended dead",
        f"parent job {child} ended cancelled",
    ]
    finished = (
        "workerpool_jobs_finished_total",
        (("outcome", "cancelled"), ("queue", "other"), ("task", "follower")),
    )
    assert scraped(metrics_recorder[1])[finished] == 2
    assert sql(
        "SELECT actor, action, target, detail->>'reason' FROM workerpool_audit ORDER BY id"
    ) == [
        ("workerpool", "cancel", f"job:{parent}:dependents", f"parent job {parent} ended dead"),
        ("workerpool", "cancel", f"job:{child}:dependents", f"parent job {child} ended cancelled"),
    ]


# -- the sweep -------------------------------------------------------------------------------------


def test_the_sweep_repairs_what_a_missed_release_left_and_counts_it(app, sql):
    a = app.enqueue("step", {})
    b = app.enqueue("step", {}, after=[a])
    bad = app.enqueue("step", {}, delay=60)
    c = app.enqueue("step", {}, after=[bad])
    # parents ended behind workerpool's back (no final write path ran for them)
    sql("UPDATE workerpool_jobs SET state = 'done', finished_at = now() WHERE id = %s", a)
    sql(
        "UPDATE workerpool_jobs SET state = 'dead', dead_reason = 'permanent',"
        " finished_at = now() WHERE id = %s",
        bad,
    )
    maintenance = Maintenance(app.registry, app.engine, worker_id="m")
    assert maintenance.sweep_dependencies() == 2
    assert states(sql, b, c) == ["pending", "cancelled"]
    assert maintenance.repaired_dependents == 2
    # each repair is in the job's history, where the chaos checker looks for it
    assert sql("SELECT errors -> -1 ->> 'type' FROM workerpool_jobs WHERE id = %s", b) == [
        ("DependencySweep",)
    ]
    assert sql("SELECT errors -> -1 -> 'swept' FROM workerpool_jobs WHERE id = %s", c) == [(True,)]
    maintenance._swept_dependencies_at = float("-inf")
    assert maintenance.sweep_dependencies() == 0


def test_a_normal_run_leaves_the_sweep_nothing(app, sql):
    ids = app.chain([("step", {}), ("step", {}), ("step", {})])
    bad = app.enqueue("boom", {})
    app.enqueue("step", {}, after=[bad])
    testing.drain(app)
    with app.engine.begin() as conn:
        assert deps_sql.sweep(conn) == deps_sql.Released(0, [])
    assert states(sql, *ids) == ["done"] * 3


def test_purging_a_dead_job_that_blocked_nothing_is_harmless(app, sql):
    app.enqueue("boom", {})
    testing.drain(app)
    assert purge(app, 0).count == 1


def test_a_caller_waiting_for_a_cancelled_dependent_hears_of_it(app, sql):
    from workerpool import JobCancelled

    a = app.enqueue("boom", {})
    b = app.enqueue("step", {}, after=[a])
    testing.drain(app)
    with pytest.raises(JobCancelled):
        app.result(b, timeout=5)


def test_inline_mode_runs_a_chain_in_order(app, sql):
    with app.testing_mode("inline"):
        ids = app.chain([("step", {"n": 1}), ("step", {"n": 2})])
    assert states(sql, *ids) == ["done", "done"]
    assert SEEN[ids[1]] == {ids[0]: {"step": 1}}


def test_a_job_without_parents_reads_no_parent_results_unless_asked(app, sql, monkeypatch):
    calls: list[int] = []
    real = deps_sql.parent_results
    monkeypatch.setattr(
        deps_sql, "parent_results", lambda conn, job_id: calls.append(job_id) or real(conn, job_id)
    )

    @app.task(queue="q", name="quiet")
    def quiet(job):
        return None

    quiet_id = app.enqueue("quiet", {})
    step_id = app.enqueue("step", {})
    testing.drain(app)
    assert calls == [step_id]  # step reads job.parent_results; quiet never asked
    assert quiet_id not in calls
