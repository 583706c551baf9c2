"""Batches, in-process against real PostgreSQL: members written in one transaction, the
callbacks fired exactly once by the last member's outcome on every path that ends a job, the
race of the last two members, replay after the end, keys and reopening, reading, bad input.

The 10,000-member batch under ``workerpool run`` with its children SIGKILLed is in
tests/processes/test_batches_processes.py.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from sqlalchemy import text

from tests.helpers import batch_app
from tests.helpers.batch_app import callbacks
from tests.helpers.waiting import wait_until
from tests.helpers.workers import running
from workerpool import (
    Backoff,
    BatchClosed,
    BatchFinished,
    IdempotencyConflict,
    InvalidJob,
    PayloadError,
    UnknownBatch,
    UnknownTask,
    WorkerPool,
    testing,
)
from workerpool import sql as queries
from workerpool.dead import retry
from workerpool.model.attempt import Outcome
from workerpool.model.states import OutcomeKind
from workerpool.runtime.maintenance.duties import Maintenance
from workerpool.runtime.release import release_orphans
from workerpool.runtime.worker.outcomes import record_many
from workerpool.sql import batches as batches_sql
from workerpool.sql import settled as settled_module

NO_RETRY = Backoff(base=0, cap=0, jitter=0)


@pytest.fixture
def app(pool: WorkerPool) -> WorkerPool:
    return batch_app.declare(pool)


def callback_rows(sql, batch_id: int) -> int:
    """Every job in the reports queue naming the batch (a second firing would add rows)."""
    return sql(
        "SELECT count(*) FROM workerpool_jobs WHERE queue = 'reports' AND batch_id = %s", batch_id
    )[0][0]


def batch_row(sql, batch_id: int) -> dict[str, Any]:
    row = sql(
        "SELECT finished_at IS NOT NULL, outcome, fired_by FROM workerpool_batches WHERE id = %s",
        batch_id,
    )[0]
    return {"finished": row[0], "outcome": row[1], "fired_by": row[2]}


def lease(
    sql, job_id: int, worker: str, attempts: int = 1, *, stale: bool = False, cancel: bool = False
) -> None:
    """Put a member in ``processing`` under ``worker``'s lease, as a claim would."""
    sql(
        "UPDATE workerpool_jobs SET state = 'processing', attempts = %s, max_attempts ="
        " greatest(max_attempts, %s), claimed_by = %s, claimed_at = now() - %s::interval,"
        ' cancel_request = CASE WHEN %s THEN \'{"by": "ops"}\'::jsonb END WHERE id = %s',
        attempts,
        attempts,
        worker,
        "1 hour" if stale else "0 s",
        cancel,
        job_id,
    )


# -- the callbacks, by the rule -------------------------------------------------------------------


def test_on_complete_and_on_success_fire_once_after_every_member_is_done(app, sql):
    with app.batch(
        on_complete="report",
        on_success="succeeded",
        on_failure="failed_report",
        payload={"period": "2026-11"},
    ) as batch:
        ids = [batch.enqueue("member", {"n": n}) for n in range(3)]
        ids += batch.enqueue_many([("member", {"n": n}) for n in range(3, 5)])
    assert batch.member_ids == ids and batch.outside == []
    status = app.batch_status(batch.id)
    assert (status.total, status.pending, status.finished) == (5, 5, False)
    ran = testing.drain(app, "q")
    assert len(ran) == 5
    assert callbacks(sql, batch.id) == [("report", "pending"), ("succeeded", "pending")]
    assert batch_row(sql, batch.id) == {
        "finished": True,
        "outcome": "success",
        "fired_by": "outcome",
    }
    reports = testing.drain(app, "reports")
    assert [r.result for r in reports] == [
        {"batch": batch.id, "payload": {"period": "2026-11"}}
    ] * 2
    status = app.batch_status(batch.id)
    assert (status.total, status.done, status.live, status.outcome) == (5, 5, 0, "success")
    assert status.callback_ids == [r.job_id for r in reports]


@pytest.mark.parametrize("spoiler", ["broken", "refuse", "cancel"])
def test_one_dead_or_cancelled_member_fires_on_failure_instead_of_on_success(app, sql, spoiler):
    with app.batch(
        on_complete="report", on_success="succeeded", on_failure="failed_report"
    ) as batch:
        batch.enqueue("member", {})
        bad = batch.enqueue("member" if spoiler == "cancel" else spoiler, {})
    if spoiler == "cancel":
        app.cancel([bad])
    testing.drain(app, "q")
    assert callbacks(sql, batch.id) == [("report", "pending"), ("failed_report", "pending")]
    status = app.batch_status(batch.id)
    assert status.outcome == "failure" and status.done == 1
    assert (status.dead, status.cancelled) == ((0, 1) if spoiler == "cancel" else (1, 0))


def test_an_empty_batch_finishes_when_its_block_ends(app, sql):
    with app.batch(on_complete="report", on_success="succeeded") as batch:
        pass
    assert batch_row(sql, batch.id) == {"finished": True, "outcome": "success", "fired_by": "empty"}
    assert callbacks(sql, batch.id) == [("report", "pending"), ("succeeded", "pending")]


def test_a_batch_without_callbacks_only_tracks_progress(app, sql):
    with app.batch() as batch:
        batch.enqueue("member", {})
    testing.drain(app)
    status = app.batch_status(batch.id)
    assert status.finished and status.callback_ids == [] and status.done == 1


# -- every path that ends a member ----------------------------------------------------------------


def _done(app, sql, job_id):
    testing.drain(app, "q")


def _drained(app, sql, job_id):
    testing.drain(app, "q")


def _cancel_queued(app, sql, job_id):
    app.cancel([job_id])


def _cancel_running(app, sql, job_id):
    with running(app, "q"):
        wait_until(lambda: app.job(job_id).state == "processing", 20, message="running")
        app.cancel([job_id])
        wait_until(lambda: app.job(job_id).finished, 20, message="cancelled")


def _crash_release(app, sql, job_id):
    lease(sql, job_id, "dead-worker", attempts=5)  # its last attempt, held alone
    with app.engine.begin() as conn:
        assert release_orphans(conn, ["dead-worker"]).dead


def _abandoned_sweep(app, sql, job_id):
    lease(sql, job_id, "lost-host", attempts=5, stale=True)
    maintenance = Maintenance(app.registry, app.engine, worker_id="m")
    assert maintenance.sweep_abandoned()


def _stale_recovery_of_a_cancelled_job(app, sql, job_id):
    lease(sql, job_id, "lost-host", attempts=1, stale=True, cancel=True)
    with app.engine.begin() as conn:
        rows = queries.recover_stale(conn, "q", app.registry.queue_spec("q").stale_after).rows
    assert [row.state for row in rows] == ["cancelled"]


def _inline(app, sql, job_id):
    raise AssertionError("unused")  # the inline mode has its own test below


PATHS = {
    "done": ("member", _done, "done"),
    "dead exhausted": ("broken", _drained, "dead"),
    "dead permanent": ("refuse", _drained, "dead"),
    "cancelled queued": ("member", _cancel_queued, "cancelled"),
    "cancelled running": ("wait_for_cancel", _cancel_running, "cancelled"),
    "crash release": ("member", _crash_release, "dead"),
    "abandoned sweep": ("member", _abandoned_sweep, "dead"),
    "stale recovery (cancel asked)": ("member", _stale_recovery_of_a_cancelled_job, "cancelled"),
}


@pytest.mark.parametrize("path", list(PATHS))
def test_every_path_that_ends_the_last_member_fires_the_callback_in_its_transaction(app, sql, path):
    task, end, state = PATHS[path]
    with app.batch(on_complete="report") as batch:
        first = batch.enqueue("member", {})
        last = batch.enqueue(task, {})
    with app.engine.begin() as conn:  # the first member ends the ordinary way
        conn.execute(
            text(
                "UPDATE workerpool_jobs SET state = 'processing', attempts = 1,"
                " claimed_by = 'w0', claimed_at = now() WHERE id = :id"
            ),
            {"id": first},
        )
        record_many(conn, "w0", [(queries.Lease(first, 1, "w0"), Outcome(OutcomeKind.DONE))])
    assert not batch_row(sql, batch.id)["finished"]
    end(app, sql, last)
    assert app.job(last).state == state
    assert batch_row(sql, batch.id)["fired_by"] == "outcome"
    assert callback_rows(sql, batch.id) == 1
    with app.engine.begin() as conn:  # the safety net finds nothing left to do
        assert batches_sql.sweep(conn) == []


def test_the_inline_mode_runs_members_and_then_the_callback(app, sql):
    with app.testing_mode("inline"):
        with app.batch(on_complete="report", payload={"p": 1}) as batch:
            batch.enqueue_many([("member", {"n": n}) for n in range(3)])
    assert callbacks(sql, batch.id) == [("report", "done")]
    assert app.result(app.batch_status(batch.id).callback_ids[0], timeout=0) == {
        "batch": batch.id,
        "payload": {"p": 1},
    }


# -- the race of the last two members -------------------------------------------------------------


def _race(app, sql, monkeypatch, *, after_settle: threading.Barrier | None = None) -> int:
    """Two members of one batch, leased by two workers, complete in two transactions that both
    write their member before either looks at the batch. Returns how many callbacks fired."""
    with app.batch(on_complete="report") as batch:
        a, b = batch.enqueue("member", {}), batch.enqueue("member", {})
    lease(sql, a, "wa")
    lease(sql, b, "wb")
    both_wrote = threading.Barrier(2, timeout=20)
    real = settled_module.settle

    def settle_when_both_wrote(conn, batch_ids, *args):
        batch_ids = list(batch_ids)
        if batch_ids:
            both_wrote.wait()
        fired = real(conn, batch_ids, *args)
        if batch_ids and after_settle is not None:
            after_settle.wait()  # neither commits before both have checked
        return fired

    monkeypatch.setattr(settled_module, "settle", settle_when_both_wrote)
    errors: list[BaseException] = []

    def complete(job_id: int, worker: str) -> None:
        try:
            with app.engine.begin() as conn:
                record_many(
                    conn, worker, [(queries.Lease(job_id, 1, worker), Outcome(OutcomeKind.DONE))]
                )
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=complete, args=args) for args in ((a, "wa"), (b, "wb"))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    monkeypatch.setattr(settled_module, "settle", real)
    assert errors == []
    assert app.job(a).state == app.job(b).state == "done"
    return callback_rows(sql, batch.id)


def test_the_last_two_members_settling_at_once_fire_the_callback_exactly_once(
    app, sql, monkeypatch
):
    fired = [_race(app, sql, monkeypatch) for _ in range(30)]
    assert fired == [1] * 30


def test_without_the_batch_row_lock_the_race_loses_the_callback(app, sql, monkeypatch):
    """The planted fault: the same race with the lock taken out never fires (each settler sees
    the other member still live), which is what the lock prevents."""
    no_lock = text(str(batches_sql._LOCK_OPEN).replace("FOR UPDATE", ""))
    monkeypatch.setattr(batches_sql, "_LOCK_OPEN", no_lock)
    fired = [
        _race(app, sql, monkeypatch, after_settle=threading.Barrier(2, timeout=20))
        for _ in range(3)
    ]
    assert fired == [0, 0, 0]


# -- replay, the sweep ----------------------------------------------------------------------------


def test_a_dead_member_replayed_after_the_batch_finished_runs_but_fires_nothing_again(app, sql):
    batch_app.SWITCH["fail"] = True
    try:
        with app.batch(on_complete="report", on_failure="failed_report") as batch:
            batch.enqueue("member", {})
            dead = batch.enqueue("switchable", {})
        testing.drain(app, "q")
        before = app.batch_status(batch.id)
        assert before.finished and before.outcome == "failure" and before.dead == 1
        batch_app.SWITCH["fail"] = False
        assert retry(app, [dead]).ids == [dead]
        assert app.batch_status(batch.id).finished  # it stays finished
        testing.drain(app, "q")
    finally:
        batch_app.SWITCH["fail"] = True
    after = app.batch_status(batch.id)
    assert app.result(dead, timeout=0) == "ok"
    assert (after.done, after.dead, after.finished) == (2, 0, True)
    assert (after.outcome, after.callback_ids, after.finished_at) == (
        "failure",
        before.callback_ids,
        before.finished_at,
    )
    assert callback_rows(sql, batch.id) == 2  # on_complete and on_failure, once each


def test_the_sweep_finishes_a_batch_the_outcome_path_left_open(app, sql):
    with app.batch(on_complete="report") as batch:
        member = batch.enqueue("member", {})
    # a member ended behind workerpool's back (no outcome path ran for it)
    sql("UPDATE workerpool_jobs SET state = 'done', finished_at = now() WHERE id = %s", member)
    with app.engine.begin() as conn:
        fired = batches_sql.sweep(conn)
    assert [(f.batch_id, f.outcome) for f in fired] == [(batch.id, "success")]
    assert batch_row(sql, batch.id)["fired_by"] == "sweep"
    with app.engine.begin() as conn:
        assert batches_sql.sweep(conn) == []
    assert callback_rows(sql, batch.id) == 1


def test_the_sweep_leaves_open_batches_with_live_members_alone(app, sql):
    with app.batch(on_complete="report") as batch:
        batch.enqueue("member", {})
    with app.engine.begin() as conn:
        assert batches_sql.sweep(conn) == []
    assert not batch_row(sql, batch.id)["finished"]


# -- one transaction ------------------------------------------------------------------------------


def test_a_batch_in_the_callers_transaction_exists_only_if_it_commits(app, sql):
    with app.engine.connect() as conn:
        with conn.begin() as transaction:
            with app.batch(on_complete="report", conn=conn) as batch:
                batch.enqueue("member", {})
                batch.enqueue_many([("member", {}), ("member", {"n": 2})])
            transaction.rollback()
    assert sql("SELECT count(*) FROM workerpool_batches") == [(0,)]
    assert sql("SELECT count(*) FROM workerpool_jobs") == [(0,)]
    with app.engine.begin() as conn:
        with app.batch(on_complete="report", conn=conn) as kept:
            kept.enqueue("member", {})
        conn.execute(text("SELECT 1"))  # the caller's transaction goes on after the block
    assert app.batch_status(kept.id).total == 1


def test_an_empty_batch_in_a_rolled_back_transaction_fires_nothing(app, sql):
    with app.engine.connect() as conn:
        with conn.begin() as transaction:
            with app.batch(on_complete="report", conn=conn):
                pass
            transaction.rollback()
    assert sql("SELECT count(*) FROM workerpool_jobs") == [(0,)]


def test_an_error_inside_the_block_writes_nothing_of_the_batch(app, sql):
    with pytest.raises(PayloadError):
        with app.batch(on_complete="report") as batch:
            batch.enqueue("member", {})
            batch.enqueue("member", {"bad": float("nan")})
    assert sql("SELECT count(*) FROM workerpool_batches") == [(0,)]
    assert sql("SELECT count(*) FROM workerpool_jobs") == [(0,)]


def test_bulk_members_by_copy_and_by_pipelined_chunks_all_join_the_batch(app, sql):
    with app.batch(on_complete="report") as batch:
        copied = batch.enqueue_many([("member", {"n": n}) for n in range(600)])
        keyed = batch.enqueue_many([("member", {"n": n}, {"key": f"k{n}"}) for n in range(300)])
    assert len(set(copied + keyed)) == 900
    assert sql("SELECT count(*) FROM workerpool_jobs WHERE batch_id = %s", batch.id) == [(900,)]
    assert app.batch_status(batch.id).pending == 900


# -- keys -----------------------------------------------------------------------------------------


def test_a_member_whose_key_is_held_outside_the_batch_is_not_a_member(app, sql):
    outsider = app.enqueue("member", {"n": 1}, key="k1")
    with app.batch(on_complete="report") as batch:
        assert batch.enqueue("member", {"n": 1}, key="k1") == outsider
        inside = batch.enqueue("member", {"n": 2}, key="k2")
    assert batch.outside == [outsider] and batch.member_ids == [inside]
    assert app.batch_status(batch.id).total == 1
    assert app.job(outsider).batch_id is None


def test_a_batch_of_members_all_held_outside_finishes_at_once(app, sql):
    outsider = app.enqueue("member", {}, key="k")
    with app.batch(on_complete="report") as batch:
        batch.enqueue("member", {}, key="k")
    assert batch.outside == [outsider]
    assert batch_row(sql, batch.id)["fired_by"] == "empty"


def test_a_coordinator_run_twice_with_a_batch_key_writes_nothing_the_second_time(app, sql):
    def coordinate() -> Any:
        with app.batch(on_complete="report", payload={"period": "11"}, key="report:11") as batch:
            batch.enqueue_many([("member", {"u": u}, {"key": f"report:11:{u}"}) for u in range(5)])
        return batch

    first = coordinate()
    jobs_before = sql("SELECT count(*) FROM workerpool_jobs")
    second = coordinate()
    assert (second.id, second.reopened, second.member_ids) == (first.id, True, first.member_ids)
    assert sql("SELECT count(*) FROM workerpool_jobs") == jobs_before
    testing.drain(app, "q")
    third = coordinate()  # after it finished: the same members, still nothing written
    assert third.member_ids == first.member_ids and callback_rows(sql, first.id) == 1


def test_a_finished_batch_reopened_by_its_key_takes_no_new_member(app, sql):
    with app.batch(on_complete="report", key="b") as batch:
        batch.enqueue("member", {}, key="m1")
    testing.drain(app, "q")
    with pytest.raises(BatchFinished, match=f"batch {batch.id} has finished"):
        with app.batch(on_complete="report", key="b") as again:
            again.enqueue("member", {}, key="m2")
    assert sql("SELECT count(*) FROM workerpool_jobs WHERE key = 'm2'") == [(0,)]


def test_an_open_batch_reopened_by_its_key_takes_new_members(app, sql):
    with app.batch(on_complete="report", key="b") as batch:
        batch.enqueue("member", {}, key="m1")
    with app.batch(on_complete="report", key="b") as again:
        again.enqueue("member", {}, key="m2")
    assert again.id == batch.id and app.batch_status(batch.id).total == 2
    testing.drain(app, "q")
    assert callback_rows(sql, batch.id) == 1


def test_a_batch_key_reused_with_other_callbacks_or_payload_is_refused(app, sql):
    with app.batch(on_complete="report", key="b", payload={"a": 1}):
        pass
    with pytest.raises(IdempotencyConflict, match="batch key 'b' belongs to batch"):
        with app.batch(on_complete="report", key="b", payload={"a": 2}):
            pass
    with pytest.raises(IdempotencyConflict):
        with app.batch(on_success="report", key="b", payload={"a": 1}):
            pass


# -- reading --------------------------------------------------------------------------------------


def test_batch_results_streams_every_member_by_keyset_pages(app, sql, monkeypatch):
    with app.batch(on_complete="report") as batch:
        ids = batch.enqueue_many([("member", {"n": n}) for n in range(23)])
    sql(
        "UPDATE workerpool_jobs SET state = 'done', result = to_jsonb(id) WHERE id = ANY(%s)"
        " AND id %% 3 <> 0",
        ids,
    )
    sql(
        "UPDATE workerpool_jobs SET state = 'dead', dead_reason = 'permanent'"
        " WHERE id = ANY(%s) AND id %% 3 = 0",
        ids,
    )
    pages: list[int] = []
    real = batches_sql.member_page

    def counted(*args, **kwargs):
        page = real(*args, **kwargs)
        pages.append(len(page))
        return page

    monkeypatch.setattr(batches_sql, "member_page", counted)
    got = list(app.batch_results(batch.id, page_size=4))
    done = sorted(i for i in ids if i % 3)
    dead = sorted(i for i in ids if i % 3 == 0)
    assert [(m.job_id, m.state, m.result) for m in got] == (
        [(i, "done", i) for i in done] + [(i, "dead", None) for i in dead]
    )
    assert max(pages) == 4


def test_workerpool_status_counts_exclude_the_callbacks(app, sql):
    with app.batch(on_complete="report", on_success="succeeded") as batch:
        batch.enqueue("member", {})
    testing.drain(app)
    status = app.batch_status(batch.id)
    assert status.total == 1 and len(status.callback_ids) == 2


# -- bad input ------------------------------------------------------------------------------------


def nothing_written(sql) -> bool:
    return sql("SELECT count(*) FROM workerpool_batches") == [(0,)] and sql(
        "SELECT count(*) FROM workerpool_jobs"
    ) == [(0,)]


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"on_complete": "no_such_task"}, UnknownTask, "unknown task 'no_such_task'"),
        ({"on_success": 42}, UnknownTask, "unknown task 42"),
        ({"payload": [1, 2]}, PayloadError, "batch payload must be a JSON object"),
        ({"payload": {"x": object()}}, PayloadError, "batch payload \\$.x: object is not JSON"),
        ({"conn": "not a connection"}, InvalidJob, "conn must be a SQLAlchemy Connection"),
        ({"key": ""}, PayloadError, "key must be a non-empty string"),
    ],
)
def test_bad_batch_arguments_are_refused_by_name_before_anything_is_written(
    app, sql, kwargs, error, match
):
    with pytest.raises(error, match=match):
        app.batch(**kwargs)
    assert nothing_written(sql)


def test_a_batch_used_outside_its_block_is_refused_by_name(app, sql):
    batch = app.batch(on_complete="report")
    with pytest.raises(BatchClosed, match="inside its with block"):
        batch.enqueue("member", {})
    assert nothing_written(sql)
    with batch:
        batch.enqueue("member", {})
    with pytest.raises(BatchClosed, match=f"batch {batch.id}: its with block is over"):
        batch.enqueue("member", {})
    with pytest.raises(BatchClosed):
        batch.enqueue_many([("member", {})])
    with pytest.raises(BatchClosed, match="opened once"):
        with batch:
            pass
    assert app.batch_status(batch.id).total == 1


def test_bad_members_are_refused_by_name_and_the_block_writes_nothing(app, sql):
    for bad in (
        lambda b: b.enqueue("member", {}, conn=None),
        lambda b: b.enqueue("nope", {}),
        lambda b: b.enqueue_many("member"),
        lambda b: b.enqueue_many([("member",)]),
    ):
        with pytest.raises((InvalidJob, UnknownTask)):
            with app.batch(on_complete="report") as batch:
                batch.enqueue("member", {})
                bad(batch)
    assert nothing_written(sql)


@pytest.mark.parametrize("batch_id", ["1", True, 0, -1, 2.5, None])
def test_a_bad_batch_id_is_refused_by_name(app, batch_id):
    with pytest.raises(InvalidJob, match="batch id must be a positive int"):
        app.batch_status(batch_id)
    with pytest.raises(InvalidJob, match="batch id must be a positive int"):
        app.batch_results(batch_id)


def test_an_unknown_batch_is_refused_when_asked_not_when_iterated(app):
    with pytest.raises(UnknownBatch, match="no batch 424242"):
        app.batch_status(424242)
    with pytest.raises(UnknownBatch):
        app.batch_results(424242)
    with app.batch() as batch:
        pass
    with pytest.raises(InvalidJob, match="page_size must be a positive int"):
        app.batch_results(batch.id, page_size=0)


def test_the_maintenance_pass_sweeps_logs_at_error_level_and_prunes(app, sql, caplog):
    with app.batch(on_complete="report") as left_open:
        member = left_open.enqueue("member", {})
    sql("UPDATE workerpool_jobs SET state = 'done', finished_at = now() WHERE id = %s", member)
    with app.batch() as old:
        pass
    sql(
        "UPDATE workerpool_batches SET finished_at = now() - interval '30 days' WHERE id = %s",
        old.id,
    )
    sql("INSERT INTO workerpool_waiters (job_id, since) VALUES (1, now() - interval '2 hours')")
    maintenance = Maintenance(app.registry, app.engine, worker_id="m")
    with caplog.at_level("ERROR", logger="workerpool.maintenance"):
        fired = maintenance.sweep_batches()
    assert [f.batch_id for f in fired] == [left_open.id]
    assert [r.getMessage() for r in caplog.records] == [
        f"batch {left_open.id} finished by the maintenance sweep, not by its last member's outcome"
    ]
    assert sql("SELECT id FROM workerpool_batches") == [(left_open.id,)]  # the old one pruned
    assert sql("SELECT count(*) FROM workerpool_waiters") == [(0,)]
    assert maintenance.sweep_batches() == []  # not again within BATCH_SWEEP_EVERY
