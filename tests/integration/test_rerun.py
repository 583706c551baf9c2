"""``pool.rerun`` and ``workerpool rerun`` against real PostgreSQL: a job that ended runs
again keeping its steps before the named one (none by default), attempts reset, the rerun in
its history and the audit trail; a live job, a step never recorded and bad input are refused
by name with nothing written."""

from __future__ import annotations

import json

import pytest

from tests.helpers.cli import run_cli
from workerpool import (
    InvalidJob,
    InvalidStep,
    JobLive,
    UnknownJob,
    UnknownStep,
    WorkerPool,
    WrongState,
    testing,
)
from workerpool.runtime.maintenance.duties import Maintenance


@pytest.fixture
def app(pool: WorkerPool) -> WorkerPool:
    pool.queue("q")
    calls: list[str] = []
    pool.calls = calls  # type: ignore[attr-defined]
    pool.price = 10  # type: ignore[attr-defined]  # a "bug" a rerun fixes

    @pool.task(queue="q", max_attempts=1)
    def checkout(job):
        order = job.step("order", lambda: calls.append("order") or {"id": 7})
        price = job.step("price", lambda: calls.append("price") or pool.price)
        receipt = job.step("receipt", lambda: calls.append("receipt") or f"{order['id']}:{price}")
        if job.payload.get("fail"):
            raise RuntimeError("the mailer is down")
        return receipt

    return pool


def finished(app, **payload) -> int:
    job_id = app.enqueue("checkout", payload)
    testing.drain(app, "q")
    app.calls.clear()
    return job_id


def row(sql, job_id: int) -> tuple:
    return sql(
        "SELECT state, attempts, result, steps, replays FROM workerpool_jobs WHERE id = %s", job_id
    )[0]


def test_a_rerun_from_a_step_keeps_the_steps_before_it(app, sql):
    job_id = finished(app)
    assert app.result(job_id) == "7:10"
    app.price = 12  # the fix
    assert app.rerun(job_id, from_step="price") == ["price", "receipt"]
    state, attempts, result, steps, replays = row(sql, job_id)
    assert (state, attempts, result, list(steps)) == ("pending", 0, None, ["order"])
    assert replays[-1]["rerun"] and replays[-1]["from_step"] == "price"
    assert replays[-1]["was"] == "done"
    testing.drain(app, "q")
    assert app.calls == ["price", "receipt"]  # the order step was not run again
    assert app.result(job_id) == "7:12"


def test_a_rerun_without_a_step_keeps_none(app, sql):
    job_id = finished(app)
    assert app.rerun(job_id) == ["order", "price", "receipt"]
    assert row(sql, job_id)[3] is None
    testing.drain(app, "q")
    assert app.calls == ["order", "price", "receipt"]


def test_a_dead_job_reruns_with_attempts_reset_and_its_errors_kept(app, sql):
    job_id = finished(app, fail=True)
    assert row(sql, job_id)[:2] == ("dead", 1)
    app.rerun(job_id, from_step="receipt")
    assert sql("SELECT state, attempts, jsonb_array_length(errors) FROM workerpool_jobs") == [
        ("pending", 0, 1)
    ]


def test_the_rerun_is_in_the_audit_trail(app, sql):
    job_id = finished(app)
    app.rerun(job_id, from_step="receipt", by="ada")
    entry = sql("SELECT actor, action, target, detail FROM workerpool_audit")[-1]
    assert entry[:3] == ("ada", "rerun", f"job {job_id}")
    assert entry[3]["kept"] == ["order", "price"] and entry[3]["dropped"] == ["receipt"]


def test_a_job_moved_to_the_history_reruns(app, sql):
    app.maintenance(history_delay=0)
    job_id = finished(app)
    assert Maintenance(app.registry, app.engine, worker_id="m").keep_history() == 1
    assert sql("SELECT count(*) FROM workerpool_jobs") == [(0,)]
    app.rerun(job_id, from_step="price")
    assert row(sql, job_id)[0] == "pending"


def test_a_live_job_is_refused_and_nothing_written(app, sql):
    job_id = app.enqueue("checkout", {})
    before = sql("SELECT * FROM workerpool_jobs")
    with pytest.raises(JobLive, match=f"job {job_id} is pending"):
        app.rerun(job_id)
    assert sql("SELECT * FROM workerpool_jobs") == before
    assert sql("SELECT count(*) FROM workerpool_audit WHERE action = 'rerun'") == [(0,)]


def test_a_step_never_recorded_is_refused_listing_the_steps(app, sql):
    job_id = finished(app)
    before = sql("SELECT * FROM workerpool_jobs")
    with pytest.raises(UnknownStep) as refused:
        app.rerun(job_id, from_step="ship")
    assert "(its steps: 'order', 'price', 'receipt')" in str(refused.value)
    assert sql("SELECT * FROM workerpool_jobs") == before


@pytest.mark.parametrize(
    ("job_id", "step", "error"),
    [
        ("1", None, InvalidJob),
        (0, None, InvalidJob),
        (True, None, InvalidJob),
        (10**6, None, UnknownJob),
        (1, "", InvalidStep),
        (1, 5, InvalidStep),
        (1, "x" * 201, InvalidStep),
    ],
)
def test_bad_input_is_refused_by_name(app, sql, job_id, step, error):
    finished(app)
    before = sql("SELECT * FROM workerpool_jobs")
    with pytest.raises(error):
        app.rerun(job_id, from_step=step)
    assert sql("SELECT * FROM workerpool_jobs") == before


def test_a_batch_member_is_refused(app, sql):
    with app.batch() as batch:
        batch.enqueue("checkout", {})
    testing.drain(app, "q")
    job_id = sql("SELECT id FROM workerpool_jobs")[0][0]
    with pytest.raises(WrongState, match="belongs to batch"):
        app.rerun(job_id)


@pytest.mark.slow
def test_the_cli_reruns_from_a_step_and_refuses_a_live_job(app, sql, db_url, tmp_path):
    job_id = finished(app)
    done = run_cli("rerun", str(job_id), "--from-step", "price", "--json", url=db_url, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {
        "job": job_id,
        "from_step": "price",
        "dropped": ["price", "receipt"],
    }
    assert list(row(sql, job_id)[3]) == ["order"]
    live = run_cli("rerun", str(job_id), url=db_url, cwd=tmp_path)
    assert live.returncode != 0 and live.stdout == ""
    assert f"job {job_id} is pending" in live.stderr and len(live.stderr.splitlines()) == 1
    testing.drain(app, "q")
    unknown = run_cli("rerun", str(job_id), "--from-step", "ship", url=db_url, cwd=tmp_path)
    assert unknown.returncode != 0 and "its steps: 'order', 'price', 'receipt'" in unknown.stderr
