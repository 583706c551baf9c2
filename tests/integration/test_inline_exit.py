"""A handler that calls ``exit()`` fails its job when run inline (``testing.drain``), as it does
in a worker, instead of ending the process that drains: Django's own tests/tasks ask it of a
backend that runs tasks at enqueue."""

from __future__ import annotations

import sys

from workerpool import testing


def test_a_handler_s_exit_fails_its_job_inline(pool, sql):
    @pool.task(queue="q", max_attempts=1)
    def leave(job) -> None:
        sys.exit("leaving early")

    job_id = pool.enqueue(leave, {})
    testing.drain(pool, "q")  # returns: SystemExit is the job's, not the test's
    [(state, entry)] = sql("SELECT state, errors->0 FROM workerpool_jobs WHERE id = %s", job_id)
    assert state == "dead"
    assert (entry["type"], entry["class"]) == ("SystemExit", "builtins.SystemExit")
    assert entry["message"] == "leaving early"
