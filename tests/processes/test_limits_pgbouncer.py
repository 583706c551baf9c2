"""A global limit holds behind PgBouncer in transaction pooling mode (no advisory lock, no
session state: the claim's row lock lives and dies with its transaction)."""

from __future__ import annotations

import pytest

from tests.apps import limits
from tests.helpers.replicas import (
    LIMITS_APP,
    Replicas,
    max_overlap,
    processing_samples,
    start_registered,
)
from tests.helpers.waiting import wait_until
from workerpool.process import settings

JOBS = 8


@pytest.fixture
def replicas(db_url, tmp_path, sql, bouncer):
    sql(limits.LEDGER)
    group = Replicas(
        LIMITS_APP, bouncer.url(db_url), tmp_path, extra_env={settings.PGBOUNCER_ENV: "1"}
    )
    yield group
    group.stop()


def test_global_concurrency_holds_through_pgbouncer(replicas, sql):
    app = limits.build(replicas.env["WORKERPOOL_DATABASE_URL"])
    start_registered(replicas, sql, "capped", 3)
    app.enqueue_many([("hold", {"seconds": 0.3, "n": n}) for n in range(JOBS)])
    app.dispose()
    with processing_samples(sql) as samples:
        wait_until(
            lambda: sql("SELECT count(*) FROM workerpool_jobs WHERE state = 'done'")[0][0] == JOBS,
            timeout=60,
            message="every job done through the bouncer",
        )
    runs = sql("SELECT started_at, ended_at FROM limits_ledger")
    assert max(samples) <= 2
    assert max_overlap(runs) == 2 and len(runs) == JOBS
