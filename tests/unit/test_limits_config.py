"""Limit settings refused by name when the application is declared."""

from __future__ import annotations

import pytest

from workerpool import ConfigError, WorkerPool
from workerpool.model.limits import Rate, claim_limits, parse_rate


@pytest.mark.parametrize(
    ("text", "rate"),
    [
        ("100/s", Rate(100, 1.0)),
        ("20/m", Rate(20, 60.0)),
        ("500/hour", Rate(500, 3600.0)),
        (" 7 / minute ", Rate(7, 60.0)),
    ],
)
def test_rate_strings(text, rate):
    assert parse_rate("rate_limit", text) == rate


@pytest.mark.parametrize(
    "bad", ["100", "100/d", "0/s", "-1/s", "1.5/s", "s/100", "", 100, "100/s/s", "99999999/s"]
)
def test_bad_rate_strings_are_refused_by_name(bad):
    pool = WorkerPool("postgresql://nowhere/db")
    with pytest.raises(ConfigError, match="queue q: rate_limit must look like"):
        pool.queue("q", rate_limit=bad)
    with pytest.raises(ConfigError, match="task t: key_rate_limit must look like"):
        pool.task(lambda job: None, queue="q", name="t", key_rate_limit=bad)


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2", 10**9])
def test_bad_concurrency_limits_are_refused_by_name(bad):
    pool = WorkerPool("postgresql://nowhere/db")
    with pytest.raises(ConfigError, match="queue q: global_concurrency must be an int"):
        pool.queue("q", global_concurrency=bad)
    with pytest.raises(ConfigError, match="task t: concurrency_limit must be an int"):
        pool.task(lambda job: None, queue="q", name="t", concurrency_limit=bad)


def test_a_key_function_without_a_per_key_limit_is_refused():
    pool = WorkerPool("postgresql://nowhere/db")
    with pytest.raises(ConfigError, match="task t: concurrency_key limits nothing"):
        pool.task(lambda job: None, queue="q", name="t", concurrency_key=lambda p: "x")
    with pytest.raises(ConfigError, match="task t: concurrency_key must be a function"):
        pool.task(
            lambda job: None, queue="q", name="t", concurrency_limit=1, concurrency_key="account"
        )
    assert "t" not in pool.tasks


def test_claim_limits_collects_the_queue_and_its_tasks():
    pool = WorkerPool("postgresql://nowhere/db")
    spec = pool.queue("q", global_concurrency=2, rate_limit="10/s")
    pool.task(lambda job: None, queue="q", name="a", concurrency_limit=1)
    pool.task(lambda job: None, queue="q", name="b")
    pool.task(lambda job: None, queue="other", name="c", key_rate_limit="1/s")
    limits = claim_limits(spec, pool.tasks)
    assert limits.as_json() == {
        "global_concurrency": 2,
        "rate_limit": "10/s",
        "tasks": {"a": {"concurrency_limit": 1, "key_rate_limit": None}},
    }
    assert not claim_limits(pool.registry.queue_spec("other").__class__(name="plain"), {})
