"""Backoff: bounds and jitter as properties, for any attempt number."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from workerpool import Backoff, ConfigError

policies = st.builds(
    Backoff,
    base=st.floats(min_value=0.001, max_value=1e4),
    factor=st.floats(min_value=1, max_value=100),
    cap=st.floats(min_value=1e4, max_value=1e7),
    jitter=st.floats(min_value=0, max_value=1),
)


@given(policy=policies, attempt=st.integers(min_value=-5, max_value=10**12), seed=st.integers())
def test_delay_is_finite_and_within_the_jittered_window(policy, attempt, seed):
    window = policy.window(attempt)
    delay = policy.delay(attempt, random.Random(seed))
    assert math.isfinite(delay)
    assert policy.base <= window <= policy.cap
    assert window * (1 - policy.jitter) - 1e-9 <= delay <= window + 1e-9


@given(attempt=st.integers(min_value=1, max_value=10**6))
def test_windows_never_shrink(attempt):
    policy = Backoff()
    assert policy.window(attempt + 1) >= policy.window(attempt)


def test_default_schedule_is_30s_times_4_capped_at_an_hour():
    policy = Backoff()
    assert [policy.window(n) for n in range(1, 7)] == [30, 120, 480, 1920, 3600, 3600]


def test_jitter_spreads_failures_that_happened_together():
    policy = Backoff()
    rng = random.Random(1)
    delays = [policy.delay(3, rng) for _ in range(2000)]
    assert 240 <= min(delays) and max(delays) <= 480
    buckets = {int(d) for d in delays}
    assert len(buckets) > 200  # not all in one second


@pytest.mark.parametrize(
    "kwargs",
    [
        {"base": -1},
        {"factor": 0.5},
        {"cap": 1, "base": 10},
        {"jitter": 2},
        {"base": math.nan},
        {"cap": math.inf},
        {"base": "30"},
        {"cap": 1e18},
    ],
)
def test_bad_policies_are_refused(kwargs):
    with pytest.raises(ConfigError):
        Backoff(**kwargs)
