"""The prefetch buffer's size from run times and claim round trips (workerpool/worker/buffer.py)."""

from __future__ import annotations

import pytest

from workerpool.runtime.worker.buffer import MOST_PER_SLOT, Buffer


def sized(concurrency: int, run: float, trip: float, **kwargs) -> Buffer:
    buffer = Buffer(concurrency, kwargs.pop("prefetch", None), limited=kwargs.pop("limited", False))
    for _ in range(30):
        buffer.ran(run)
        buffer.claimed(trip)
    return buffer


def test_unknown_until_a_run_time_and_a_round_trip_are_known():
    buffer = Buffer(10, None, limited=False)
    assert buffer.size == 0
    buffer.claimed(0.001)
    assert buffer.size == 0  # no run time yet
    buffer.ran(0.0)
    buffer.claimed(0.001)
    assert buffer.size == buffer.most == MOST_PER_SLOT * 10


@pytest.mark.parametrize(
    ("run", "trip", "size"),
    [
        (0.00002, 0.001, 10 * MOST_PER_SLOT),  # no-op handlers: the bound
        (0.004, 0.002, min(5, 10 * MOST_PER_SLOT)),  # 10 slots free 5 times per round trip
        (0.02, 0.002, 1),  # one slot frees during a round trip
        (0.05, 0.002, 0),  # slow handlers: none
    ],
)
def test_what_the_handlers_finish_during_one_round_trip(run, trip, size):
    assert sized(10, run, trip).size == size


def test_it_follows_the_handlers_when_they_slow_down():
    buffer = sized(10, 0.0001, 0.002)
    assert buffer.size == buffer.most
    for _ in range(100):
        buffer.ran(1.0)
    buffer.claimed(0.002)
    assert buffer.size == 0


@pytest.mark.parametrize("prefetch", [0, 7])
def test_an_explicit_prefetch_never_moves(prefetch):
    assert sized(10, 0.0, 0.002, prefetch=prefetch).size == prefetch
    assert sized(10, 1.0, 0.002, prefetch=prefetch).size == prefetch


def test_a_queue_with_limits_gets_none_unless_asked():
    assert sized(10, 0.0, 0.002, limited=True).most == 0
    assert sized(10, 0.0, 0.002, limited=True, prefetch=4).size == 4
