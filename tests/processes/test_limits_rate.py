"""rate_limit="50/s" on two replicas for five seconds: no one-second window starts more than 50."""

from __future__ import annotations

from tests.apps import limits
from tests.helpers.waiting import wait_until

RATE = 50
SECONDS = 5


def test_rate_limit_holds_across_replicas_over_five_seconds(replicas, sql):
    app = limits.build(replicas.env["WORKERPOOL_DATABASE_URL"])
    app.enqueue_many([("tick", {"n": n}) for n in range(RATE * SECONDS * 3)])
    app.dispose()
    for _ in range(2):
        replicas.start("--queue", "rated")
    wait_until(
        lambda: sql(
            "SELECT min(claimed_at) < now() - make_interval(secs => %s) FROM workerpool_jobs",
            SECONDS + 0.5,
        )[0][0],
        timeout=60,
        message=f"{SECONDS} s of claims",
    )
    replicas.stop()

    [(first,)] = sql("SELECT min(claimed_at) FROM workerpool_jobs")
    [(started,)] = sql(
        "SELECT count(*) FROM workerpool_jobs WHERE claimed_at < %s + make_interval(secs => %s)",
        first,
        SECONDS,
    )
    # every start, with the starts of the second that ends with it
    [(busiest,)] = sql(
        "SELECT max((SELECT count(*) FROM workerpool_jobs o WHERE o.claimed_at <= j.claimed_at"
        " AND o.claimed_at > j.claimed_at - interval '1 second'))"
        " FROM workerpool_jobs j WHERE j.claimed_at IS NOT NULL"
    )
    pids = sql(
        "SELECT count(DISTINCT split_part(claimed_by, ':', 2)) FROM workerpool_jobs"
        " WHERE claimed_by IS NOT NULL"
    )[0][0]
    print(
        f"{started} starts in the first {SECONDS} s, at most {busiest} in one second,"
        f" {pids} processes"
    )
    assert busiest <= RATE
    assert started <= RATE * (SECONDS + 1)  # within one window's worth of the rate
    assert started >= RATE * SECONDS // 2  # and it did run (generous: a loaded machine)
    assert pids == 2
