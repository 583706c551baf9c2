"""`workerpool job show ID`: a job's whole story after a real `kill -9` mid-job: both
attempts, the WorkerLost entry naming the worker that died, the result, its steps, its times;
as text and as JSON. Bad input: one line, non-zero."""

from __future__ import annotations

import json
import os
import signal

from tests.helpers.cli import run_cli
from tests.helpers.db import job_row
from tests.helpers.waiting import wait_until


def test_the_story_of_a_job_whose_worker_was_killed(start, app, sql, db_url, tmp_path):
    sup = start("--queue", "slow")
    sup.wait_running("slow")
    job_id = app.enqueue("steps", {"n": 10, "step": 0.2}, key="story")
    wait_until(
        lambda: (job_row(sql, job_id)["checkpoint"] or {}).get("done", 0) >= 2,
        20,
        message=f"the job has begun\n{sup.log()}",
    )
    dead_worker = job_row(sql, job_id)["claimed_by"]
    os.kill(sup.child_pid("slow"), signal.SIGKILL)
    wait_until(
        lambda: job_row(sql, job_id)["state"] == "done",
        60,
        message=f"the job done after the kill\n{sup.log()}",
    )

    shown = run_cli("job", "show", str(job_id), url=db_url, cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    text = shown.stdout
    assert text.startswith(f"JOB {job_id} steps on slow: done, attempt 2 of 5\n"), text
    assert "key=story" in text and 'PAYLOAD {"n": 10, "step": 0.2}' in text
    times = text.split("TIMES\n")[1].splitlines()
    assert times[0].split() == ["ENQUEUED", "STARTED", "FINISHED", "WAITED", "RAN"]
    errors = text.split("ERRORS\n")[1].splitlines()
    assert errors[0].split() == ["ATTEMPT", "AT", "WORKER", "ERROR"]
    assert errors[1].split()[0] == "1" and dead_worker in errors[1] and "WorkerLost" in errors[1]
    assert "RESULT null" in text

    data = json.loads(
        run_cli("job", "show", str(job_id), "--json", url=db_url, cwd=tmp_path).stdout
    )
    assert (data["id"], data["state"], data["attempts"], data["max_attempts"]) == (
        job_id,
        "done",
        2,
        5,
    )
    assert [(e["attempt"], e["type"], e["worker"]) for e in data["errors"]] == [
        (1, "WorkerLost", dead_worker)
    ]
    times = data["times"]
    assert times["enqueued"] <= times["started"] <= times["finished"]
    assert times["waited"] >= 0 and times["ran"] > 0 and times["next_run"] is None
    assert data["payload"] == {"n": 10, "step": 0.2} and data["key"] == "story"


def test_the_story_of_a_failed_attempt_shows_its_error_and_next_run(app, db_url, tmp_path):
    from workerpool import testing

    job_id = app.enqueue("flaky", {"fail": 5})
    testing.drain(app)  # the first attempt fails; the retry waits its backoff
    data = json.loads(
        run_cli("job", "show", str(job_id), "--json", url=db_url, cwd=tmp_path).stdout
    )
    assert data["state"] == "failed" and data["times"]["next_run"] is not None
    assert [(e["type"], e["message"]) for e in data["errors"]] == [
        ("ValueError", "flaky attempt 1")
    ]
    text = run_cli("job", "show", str(job_id), url=db_url, cwd=tmp_path).stdout
    assert "NEXT RUN" in text and "ValueError: flaky attempt 1" in text


def test_an_unknown_or_bad_id_is_one_line(db_url, tmp_path):
    missing = run_cli("job", "show", "999999", url=db_url, cwd=tmp_path)
    assert missing.returncode == 1
    assert (
        missing.stderr == "workerpool job: no job 999999 (never enqueued, or pruned after"
        " the retention)\n"
    )
    bad = run_cli("job", "show", "0", url=db_url, cwd=tmp_path)
    assert bad.returncode == 1 and len(bad.stderr.splitlines()) == 1, bad.stderr
