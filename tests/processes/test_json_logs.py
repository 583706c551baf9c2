"""`workerpool run --log-format json`: every line on stderr is one JSON object, with the event
names the text format uses and the worker/queue/pid fields as keys."""

from __future__ import annotations

import json
import signal

from tests.helpers.waiting import wait_until


def records(sup) -> list[dict]:
    lines = [line for line in sup.log().splitlines() if line.strip()]
    parsed = []
    for line in lines:
        try:
            parsed.append(json.loads(line))
        except ValueError:
            raise AssertionError(f"not a JSON line: {line!r}\n{sup.log()}") from None
    assert all(isinstance(record, dict) for record in parsed)
    return parsed


def by_event(parsed: list[dict], event: str) -> list[dict]:
    return [record for record in parsed if record.get("event") == event]


def test_every_line_is_json_with_the_events_and_their_fields(start, app, sql):
    sup = start("--log-format", "json")
    job_id = app.enqueue("quick", {"seconds": 0})
    wait_until(
        lambda: sql("SELECT state FROM workerpool_jobs WHERE id = %s", job_id) == [("done",)],
        30,
        message="the job ran",
    )
    wait_until(lambda: by_event(records(sup), "child_running"), 15, message=sup.log())
    sup.proc.send_signal(signal.SIGTERM)
    assert sup.wait_exit(30) == 0
    parsed = records(sup)

    started = by_event(parsed, "supervisor_started")
    assert started and started[0]["logger"] == "workerpool.supervisor"
    assert {"time", "level", "logger", "process", "message"} <= set(started[0])
    children = {r["worker"]: r["pid"] for r in by_event(parsed, "child_started")}
    assert {"fast", "slow"} <= set(children)
    assert all(isinstance(pid, int) for pid in children.values())
    workers = [r for r in by_event(parsed, "worker_started") if r["logger"] == "workerpool.worker"]
    assert {r["queue"] for r in workers} >= {"fast", "slow"}
    assert all(r["worker"].count(":") >= 2 for r in workers)  # host:pid:random
    assert by_event(parsed, "drain_finished")


def test_the_environment_variable_selects_json_and_text_stays_the_default(start):
    sup = start(env={"WORKERPOOL_LOG_FORMAT": "json"})
    wait_until(lambda: by_event(records(sup), "supervisor_started"), 15, message=sup.log())
    sup.proc.send_signal(signal.SIGTERM)
    assert sup.wait_exit(30) == 0

    text = start()
    wait_until(lambda: text.events("supervisor_started"), 15, message=text.log())
    assert not text.log().lstrip().startswith("{")
    text.proc.send_signal(signal.SIGTERM)
    assert text.wait_exit(30) == 0


def test_a_bad_format_is_refused_in_one_line(start):
    sup = start(env={"WORKERPOOL_LOG_FORMAT": "xml"})
    assert sup.wait_exit(30) != 0
    lines = sup.log().strip().splitlines()
    assert len(lines) == 1 and "log format must be one of" in lines[0]
