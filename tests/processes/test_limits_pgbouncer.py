"""A global limit holds behind PgBouncer in transaction pooling mode (no advisory lock, no
session state: the claim's row lock lives and dies with its transaction)."""

from __future__ import annotations

import threading

import pytest

from tests.apps import limits
from tests.helpers.replicas import Replicas
from tests.helpers.waiting import wait_until
from tests.processes.test_limits_global import max_overlap
from tests.processes.test_pgbouncer import bouncer  # noqa: F401 - the fixture
from workerpool import db

JOBS = 8


@pytest.fixture
def replicas(db_url, tmp_path, sql, bouncer):  # noqa: F811 - the fixture imported above
    sql(limits.LEDGER)
    group = Replicas("tests.apps.limits:pool", bouncer.url(db_url), tmp_path,
                     extra_env={db.PGBOUNCER_ENV: "1"})
    yield group
    group.stop()


def test_global_concurrency_holds_through_pgbouncer(replicas, sql):
    app = limits.build(replicas.env["WORKERPOOL_DATABASE_URL"])
    for _ in range(3):
        replicas.start("--queue", "capped")
    wait_until(lambda: sql("SELECT count(*) FROM workerpool_workers WHERE queue = 'capped'")
               [0][0] == 3, timeout=30, message="three capped workers registered")
    app.enqueue_many([("hold", {"seconds": 0.3, "n": n}) for n in range(JOBS)])
    app.dispose()
    samples: list[int] = []
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            samples.append(sql("SELECT count(*) FROM workerpool_jobs"
                               " WHERE state = 'processing'")[0][0])

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        wait_until(lambda: sql("SELECT count(*) FROM workerpool_jobs WHERE state = 'done'")
                   [0][0] == JOBS, timeout=60, message="every job done through the bouncer")
    finally:
        done.set()
        sampler.join()
    runs = sql("SELECT started_at, ended_at FROM limits_ledger")
    assert max(samples) <= 2
    assert max_overlap(runs) == 2 and len(runs) == JOBS
