"""A claimed job's state machine (no database): every path the worker takes, and the refusals."""

from __future__ import annotations

import pytest

from workerpool import sql as queries
from workerpool.model.specs import TaskSpec
from workerpool.runtime.worker.inflight import (
    Flights,
    FlightState,
    IllegalTransition,
    InFlight,
    Step,
)

S = FlightState


def flight(state: FlightState = S.BUFFERED) -> InFlight:
    spec = TaskSpec(name="t", queue="q", fn=lambda job: None)
    return InFlight(queries.Lease(1, 1, "w"), spec, 0.0, None, state)


def walk(*steps: Step) -> InFlight:
    job = flight()
    for step in steps:
        job.transition(step)
    return job


@pytest.mark.parametrize(
    ("steps", "end"),
    [
        ((Step.BEGIN, Step.RETURN, Step.RECORD), S.RETIRED),  # ran, outcome written
        ((Step.WITHDRAW, Step.RECORD), S.RETIRED),  # drained unstarted
        ((Step.LOSE,), S.RETIRED),  # lost in the buffer: dropped, nothing to write
        ((Step.BEGIN, Step.TIME_OUT, Step.RECORD, Step.RETURN), S.RETIRED),  # ignored its timeout
        ((Step.BEGIN, Step.TIME_OUT, Step.RETURN, Step.RECORD), S.RETIRED),
        ((Step.BEGIN, Step.LOSE, Step.RETURN, Step.RECORD), S.RETIRED),  # fenced out
        ((Step.BEGIN, Step.RECORD, Step.RETURN), S.RETIRED),  # released at the drain deadline
        ((Step.WITHDRAW, Step.LOSE, Step.RECORD), S.RETIRED),
    ],
)
def test_every_path_the_worker_takes_ends_retired(steps, end):
    assert walk(*steps).state is end


def test_the_flags_the_main_loop_reads_follow_the_state():
    running = walk(Step.BEGIN)
    assert (running.holds_lease, running.running, running.returned) == (True, True, False)
    lost = walk(Step.BEGIN, Step.LOSE)
    assert (lost.holds_lease, lost.running) == (False, True)  # a drain still waits for it
    timed = walk(Step.BEGIN, Step.TIME_OUT)
    assert (timed.holds_lease, timed.running, timed.overdue) == (False, False, True)
    finished = walk(Step.BEGIN, Step.RETURN)
    assert (finished.holds_lease, finished.returned) == (True, True)


@pytest.mark.parametrize(
    ("state", "step"),
    [
        (S.RUNNING, Step.WITHDRAW),  # the handler thread began it first
        (S.WITHDRAWN, Step.BEGIN),  # the drain took it back first
        (S.RETIRED, Step.BEGIN),  # lost in the buffer before a thread took it
        (S.FINISHED, Step.TIME_OUT),  # the handler returned just before its deadline
    ],
)
def test_a_step_that_lost_a_race_changes_nothing(state, step):
    job = flight(state)
    assert job.transition(step) is state and job.state is state


@pytest.mark.parametrize(
    ("state", "step"),
    [
        (S.BUFFERED, Step.RETURN),
        (S.BUFFERED, Step.RECORD),
        (S.RETIRED, Step.RECORD),
        (S.RUNNING, Step.BEGIN),
        (S.TIMED_OUT, Step.LOSE),
        (S.ABANDONED, Step.TIME_OUT),
    ],
)
def test_an_illegal_step_raises(state, step):
    job = flight(state)
    with pytest.raises(IllegalTransition, match=f"cannot {step.value} when {state.value}"):
        job.transition(step)
    assert job.state is state


def test_a_timed_out_async_handler_is_cancelled_by_whoever_comes_second():
    job = walk(Step.BEGIN, Step.TIME_OUT)
    assert job.hold_future(object()) is True  # the timeout came first: the handler cancels
    assert walk(Step.BEGIN).hold_future(object()) is False


def test_flights_forget_a_job_only_once_it_is_retired():
    flights, job = Flights(), walk(Step.BEGIN, Step.TIME_OUT, Step.RECORD)
    flights.add(job)
    flights.retire(job)
    assert len(flights) == 1  # its handler still runs
    job.transition(Step.RETURN)
    flights.retire(job)
    assert len(flights) == 0
