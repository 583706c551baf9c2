"""A child killed while it holds a slot of a global limit gives the slot back (crash release)."""

from __future__ import annotations

import os
import signal

from tests.apps import limits
from tests.helpers.replicas import start_registered
from tests.helpers.waiting import wait_until


def test_a_killed_child_frees_its_slot(replicas, sql):
    app = limits.build(replicas.env["WORKERPOOL_DATABASE_URL"])
    # three handler threads in all: the third waits on the limit
    start_registered(replicas, sql, "capped", 3)
    app.enqueue_many([("hold", {"seconds": 60, "n": n}) for n in range(3)])
    app.dispose()
    holders = wait_until(
        lambda: (
            (rows := sql("SELECT DISTINCT pid FROM limits_ledger WHERE ended_at IS NULL"))
            and len(rows) == 2
            and rows
        ),
        timeout=30,
        message="both slots held by running handlers",
    )
    [(victim_worker,)] = sql(
        "SELECT claimed_by FROM workerpool_jobs WHERE state = 'processing' AND claimed_by LIKE %s",
        f"%:{holders[0][0]}:%",
    )
    assert sql("SELECT count(*) FROM workerpool_jobs WHERE state = 'pending'") == [(1,)]

    os.kill(holders[0][0], signal.SIGKILL)

    # the dead child's row leaves `processing` and its slot is taken again, by a live process
    wait_until(
        lambda: (
            sql(
                "SELECT count(*) FROM workerpool_jobs WHERE state = 'processing'"
                " AND claimed_by <> %s",
                victim_worker,
            )
            == [(2,)]
        ),
        timeout=30,
        message="the freed slot claimed by a live process",
    )
    assert sql("SELECT count(*) FROM workerpool_jobs WHERE state = 'processing'") == [(2,)]
    assert sql(
        "SELECT count(*) FROM workerpool_jobs WHERE claimed_by = %s AND state = 'processing'",
        victim_worker,
    ) == [(0,)]
