"""``job.wait_for_job`` under a real `workerpool run`, on a queue of one slot: parents that
await their children finish (a parent blocking in ``pool.result`` would hold the only slot and
never let its child run), a child SIGKILLed mid-run is run again and its parent still gets its
result, a whole supervisor SIGKILLed while parents wait loses nothing, and a child that dies
raises ``JobFailed`` in its parent. No parent ever ends before its child.

The app is ``tests/apps/awaits.py``.
"""

from __future__ import annotations

import os
import signal

import pytest

from tests.apps import awaits as app_module
from tests.helpers.processes import alive, kill_group
from tests.helpers.waiting import wait_until

SETTLE = 120.0  # a liveness bound for a loaded machine, not a timing claim
STALE_MS = "4000"  # the leases a supervisor killed whole leaves behind: recovered soon
#: Every job, moved to the history or not (the maintenance child moves finished ones).
JOBS = (
    "(SELECT id, task, state, result, finished_at FROM workerpool_jobs UNION ALL"
    " SELECT id, task, state, result, finished_at FROM workerpool_jobs_history)"
)

APP = app_module  # the app the shared app and supervise fixtures build (conftest)
APP_TABLES = (app_module.LEDGER,)  # made by the app fixture

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def all_done(sql, count: int) -> bool:
    return sql(f"SELECT count(*) FROM {JOBS} AS j WHERE state = 'done'")[0][0] == count


def noted(sql, what: str) -> list:
    return sql("SELECT job_id FROM await_ledger WHERE what = %s", what)


def assert_each_parent_after_its_child(sql) -> None:
    rows = sql(
        "SELECT p.id, p.result->'child', p.result->'got', p.finished_at, c.finished_at,"
        f" c.result FROM {JOBS} AS p"
        f" JOIN {JOBS} AS c ON c.id = (p.result->>'child')::bigint"
        " WHERE p.task = 'parent'"
    )
    assert rows
    for _, _, got, parent_end, child_end, child_result in rows:
        assert parent_end > child_end
        assert got == child_result
    # one child per parent: the spawn is a step, and its key makes a spawn that ran but was
    # not recorded (the process killed in between) find the same child again
    assert sql(f"SELECT count(*) FROM {JOBS} AS j WHERE task = 'child'") == [(len(rows),)]


def test_parents_await_children_on_a_one_slot_queue(app, sql, supervise):
    parents = [app.enqueue("parent", {"n": n}) for n in range(3)]
    sup = supervise()
    wait_until(lambda: all_done(sql, 6), SETTLE, message=f"all done\n{sup.log()[-3000:]}")
    assert_each_parent_after_its_child(sql)
    for n, parent in enumerate(parents):
        assert app.result(parent)["got"] == {"doubled": 2 * n}
    # each parent ran twice: once to spawn and wait, once to finish; attempts never spent
    assert sql(
        "SELECT DISTINCT attempts FROM workerpool_jobs WHERE task = 'parent' UNION"
        " SELECT DISTINCT attempts FROM workerpool_jobs_history WHERE task = 'parent'"
    ) == [(1,)]


def test_a_child_killed_mid_run_runs_again_and_its_parent_gets_its_result(app, sql, supervise):
    parent = app.enqueue("parent", {"n": 5, "sleep": 3})
    sup = supervise()
    sup.wait_running("one")
    wait_until(lambda: noted(sql, "child_start"), SETTLE, message="the child running")
    pid = sup.child_pid("one")
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: not alive(pid), 30, message="the killed child reaped")
    wait_until(lambda: all_done(sql, 2), SETTLE, message=f"all done\n{sup.log()[-3000:]}")
    assert len(noted(sql, "child_start")) >= 2  # it did run again
    assert app.result(parent)["got"] == {"doubled": 10}
    assert_each_parent_after_its_child(sql)


def test_a_supervisor_killed_while_parents_wait_loses_nothing(app, sql, supervise):
    app.enqueue("parent", {"n": 1, "sleep": 2})
    app.enqueue("parent", {"n": 2, "sleep": 2})
    first = supervise()
    wait_until(
        lambda: sql("SELECT count(*) FROM workerpool_jobs WHERE state = 'waiting'")[0][0] >= 1,
        SETTLE,
        message=f"a parent waiting\n{first.log()[-3000:]}",
    )
    kill_group(first.proc)  # SIGKILL, the supervisor and every child
    first.proc.wait(10)
    supervise(WORKER_CLAIM_STALE_MS=STALE_MS)  # its leases: stale soon
    wait_until(lambda: all_done(sql, 4), SETTLE, message="all done")
    assert_each_parent_after_its_child(sql)


def test_a_child_that_dies_raises_job_failed_in_its_parent(app, sql, supervise):
    parent = app.enqueue("parent", {"n": 1, "fail": True})
    sup = supervise()
    wait_until(
        lambda: sql(f"SELECT state FROM {JOBS} AS j WHERE id = %s", parent) == [("done",)],
        SETTLE,
        message=f"the parent done\n{sup.log()[-3000:]}",
    )
    assert app.result(parent)["got"] == {"failed": "permanent"}
    assert sql(f"SELECT state FROM {JOBS} AS j WHERE task = 'child'") == [("dead",)]
