"""Steps as an operator sees them: every step's name, start, end and stored value on the job's
dashboard page and in `workerpool status --job ID`; a waiting job's page and `why` name the
signal it waits for."""

from __future__ import annotations

import json
import re

import pytest

from tests.helpers.cli import run_cli
from workerpool import WorkerPool
from workerpool.testing import drain


@pytest.fixture
def flows(app_pool: WorkerPool) -> WorkerPool:
    app_pool.queue("flows")

    @app_pool.task(queue="flows")
    def onboarding(job):
        job.step("account", lambda: {"account": 7, "note": "<b>bold</b>"})
        job.step("welcome", lambda: "sent")
        job.wait_for("verified:7", timeout=3600)

    return app_pool


def test_the_job_page_lists_each_step_and_the_signal_it_waits_for(flows, http):
    job_id = flows.enqueue("onboarding", {})
    assert drain(flows, "flows") == [(job_id, "waiting")]
    page = http.get(f"/jobs/{job_id}")
    assert page.status_code == 200
    table = re.search(r'<table class="steps" id="steps">(.*?)</table>', page.text, re.S)[1]
    rows = re.findall(r'<tr class="step ([\w-]+)">(.*?)</tr>', table, re.S)
    assert [(status, re.search(r"<code>(.*?)</code>", row)[1]) for status, row in rows] == [
        ("done", "account"),
        ("done", "welcome"),
        ("waiting", "verified:7"),
    ]
    assert "&lt;b&gt;bold&lt;/b&gt;" in table and "<b>bold" not in table  # escaped
    assert "waits for signal <code>verified:7</code> until" in table
    why = re.search(r'<section class="why" id="why">(.*?)</section>', page.text, re.S)[1]
    assert "it waits for signal &#39;verified:7&#39;" in why
    assert "then wait_for raises TimeoutError" in why


def test_a_sleep_step_shows_until_when_and_a_step_that_returned_nothing_null(app_pool, http):
    app_pool.queue("naps")

    @app_pool.task(queue="naps")
    def napper(job):
        job.step("nothing", lambda: None)
        job.sleep("nap", 3600)

    job_id = app_pool.enqueue("napper", {})
    drain(app_pool, "naps")
    table = re.search(
        r'<table class="steps" id="steps">(.*?)</table>', http.get(f"/jobs/{job_id}").text, re.S
    )[1]
    rows = dict(
        re.findall(r'<tr class="step [\w-]+"><td><code>(\w+)</code>(.*?)</tr>', table, re.S)
    )
    assert "None" not in table
    assert "<pre>null</pre>" in rows["nothing"]
    assert re.search(r"sleeps until \d{4}-\d\d-\d\d", rows["nap"]), rows["nap"]


def status(db_url, tmp_path, job_id: int, *args: str) -> str:
    done = run_cli("status", "--job", str(job_id), *args, url=db_url, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.slow
def test_status_job_prints_the_steps_and_the_signal(flows, db_url, tmp_path):
    job_id = flows.enqueue("onboarding", {})
    drain(flows, "flows")
    out = status(db_url, tmp_path, job_id)
    assert f"job {job_id} (onboarding): it waits for signal 'verified:7'" in out
    lines = out.split("STEPS\n")[1].splitlines()
    assert lines[0].split() == ["STEP", "KIND", "STATUS", "ATTEMPT", "STARTED", "FINISHED", "VALUE"]
    assert lines[1].split()[:4] == ["account", "step", "done", "1"]
    assert json.loads(lines[1].split("  ")[-1]) == {"account": 7, "note": "<b>bold</b>"}
    assert lines[2].split()[:3] == ["welcome", "step", "done"] and lines[2].endswith('"sent"')
    assert lines[3].split()[:3] == ["verified:7", "wait", "waiting"]
    assert lines[3].endswith("waits for signal 'verified:7'")
    data = json.loads(status(db_url, tmp_path, job_id, "--json"))
    assert [s["name"] for s in data["steps"]] == ["account", "welcome", "verified:7"]
    assert data["steps"][0]["value"] == {"account": 7, "note": "<b>bold</b>"}
    assert data["steps"][0]["started_at"] <= data["steps"][0]["finished_at"]
    assert data["reasons"][-1]["code"] == "signal"
    flows.signal("verified:7", {"ok": True})
    drain(flows, "flows")
    data = json.loads(status(db_url, tmp_path, job_id, "--json"))
    assert data["steps"][2]["status"] == "done" and data["steps"][2]["value"] == {"ok": True}


def test_a_sleeping_step_shows_as_sleeping(flows, db_url, tmp_path):
    @flows.task(queue="flows")
    def nap(job):
        job.sleep("nap", 600)

    job_id = flows.enqueue("nap", {})
    drain(flows, "flows")
    data = json.loads(status(db_url, tmp_path, job_id, "--json"))
    assert [(s["name"], s["kind"], s["status"]) for s in data["steps"]] == [
        ("nap", "sleep", "sleeping")
    ]
    assert data["reasons"][0]["code"] == "scheduled"
