"""Typed tasks under a real `workerpool run`: the forked worker child rebuilds a job's
arguments and the caller gets the result back as the return type; a payload an older deploy
wrote goes dead at its first claim with the reason, and the supervisor keeps running."""

from __future__ import annotations

import signal
from datetime import datetime

import pytest

from tests.apps import typed
from tests.helpers.processes import kill_all, start_supervisor
from workerpool import JobFailed
from workerpool.client.tasks import wrap

pytestmark = pytest.mark.slow


def test_a_supervisor_runs_typed_jobs_and_kills_none_for_a_stale_payload(db_url, tmp_path, sql):
    pool, old = typed.build(db_url), typed.build_v1(db_url)
    sup = start_supervisor("tests.apps.typed:pool", db_url, tmp_path)
    try:
        sup.wait_running("typed")
        welcome = typed.Welcome("ada@example.com", 1, typed.Plan.PRO)
        handle = wrap(pool, pool.registry.task_spec("send_welcome")).enqueue(
            welcome, template="run"
        )
        stale = old.enqueue("send_welcome", {"email": "ada@example.com", "user_id": 1})
        assert handle.result(timeout=60) == typed.Receipt(
            "ada@example.com", datetime.fromisoformat("2026-01-02T03:04:05+00:00"), "run"
        )
        with pytest.raises(JobFailed) as failed:
            pool.result(stale, timeout=60)
        assert failed.value.reason == "permanent"
        assert failed.value.errors[-1]["type"] == "ArgumentsRefused"
        assert sql("SELECT attempts FROM workerpool_jobs WHERE id = %s", stale) == [(1,)]
        sup.proc.send_signal(signal.SIGTERM)
        assert sup.wait_exit(30) == 0, sup.log()
    finally:
        kill_all([sup])
        pool.dispose()
        old.dispose()
