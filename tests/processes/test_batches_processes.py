"""Batches under a real `workerpool run`: a 10,000-member batch whose queue child is SIGKILLed
again and again fires its callback exactly once, after its last member, from that member's
outcome (never from the maintenance sweep, the safety net).

The app is ``tests/apps/batches.py``: its callback writes what it sees into a ledger table.
"""

from __future__ import annotations

import os
import signal

import pytest

from tests.apps import batches as app_module
from tests.helpers.processes import alive
from tests.helpers.waiting import wait_until

APP = app_module  # the app the shared app and supervise fixtures build (conftest)

MEMBERS = 10_000
KILLS = 6
SETTLE = 300.0  # a liveness bound for a loaded machine, not a timing claim


def done_members(sql, batch_id: int) -> int:
    return sql(
        "SELECT count(*) FROM workerpool_jobs WHERE batch_id = %s AND queue = 'members'"
        " AND state IN ('done', 'dead', 'cancelled')",
        batch_id,
    )[0][0]


@pytest.mark.timeout(600)
def test_a_10000_member_batch_with_its_workers_killed_fires_on_complete_once_after_the_last(
    app, sql, supervise
):
    sql(app_module.LEDGER)
    with app.batch(on_complete="report", payload={"run": "kill"}) as batch:
        batch.enqueue_many([("member", {"n": n}) for n in range(MEMBERS)])
    sup = supervise()
    sup.wait_running("members", "reports")
    kills, last = 0, 0
    while kills < KILLS:
        # kill the queue child each time it has made progress, while members are still live
        progress = wait_until(
            lambda: (n := done_members(sql, batch.id)) > last + 300 and n,
            SETTLE,
            message="members progress",
        )
        if progress >= MEMBERS - 300:
            break
        pid = sup.child_pid("members")
        os.kill(pid, signal.SIGKILL)
        wait_until(lambda p=pid: not alive(p), 30, message="the killed child reaped")
        wait_until(lambda p=pid: sup.child_pid("members") != p, 60, message="a new child")
        kills, last = kills + 1, progress
    assert kills >= 3, f"only {kills} kills landed before the batch ended: not a test"
    wait_until(
        lambda: sql("SELECT count(*) FROM batch_ledger") == [(1,)],
        SETTLE,
        message=f"the callback ran\n{sup.log()[-3000:]}",
    )
    status = app.batch_status(batch.id)
    assert status.finished and status.fired_by == "outcome", status
    assert status.total == MEMBERS and status.live == 0
    assert status.done + status.dead == MEMBERS
    # it ran once, after the last member: nothing was live when it looked
    assert sql("SELECT batch_id, task, live, total FROM batch_ledger") == [
        (batch.id, "report", 0, MEMBERS)
    ]
    assert sql("SELECT count(*) FROM workerpool_jobs WHERE queue = 'reports'") == [(1,)]
    finished_after = sql(
        "SELECT b.finished_at >= max(j.finished_at) FROM workerpool_batches b JOIN"
        " workerpool_jobs j ON j.batch_id = b.id AND j.queue = 'members' WHERE b.id = %s"
        " GROUP BY b.finished_at",
        batch.id,
    )
    assert finished_after == [(True,)]
    assert app.result(status.callback_ids[0], timeout=30) == {"total": MEMBERS, "done": status.done}
    assert "batch_swept" not in sup.log()
