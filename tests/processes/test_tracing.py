"""OpenTelemetry across the queue: a span in the enqueuing process is the parent of the
``workerpool.run`` span that a real `workerpool run` child exports for the job.

The test process traces with the SDK's InMemorySpanExporter; the supervisor's children (another
process) cannot share it, so tests/apps/traced.py gives them an SDK provider that appends each
finished span to a file, which the test reads.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.apps import traced
from tests.helpers.paths import ROOT
from tests.helpers.processes import Supervisor, kill_all
from tests.helpers.waiting import wait_until

_EXPORTER = InMemorySpanExporter()


@pytest.fixture
def memory_spans():
    """The test process's spans. The global provider can be set once per process: the first
    test sets it, later ones in the same xdist worker reuse it."""
    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(_EXPORTER))
        trace.set_tracer_provider(provider)
    _EXPORTER.clear()
    yield _EXPORTER
    _EXPORTER.clear()


@pytest.fixture
def traced_run(db_url, tmp_path):
    """Start `workerpool run tests.apps.traced:pool`; returns (supervisor, spans file)."""
    running: list[Supervisor] = []
    spans_file = tmp_path / "spans.jsonl"

    def launch() -> tuple[Supervisor, Path]:
        heartbeats = tmp_path / "heartbeats"
        heartbeats.mkdir(mode=0o700)
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("WORKERPOOL_", "WORKER_", "TEST_", "OTEL_"))
        }
        env.update(
            WORKERPOOL_DATABASE_URL=db_url.render_as_string(hide_password=False),
            TEST_SPANS_FILE=str(spans_file),
            PYTHONPATH=str(ROOT),
        )
        log_path = tmp_path / "supervisor.log"
        with log_path.open("wb") as log:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "workerpool",
                    "run",
                    "tests.apps.traced:pool",
                    "--heartbeat-dir",
                    str(heartbeats),
                ],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
                cwd=ROOT,
            )
        running.append(Supervisor(proc, log_path, heartbeats, env))
        return running[-1], spans_file

    yield launch
    kill_all(running)


def exported(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_the_enqueuing_trace_continues_in_the_worker_with_outcome_and_exception(
    memory_spans, traced_run, db_url, sql
):
    app = traced.build(db_url)
    tracer = trace.get_tracer("test")
    with tracer.start_as_current_span("request") as request:
        ok_id = app.enqueue("ok", {})
        async_id = app.enqueue("ok_async", {})
        flaky_id = app.enqueue("flaky", {})
    untraced_id = app.enqueue("ok", {})  # outside any span: its enqueue span starts a trace
    app.dispose()
    stored = dict(sql("SELECT id, trace_context FROM workerpool_jobs"))
    assert stored[ok_id]["traceparent"].split("-")[1] == f"{request.context.trace_id:032x}"
    assert stored[untraced_id]["traceparent"].split("-")[1] != f"{request.context.trace_id:032x}"

    sup, spans_file = traced_run()
    ids = (ok_id, async_id, flaky_id, untraced_id)
    wait_until(
        lambda: (
            sorted(sql("SELECT state FROM workerpool_jobs WHERE id = ANY(%s)", list(ids)))
            == [("dead",), ("done",), ("done",), ("done",)]
        ),
        60,
        message=f"the jobs ran\n{sup.log()}",
    )
    assert exported(spans_file) == []  # still buffered in the children's batch processors
    sup.proc.send_signal(signal.SIGTERM)
    assert sup.wait_exit(30) == 0  # each child flushes its spans as it exits

    local = {s.name: s for s in memory_spans.get_finished_spans()}
    assert local["workerpool.enqueue"].kind is trace.SpanKind.PRODUCER
    enqueue_spans = [s for s in memory_spans.get_finished_spans() if s.name == "workerpool.enqueue"]
    assert len(enqueue_spans) == 4
    assert enqueue_spans[3].parent is None
    by_task = {s.attributes["workerpool.task"]: s for s in enqueue_spans[:3]}
    assert {s.parent.span_id for s in enqueue_spans[:3]} == {request.context.span_id}

    spans = exported(spans_file)
    runs = [s for s in spans if s["name"] == "workerpool.run"]
    assert len(runs) == 5, f"{spans}\n{sup.log()}"  # two attempts of flaky, one of the others
    assert all(s["pid"] != sup.pid and s["pid"] != os.getpid() for s in runs)  # a child's
    run_of = {}
    for s in runs:
        run_of.setdefault(s["attributes"]["workerpool.job.id"], []).append(s)
    trace_id = f"{request.context.trace_id:032x}"
    for job_id, task in ((ok_id, "ok"), (async_id, "ok_async"), (flaky_id, "flaky")):
        for s in run_of[job_id]:
            assert s["kind"] == "CONSUMER"
            assert s["trace_id"] == trace_id
            assert s["parent_id"] == f"{by_task[task].context.span_id:016x}"
            assert s["attributes"]["workerpool.queue"] == "traced"
            assert s["attributes"]["workerpool.task"] == task

    for job_id in (ok_id, async_id):
        (run,) = run_of[job_id]
        assert run["attributes"]["workerpool.outcome"] == "done"
        assert run["attributes"]["workerpool.attempt"] == 1
        assert run["status"] == "UNSET" and run["events"] == []
        work = [
            s for s in spans if s["name"] == "handler.work" and s["parent_id"] == run["span_id"]
        ]
        assert len(work) == 1 and work[0]["trace_id"] == trace_id  # current inside the handler

    first, second = sorted(run_of[flaky_id], key=lambda s: s["attributes"]["workerpool.attempt"])
    assert (
        first["attributes"]["workerpool.attempt"],
        second["attributes"]["workerpool.attempt"],
    ) == (1, 2)
    assert first["attributes"]["workerpool.outcome"] == "fail"
    assert second["attributes"]["workerpool.outcome"] == "permanent"
    for run, kind, message in (
        (first, "ValueError", "boom on attempt 1"),
        (second, "Permanent", "no point retrying"),
    ):
        assert run["status"] == "ERROR"
        (event,) = run["events"]
        assert event["name"] == "exception"
        assert event["attributes"]["exception.type"].endswith(kind)
        assert event["attributes"]["exception.message"] == message
        assert "Traceback" in event["attributes"]["exception.stacktrace"]

    (untraced,) = run_of[untraced_id]
    assert untraced["trace_id"] == f"{enqueue_spans[3].context.trace_id:032x}" != trace_id
