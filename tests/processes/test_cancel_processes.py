"""Cancel and pause under real `workerpool run` processes, and their CLI.

`workerpool run tests.apps.control:pool` (own session, SIGKILLed afterwards); the CLI through
tests.helpers.cli.run_cli. PgBouncer (cancel by lease renewal, no LISTEN): test_pgbouncer.py.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from tests.helpers.cli import run_cli
from tests.helpers.db import job_row
from tests.helpers.paths import ROOT
from tests.helpers.processes import Supervisor, kill_all
from tests.helpers.waiting import wait_until
from workerpool import WorkerPool
from workerpool.client import Engines

APP = "tests.apps.control:pool"


@pytest.fixture
def launch(db_url, tmp_path) -> Iterator:
    running: list[Supervisor] = []

    def start(**env: str) -> Supervisor:
        heartbeat_dir = tmp_path / f"heartbeats{len(running)}"
        heartbeat_dir.mkdir(mode=0o700)
        full_env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("WORKERPOOL_", "WORKER_", "TEST_"))
        }
        full_env.update(
            WORKERPOOL_DATABASE_URL=db_url.render_as_string(hide_password=False),
            PYTHONPATH=str(ROOT),
            **env,
        )
        log_path = tmp_path / f"supervisor{len(running)}.log"
        with log_path.open("wb") as log_file:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "workerpool",
                    "run",
                    APP,
                    "--heartbeat-dir",
                    str(heartbeat_dir),
                ],
                env=full_env,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=log_file,
                start_new_session=True,
                cwd=ROOT,
            )
        running.append(Supervisor(proc, log_path, heartbeat_dir, full_env))
        return running[-1]

    yield start
    kill_all(running, show_logs=True)


@pytest.fixture
def app(db_url) -> Iterator[WorkerPool]:
    from tests.apps import control

    pool = copy.copy(control.pool)  # its declarations, on this test's database
    pool.engines = Engines(db_url)
    yield pool
    pool.dispose()


def state(sql, job_id: int) -> str:
    return job_row(sql, job_id)["state"]


def wait_state(sql, job_id: int, wanted: str, timeout: float = 20, sup=None) -> None:
    wait_until(
        lambda: state(sql, job_id) == wanted,
        timeout,
        message=f"job {job_id} {wanted}\n{sup.log()[-3000:] if sup else ''}",
    )


def cancel_latency(sql, app, tmp_path, task: str, sup) -> float:
    path = tmp_path / f"{task}.stamp"
    job_id = app.enqueue(task, {"stamp": str(path)})
    wait_state(sql, job_id, "processing", sup=sup)
    wait_until(
        lambda: sql(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'workerpool-listen:ctl'"
        )[0][0],
        10,
        message="the listener",
    )
    asked = time.time()
    result = app.cancel([job_id], reason="test")
    assert result.stopping == [job_id]
    wait_state(sql, job_id, "cancelled", sup=sup)
    wait_until(path.exists, 5, message="the handler's stamp")
    return float(path.read_text()) - asked


def test_running_cooperative_and_async_jobs_stop_within_about_a_second(launch, app, sql, tmp_path):
    sup = launch()
    sup.wait_running("ctl")
    for task in ("waits", "sleeps"):
        latency = cancel_latency(sql, app, tmp_path, task, sup)
        print(f"{task}: cancel reached the handler in {latency * 1000:.0f} ms")
        assert latency < 5, latency  # about a second; generous on a loaded machine
    assert not sup.events("child_exited")  # nothing recycled: they obeyed


def test_a_handler_that_ignores_its_cancel_is_cancelled_and_its_child_recycled(launch, app, sql):
    sup = launch(TEST_CANCEL_GRACE="0.5")
    sup.wait_running("ctl")
    first = sup.child_pid("ctl")
    stubborn = app.enqueue("stubborn", {"seconds": 120})
    wait_state(sql, stubborn, "processing", sup=sup)
    neighbour = app.enqueue("quick", {"seconds": 2})  # the other slot: it finishes first
    wait_state(sql, neighbour, "processing", sup=sup)
    app.cancel([stubborn])
    wait_state(sql, stubborn, "cancelled", 10, sup)
    wait_until(
        lambda: sup.events("child_exited", worker="ctl", status="exit:75"),
        30,
        message=f"the child exits for recycling\n{sup.log()[-3000:]}",
    )
    assert state(sql, neighbour) == "done"  # the neighbour finished before the recycle
    wait_until(lambda: sup.child_pid("ctl") != first, 15, message="a replacement child")
    after = app.enqueue("quick", {})
    wait_state(sql, after, "done", sup=sup)
    row = job_row(sql, stubborn)
    assert row["finished"] and [e["type"] for e in row["errors"]] == ["Cancelled"]
    assert sql("SELECT count(*) FROM workerpool_jobs WHERE state = 'processing'") == [(0,)]


def test_the_recycle_after_an_ignored_cancel_waits_for_a_long_neighbour(launch, app, sql):
    """Two long jobs on one child: cancelling the one that ignores it leaves the other running
    to its end, past the drain timeout (it was released as interrupted and ran again)."""
    sup = launch(TEST_CANCEL_GRACE="0.3", TEST_CANCEL_DRAIN="0.5")
    sup.wait_running("ctl")
    first = sup.child_pid("ctl")
    stubborn = app.enqueue("stubborn", {"seconds": 120})
    neighbour = app.enqueue("quick", {"seconds": 4})
    wait_state(sql, stubborn, "processing", sup=sup)
    wait_state(sql, neighbour, "processing", sup=sup)
    app.cancel([stubborn], by="ops", reason="wrong-file")
    wait_state(sql, stubborn, "cancelled", 10, sup)
    wait_state(sql, neighbour, "done", 30, sup)
    row = job_row(sql, neighbour)
    assert (row["attempts"], row["errors"]) == (1, []), row  # never interrupted, never re-run
    wait_until(
        lambda: sup.events("child_exited", worker="ctl", status="exit:75"),
        30,
        message=f"the child exits for recycling\n{sup.log()[-3000:]}",
    )
    wait_until(lambda: sup.child_pid("ctl") != first, 15, message="a replacement child")
    line = sup.events("job_cancelled", logger="cancel")
    assert [(e.fields["id"], e.fields["by"], e.fields["reason"]) for e in line] == [
        (str(stubborn), "ops", "wrong-file")
    ], sup.log()[-3000:]


def test_pause_on_two_supervisors_then_resume_restarts_both(launch, app, sql):
    sups = [launch(), launch()]
    for sup in sups:
        sup.wait_running("ctl")
    app.pause("ctl", by="ops")
    for sup in sups:
        wait_until(
            lambda s=sup: s.events("worker_paused", logger="worker"),
            10,
            message=f"the pause reaches each supervisor\n{sup.log()[-2000:]}",
        )
    ids = [app.enqueue("quick", {"seconds": 0.01}) for _ in range(6)]
    other = app.enqueue("elsewhere", {"seconds": 0.01})
    wait_state(sql, other, "done")  # another queue runs; ticks go on
    beats = {s.pid: s.heartbeat_mtime("ctl") for s in sups}
    wait_until(
        lambda: all(s.heartbeat_mtime("ctl") > beats[s.pid] for s in sups),
        10,
        message="paused workers keep their heartbeats fresh",
    )
    assert all(s.healthcheck().returncode == 0 for s in sups)
    assert {state(sql, i) for i in ids} == {"pending"}
    app.resume("ctl")
    wait_until(lambda: {state(sql, i) for i in ids} == {"done"}, 20, message="resumed")
    assert all(s.events("worker_resumed", logger="worker") for s in sups)


# -- the CLI ---------------------------------------------------------------------------------


def test_cli_cancel_reports_each_id_and_refuses_unknown_ones(app, db_url, sql, tmp_path):
    queued = app.enqueue("quick", {})
    done = app.enqueue("quick", {})
    sql("UPDATE workerpool_jobs SET state = 'done', finished_at = now() WHERE id = %s", done)
    refused = run_cli("cancel", str(queued), "424242", url=db_url, cwd=tmp_path)
    assert refused.returncode != 0
    assert refused.stderr.strip() == (
        "workerpool cancel: unknown job id(s): 424242; nothing was changed"
    )
    dry = run_cli("cancel", str(queued), str(done), "--dry-run", url=db_url, cwd=tmp_path)
    assert dry.returncode == 0, dry.stderr
    assert f"job {queued}: dry run: would be cancelled" in dry.stdout
    assert state(sql, queued) == "pending"
    real = run_cli(
        "cancel", str(queued), str(done), "--reason", "not needed", url=db_url, cwd=tmp_path
    )
    assert real.stdout.splitlines() == [
        f"job {queued}: cancelled",
        f"job {done}: already finished (done)",
    ]
    entry = job_row(sql, queued)["errors"][-1]
    assert entry["type"] == "Cancelled" and entry["message"] == "not needed" and entry["by"]


def test_cli_cancel_by_queue_with_filters_and_json(app, db_url, sql, tmp_path):
    a = app.enqueue("quick", {})
    b = app.enqueue("stubborn", {})
    out = run_cli(
        "cancel", "--queue", "ctl", "--task", "stubborn", "--json", url=db_url, cwd=tmp_path
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["jobs"] == [
        {"id": b, "verdict": "cancelled", "state": "cancelled"}
    ]
    assert state(sql, a) == "pending"
    bad = run_cli("cancel", "--queue", "ctl", "--state", "done", url=db_url, cwd=tmp_path)
    assert bad.returncode != 0 and "state must be one of pending, processing, failed" in bad.stderr
    both = run_cli("cancel", "1", "--queue", "ctl", url=db_url, cwd=tmp_path)
    assert both.returncode != 0 and "not both" in both.stderr


def test_cli_pause_resume_and_status(app, db_url, sql, tmp_path):
    unknown = run_cli("pause", "ctlx", "--app", APP, url=db_url, cwd=tmp_path)
    assert unknown.returncode != 0
    assert unknown.stderr.strip() == (
        "workerpool pause: unknown queue 'ctlx'; known queues: ctl, other"
    )
    assert run_cli("pause", "ctl", "--app", APP, url=db_url, cwd=tmp_path).stdout == (
        "queue ctl paused\n"
    )
    data = json.loads(run_cli("status", "--json", url=db_url, cwd=tmp_path).stdout)
    assert data["queues"]["ctl"]["paused"] is True and data["queues"]["ctl"]["paused_by"]
    assert "PAUSED (claiming nothing)" in run_cli("status", url=db_url, cwd=tmp_path).stdout
    # without --app: known queues are those with live workers or rows (ctl has a state row now)
    assert run_cli("resume", "ctl", url=db_url, cwd=tmp_path).returncode == 0
    nothing = run_cli("pause", "other", url=db_url, cwd=tmp_path)
    assert nothing.returncode != 0 and "known queues: ctl" in nothing.stderr
    data = json.loads(run_cli("status", "--json", url=db_url, cwd=tmp_path).stdout)
    assert data["queues"]["ctl"]["paused"] is False
