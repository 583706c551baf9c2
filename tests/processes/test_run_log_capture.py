"""Attempt logs under a real `workerpool run`: a handler's records at the run's --log-level
(INFO by default) are kept with its attempt, as docs/handlers.md says, not only warnings."""

from __future__ import annotations

import copy
import signal

from tests.apps import logged
from tests.helpers.processes import start_supervisor
from tests.helpers.waiting import wait_until
from workerpool.client import Engines


def kept(sql, job_id: int) -> list[tuple[str, str]]:
    rows = sql("SELECT records FROM workerpool_job_logs WHERE job_id = %s", job_id)
    return [(r["level"], r["message"]) for row in rows for r in row[0]]


def run_one(db_url, sql, tmp_path, *args: str) -> tuple[list[tuple[str, str]], str]:
    sup = start_supervisor("tests.apps.logged:pool", db_url, tmp_path, *args)
    try:
        pool = copy.copy(logged.pool)  # its declarations, on this test's database
        pool.engines = Engines(db_url)
        job_id = pool.enqueue("load", {"file": "a.csv"})
        pool.dispose()
        wait_until(
            lambda: sql("SELECT state FROM workerpool_jobs WHERE id = %s", job_id) == [("done",)],
            30,
            message=f"the job ran\n{sup.log()}",
        )
        sup.proc.send_signal(signal.SIGTERM)
        assert sup.wait_exit(30) == 0
        return kept(sql, job_id), sup.log()
    finally:
        if sup.proc.poll() is None:
            sup.proc.kill()
            sup.proc.wait(10)


def test_a_handlers_info_records_are_kept_at_the_default_level(db_url, sql, tmp_path):
    records, log = run_one(db_url, sql, tmp_path)
    assert records == [("INFO", "reading a.csv"), ("WARNING", "row 7 of a.csv skipped")]
    # stderr is unchanged: workerpool's own events, and other loggers' warnings only
    assert "row 7 of a.csv skipped" in log and "reading a.csv" not in log
    assert "child_running" in log


def test_the_level_given_is_the_level_kept(db_url, sql, tmp_path):
    records, _ = run_one(db_url, sql, tmp_path, "--log-level", "WARNING")
    assert records == [("WARNING", "row 7 of a.csv skipped")]
