"""The metrics recorder without processes: batched observations scrape exactly like observe()."""

from __future__ import annotations

import datetime
from types import SimpleNamespace

import pytest

from tests.helpers.metrics import scraped
from workerpool.model import metrics
from workerpool.model.attempt import Outcome
from workerpool.model.states import JobState, OutcomeKind
from workerpool.runtime.worker.outcomes import _outcome_label


def test_flushed_observations_equal_one_observe_each(metrics_recorder):
    rec, directory = metrics_recorder
    durations = [0.0005, 0.001, 0.003, 0.5, 0.5, 7.0, 9999.0]
    for seconds in durations:
        rec.finished("q", "batched", "done", seconds)
        rec.handler_seconds.labels("q", "direct").observe(seconds)
        rec.jobs_finished.labels("q", "direct", "done").inc()
    rec.flush()
    found = scraped(directory)
    batched = {
        (n, tuple((k, v if v != "batched" else "direct") for k, v in labels)): value
        for (n, labels), value in found.items()
        if ("task", "batched") in labels
    }
    direct = {key: value for key, value in found.items() if ("task", "direct") in key[1]}
    assert batched == direct
    assert found[
        (
            "workerpool_jobs_finished_total",
            (("outcome", "done"), ("queue", "q"), ("task", "batched")),
        )
    ] == len(durations)


def test_nothing_reaches_the_files_before_a_flush_and_nothing_twice_after(metrics_recorder):
    rec, directory = metrics_recorder
    now = datetime.datetime.now(datetime.UTC)
    rows = [SimpleNamespace(claimed_at=now, run_at=now - datetime.timedelta(seconds=2))] * 3
    rec.claimed("q", rows)
    assert ("workerpool_claims_total", (("queue", "q"),)) not in scraped(directory)
    rec.flush()
    rec.flush()
    found = scraped(directory)
    assert found[("workerpool_claims_total", (("queue", "q"),))] == 1
    assert found[("workerpool_pickup_delay_seconds_count", (("queue", "q"),))] == 3
    assert found[("workerpool_pickup_delay_seconds_sum", (("queue", "q"),))] == 6.0
    assert found[("workerpool_claim_batch_size_sum", (("queue", "q"),))] == 3


def test_the_null_recorder_takes_every_hook():
    null = metrics.Null()
    assert not null.enabled
    null.finished("q", "t", "done", 0.1)
    null.claimed("q", [])
    null.flush()
    null.in_flight("q", 1)
    null.woke("q", "poll")
    null.restarted("q", "signal")
    null.depth({})


def test_restart_causes_are_a_bounded_set():
    from workerpool.process.settings import WorkerKind, WorkerType
    from workerpool.process.slots import Slot, restart_cause

    slot = Slot(WorkerType("fast", WorkerKind.QUEUE, 1.0, 5.0))
    killed, exited_75, exited_1 = 9, 75 << 8, 1 << 8  # waitpid statuses
    assert restart_cause(slot, exited_1) == "boot_failure"  # never ticked
    slot.ticked = True
    assert restart_cause(slot, killed) == "signal"
    assert restart_cause(slot, exited_75) == "recycle"
    assert restart_cause(slot, exited_1) == "exit"
    slot.killed, slot.kill_at = True, 1.0
    assert restart_cause(slot, killed) == "hang"
    assert set(metrics.CAUSES) == {"hang", "recycle", "boot_failure", "signal", "exit"}


@pytest.mark.parametrize(
    ("kind", "state", "label"),
    [
        (OutcomeKind.DONE, JobState.DONE, "done"),
        (OutcomeKind.FAIL, JobState.FAILED, "retried"),  # raised, a retry is scheduled
        (OutcomeKind.FAIL, JobState.DEAD, "dead"),
        (OutcomeKind.PERMANENT, JobState.DEAD, "dead"),
        (OutcomeKind.FAIL, JobState.CANCELLED, "cancelled"),
        (OutcomeKind.SNOOZE, JobState.PENDING, "snoozed"),
        (OutcomeKind.SNOOZE, JobState.CANCELLED, "cancelled"),
        (OutcomeKind.INTERRUPTED, JobState.PENDING, "released"),
        (OutcomeKind.WAIT, JobState.WAITING, "waiting"),  # job.wait_for: waits for its signal
        (OutcomeKind.WAIT, JobState.PENDING, "waiting"),  # the signal came while it was written
        (OutcomeKind.DONE, None, "lost"),
    ],
)
def test_each_written_outcome_has_one_label_of_the_bounded_set(kind, state, label):
    assert _outcome_label(Outcome(kind), state) == label
    assert label in metrics.OUTCOMES
