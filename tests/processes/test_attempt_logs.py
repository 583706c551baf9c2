"""Each attempt in a real `workerpool run`'s log: a failure that will be retried is a WARNING
with its error and next run time; starts and finishes are DEBUG lines."""

from __future__ import annotations

from datetime import datetime

from tests.helpers.waiting import wait_until


def lines_of(sup, event: str) -> list[str]:
    return [line for line in sup.log().splitlines() if f"] {event}: " in line]


def test_a_retried_failure_is_a_warning_with_its_error_and_next_run(start, app):
    sup = start("--queue", "fast", "--log-level", "DEBUG")
    sup.wait_running("fast")
    job_id = app.enqueue("flaky", {"fail": 1})
    assert app.result(job_id, timeout=60) == "ok"
    wait_until(
        lambda: sup.events("job_finished", logger="worker", state="done"), 15, message=sup.log()
    )

    retried = lines_of(sup, "job_retry_scheduled")
    assert len(retried) == 1, sup.log()
    line = retried[0]
    assert " WARNING workerpool.worker[" in line
    assert f"job {job_id} failed, will retry: task=flaky attempt=1 retry_in=0.5s" in line
    assert line.endswith("error=ValueError: flaky attempt 1")
    event = sup.events("job_retry_scheduled", logger="worker")[0]
    next_run = datetime.fromisoformat(event.fields["next_run"]).timestamp()
    assert abs(next_run - (event.at + 0.5)) < 2  # the log line's own time plus the backoff

    started = sup.events("job_started", logger="worker")
    assert [e.fields["attempt"] for e in started] == ["1", "2"]
    assert all(" DEBUG workerpool.worker[" in line for line in lines_of(sup, "job_started"))
    finished = sup.events("job_finished", logger="worker")
    assert [(e.fields["state"], e.fields["attempt"]) for e in finished] == [
        ("failed", "1"),
        ("done", "2"),
    ]


def test_at_info_only_the_retry_is_logged(start, app):
    sup = start("--queue", "fast")
    sup.wait_running("fast")
    job_id = app.enqueue("flaky", {"fail": 1})
    assert app.result(job_id, timeout=60) == "ok"
    assert len(lines_of(sup, "job_retry_scheduled")) == 1, sup.log()
    assert not lines_of(sup, "job_started") and not lines_of(sup, "job_finished")
