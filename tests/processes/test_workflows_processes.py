"""Dependencies under a real `workerpool run`: the child running a parent is SIGKILLed at the
moment its handler returns, again and again; every dependent still runs exactly once its
parent is done (never before), and the maintenance sweep never has to release anything.

The app is ``tests/apps/workflows.py``: each run writes a ledger row before it returns.
"""

from __future__ import annotations

import itertools
import os
import signal

import pytest

from tests.apps import workflows as app_module
from tests.helpers.processes import alive
from tests.helpers.waiting import wait_until

APP = app_module  # the app the shared app and supervise fixtures build (conftest)

LENGTH = 8
SETTLE = 120.0  # a liveness bound for a loaded machine, not a timing claim


def ran(sql, job_id: int) -> bool:
    return sql("SELECT count(*) FROM flow_ledger WHERE job_id = %s", job_id)[0][0] > 0


@pytest.mark.timeout(600)
def test_a_chain_whose_child_is_killed_as_each_parent_completes_runs_each_after_its_parent(
    app, sql, supervise
):
    sql(app_module.LEDGER)
    ids = app.chain([("step", {"n": n}) for n in range(LENGTH)])
    sup = supervise()
    sup.wait_running("flow")
    for job_id in ids[:-1]:
        # the handler has written its ledger row and is returning: kill its child now (sampled
        # every 0.02 s: later, the child has run the next jobs too and is killed at a start)
        wait_until(
            lambda j=job_id: ran(sql, j),
            SETTLE,
            interval=0.02,
            message=f"job {job_id} ran\n{sup.log()[-3000:]}",
        )
        # the pid the supervisor shows may be of a child already gone (its restart not yet
        # shown): the one killed must be running
        wait_until(lambda: alive(sup.child_pid("flow")), 30, message="a running child")
        pid = sup.child_pid("flow")
        os.kill(pid, signal.SIGKILL)
        wait_until(lambda p=pid: not alive(p), 30, message="the killed child reaped")
    wait_until(
        lambda: sql("SELECT count(*) FROM workerpool_jobs WHERE state = 'done'")[0][0] == LENGTH,
        SETTLE,
        message=f"the chain done\n{sup.log()[-3000:]}",
    )
    rows = sql("SELECT id, finished_at FROM workerpool_jobs ORDER BY id")
    finished = dict(rows)
    for parent, child in itertools.pairwise(ids):
        first_start = sql("SELECT min(started) FROM flow_ledger WHERE job_id = %s", child)[0][0]
        assert first_start > finished[parent], (parent, child)  # never before its parent
        seen = sql("SELECT DISTINCT parents FROM flow_ledger WHERE job_id = %s", child)
        assert seen == [({str(parent): {"n": ids.index(parent)}},)]
    reruns = sql("SELECT count(*) FROM flow_ledger")[0][0] - LENGTH
    assert not sup.events("dependents_swept", logger="maintenance"), sup.log()[-3000:]
    print(f"{LENGTH} jobs, {LENGTH - 1} kills, {reruns} handler runs repeated")
