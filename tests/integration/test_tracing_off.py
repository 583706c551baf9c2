"""Tracing costs nothing it does not need: without opentelemetry installed (simulated by
blocking the import) or with the API but no SDK configured, enqueue and run work as before and
store no trace context."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.helpers.paths import ROOT

pytestmark = pytest.mark.slow  # subprocesses: a Python running a worker, twice

SCRIPT = r"""
import sys
if sys.argv[2] == "absent":
    sys.modules["opentelemetry"] = None  # import opentelemetry now raises ImportError
from workerpool import WorkerPool
from workerpool.model import tracing
from tests.helpers.waiting import wait_until
from tests.helpers.workers import running

pool = WorkerPool(sys.argv[1])
pool.queue("q", poll_interval=0.05)
ran = []
pool.task(queue="q", name="t")(lambda job: ran.append(job.id))
job_id = pool.enqueue("t", {})
many = pool.enqueue_many([("t", {}), ("t", {})])
with running(pool, "q"):
    wait_until(lambda: len(ran) == 3, 20, message="the jobs ran")
with pool.engine.connect() as conn:
    from sqlalchemy import text
    stored = conn.execute(text("SELECT count(*) FROM workerpool_jobs"
                               " WHERE trace_context IS NOT NULL")).scalar()
print(tracing.ENABLED, stored, "opentelemetry.sdk" in sys.modules,
      tracing.enqueue_span("q", "t") is tracing.enqueue_span("q", "t"))
"""


def run(db_url, mode: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, db_url.render_as_string(hide_password=False), mode],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_without_opentelemetry_nothing_is_traced_or_stored(db_url):
    # Off: one shared no-op context manager per enqueue, no span, no column value.
    assert run(db_url, "absent") == ["False", "0", "False", "True"]


def test_with_the_api_but_no_sdk_no_context_is_stored(db_url):
    # The API's no-op tracer makes invalid spans: inject writes nothing, the column stays NULL.
    assert run(db_url, "api") == ["True", "0", "False", "False"]
