"""Durable steps under a real `workerpool run`: a job SIGKILLed after step 2 of 4 runs steps 3
and 4 only on its next attempt (the ledger its steps write shows each step once), and
`workerpool signal` wakes a job waiting for it."""

from __future__ import annotations

import os
import signal

import pytest

from tests.apps import steps as app_module
from tests.helpers.cli import run_cli
from tests.helpers.processes import alive
from tests.helpers.waiting import wait_until

APP = app_module  # the app the shared app and supervise fixtures build (conftest)


def ledger(sql, job_id: int) -> list[tuple[str, int]]:
    return sql("SELECT step, attempt FROM step_ledger WHERE job_id = %s ORDER BY at", job_id)


@pytest.mark.timeout(180)
def test_a_job_killed_after_step_2_of_4_runs_only_steps_3_and_4_next_time(app, sql, supervise):
    sql(app_module.LEDGER)
    job_id = app.enqueue("four_steps", {})
    sup = supervise()
    sup.wait_running("flows")
    wait_until(
        lambda: (
            len(ledger(sql, job_id)) == 2
            and sql("SELECT steps ? 'receipt' FROM workerpool_jobs WHERE id = %s", job_id)
            == [(True,)]
        ),
        30,
        message=f"steps 1 and 2 recorded\n{sup.log()[-3000:]}",
    )
    pid = sup.child_pid("flows")
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: not alive(pid), 30, message="the killed child reaped")
    wait_until(
        lambda: sql("SELECT state FROM workerpool_jobs WHERE id = %s", job_id) == [("done",)],
        60,
        message=f"the job done\n{sup.log()[-3000:]}",
    )
    assert ledger(sql, job_id) == [("charge", 1), ("receipt", 1), ("crm", 2), ("archive", 2)]
    assert app.result(job_id, timeout=5) == ["charge ok", "receipt ok", "crm ok", "archive ok"]
    steps = sql("SELECT steps FROM workerpool_jobs WHERE id = %s", job_id)[0][0]
    assert {name: entry["attempt"] for name, entry in steps.items()} == {
        "charge": 1,
        "receipt": 1,
        "crm": 2,
        "archive": 2,
    }


@pytest.mark.timeout(120)
def test_workerpool_signal_wakes_a_job_waiting_under_a_real_supervisor(
    app, sql, supervise, db_url, tmp_path
):
    job_id = app.enqueue("approval", {"order": 42})
    sup = supervise()
    sup.wait_running("flows")
    wait_until(
        lambda: (
            sql("SELECT state, signal FROM workerpool_jobs WHERE id = %s", job_id)
            == [("waiting", "approved:42")]
        ),
        30,
        message=f"the job waiting\n{sup.log()}",
    )
    sent = run_cli("signal", "approved:42", "--payload", '{"by": "ops"}', url=db_url, cwd=tmp_path)
    assert sent.returncode == 0, sent.stderr
    assert sent.stdout.startswith("signal 'approved:42' sent at ")
    assert app.result(job_id, timeout=30) == {"approved": {"by": "ops"}}
    again = run_cli(
        "signal", "approved:42", "--payload", '{"by": "someone else"}', url=db_url, cwd=tmp_path
    )
    assert again.returncode != 0 and len(again.stderr.strip().splitlines()) == 1
    assert "already sent" in again.stderr
    assert sql("SELECT payload FROM workerpool_signals") == [({"by": "ops"},)]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("approved:1", "--payload", "{not json"), "--payload is not valid JSON"),
        (("approved:1", "--payload", "NaN"), "--payload is not valid JSON"),
        (("",), "signal name must be a non-empty string"),
        (("x" * 201,), "signal name must be a non-empty string"),
    ],
)
def test_workerpool_signal_refuses_bad_input_in_one_line_and_writes_nothing(
    db_url, sql, tmp_path, args, message
):
    out = run_cli("signal", *args, url=db_url, cwd=tmp_path)
    assert out.returncode != 0
    assert message in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert sql("SELECT count(*) FROM workerpool_signals") == [(0,)]
