"""The lane: the thread a worker's pass transaction runs on (workerpool/runtime/worker/lane.py)."""

from __future__ import annotations

import threading

import pytest

from workerpool.runtime.worker.lane import Lane


@pytest.fixture
def lane():
    wake = threading.Event()
    lane = Lane("test-lane", wake)
    lane.start()
    yield lane, wake
    lane.stop()


def test_a_call_lands_with_its_value_and_wakes_the_main_loop(lane):
    lane, wake = lane
    go = threading.Event()
    lane.submit(lambda: go.wait(5) and 42)
    assert lane.busy and not lane.landed and not wake.is_set()  # still on the wire
    go.set()
    assert lane.take(5) == 42
    assert wake.is_set() and not lane.busy and not lane.landed


def test_what_the_call_raised_is_raised_where_it_is_taken(lane):
    lane, _ = lane

    def fails():
        raise OSError("connection lost")

    lane.submit(fails)
    with pytest.raises(OSError, match="connection lost"):
        lane.take(5)
    assert not lane.busy
    lane.submit(lambda: "next")  # the thread goes on
    assert lane.take(5) == "next"


def test_one_call_at_a_time(lane):
    lane, _ = lane
    go = threading.Event()
    lane.submit(lambda: go.wait(5))
    with pytest.raises(AssertionError):
        lane.submit(lambda: None)
    go.set()
    assert lane.take(5) is True


def test_a_call_that_does_not_land_in_time_stays_taken_later(lane):
    lane, _ = lane
    go = threading.Event()
    lane.submit(lambda: go.wait(5) and "late")
    with pytest.raises(TimeoutError):
        lane.take(0.01)
    assert lane.busy
    go.set()
    assert lane.take(5) == "late"
