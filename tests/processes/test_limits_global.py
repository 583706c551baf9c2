"""Three supervisors on one queue with global_concurrency=2 never run more than 2 of its jobs."""

from __future__ import annotations

from tests.apps import limits
from tests.helpers.replicas import max_overlap, processing_samples, start_registered
from tests.helpers.waiting import wait_until

JOBS = 16
SECONDS = 0.3


def test_global_concurrency_holds_across_three_replicas(replicas, sql):
    app = limits.build(replicas.env["WORKERPOOL_DATABASE_URL"])
    start_registered(replicas, sql, "capped", 3)
    app.enqueue_many([("hold", {"seconds": SECONDS, "n": n}) for n in range(JOBS)])

    with processing_samples(sql) as samples:
        wait_until(
            lambda: sql("SELECT count(*) FROM workerpool_jobs WHERE state = 'done'")[0][0] == JOBS,
            timeout=60,
            message="every job done",
        )
    app.dispose()

    runs = sql("SELECT started_at, ended_at, pid FROM limits_ledger")
    pids = sorted({pid for _, _, pid in runs})
    print(f"{len(samples)} samples, max {max(samples)}; runs on pids {pids}")
    assert len(samples) > 100  # sampled at high frequency throughout
    assert max(samples) <= 2
    assert max_overlap([(start, end) for start, end, _ in runs]) == 2  # the limit, and used
    assert len(runs) == JOBS
    assert len({pid for _, _, pid in runs}) >= 2  # several replicas took part
    # what the workers enforce is published for `workerpool status`
    assert sql(
        "SELECT limits->'global_concurrency' FROM workerpool_queues WHERE queue = 'capped'"
    ) == [(2,)]
