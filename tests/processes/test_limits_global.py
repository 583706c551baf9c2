"""Three supervisors on one queue with global_concurrency=2 never run more than 2 of its jobs."""

from __future__ import annotations

import threading

import pytest

from tests.apps import limits
from tests.helpers.replicas import Replicas
from tests.helpers.waiting import wait_until

JOBS = 16
SECONDS = 0.3


@pytest.fixture
def replicas(db_url, tmp_path, sql):
    sql(limits.LEDGER)
    group = Replicas("tests.apps.limits:pool", db_url, tmp_path)
    yield group
    group.stop()


def max_overlap(intervals: list[tuple]) -> int:
    """The most intervals open at one instant (an end at t closes before a start at t)."""
    edges = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals],
                   key=lambda edge: (edge[0], edge[1]))
    most = open_now = 0
    for _, step in edges:
        open_now += step
        most = max(most, open_now)
    return most


def test_global_concurrency_holds_across_three_replicas(replicas, sql):
    app = limits.build(replicas.env["WORKERPOOL_DATABASE_URL"])
    for _ in range(3):
        replicas.start("--queue", "capped")
    wait_until(lambda: sql("SELECT count(*) FROM workerpool_workers WHERE queue = 'capped'")
               [0][0] == 3, timeout=30, message="three capped workers registered")
    app.enqueue_many([("hold", {"seconds": SECONDS, "n": n}) for n in range(JOBS)])

    samples: list[int] = []
    done = threading.Event()

    def sample() -> None:  # as fast as one connection can ask
        while not done.is_set():
            samples.append(sql("SELECT count(*) FROM workerpool_jobs"
                               " WHERE state = 'processing'")[0][0])

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        wait_until(lambda: sql("SELECT count(*) FROM workerpool_jobs WHERE state = 'done'")
                   [0][0] == JOBS, timeout=60, message="every job done")
    finally:
        done.set()
        sampler.join()
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
    assert sql("SELECT limits->'global_concurrency' FROM workerpool_queues"
               " WHERE queue = 'capped'") == [(2,)]
