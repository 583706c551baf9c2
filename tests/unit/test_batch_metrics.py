"""The batch metrics: finished batches by outcome and by who finished them, the open gauge."""

from __future__ import annotations

from tests.helpers.metrics import scraped
from workerpool.model import metrics
from workerpool.sql.batches import Fired


def test_finished_batches_are_counted_by_outcome_and_finisher_at_the_flush(metrics_recorder):
    rec, directory = metrics_recorder
    rec.batches_finished([Fired(1, "success", [10]), Fired(2, "failure", [11, 12])], "outcome")
    rec.batches_finished([Fired(3, "success", [13])], "sweep")
    assert (
        "workerpool_batches_finished_total",
        (("fired_by", "outcome"), ("outcome", "success")),
    ) not in scraped(directory)
    rec.flush()
    rec.batches_open(4)
    rec.batches_opened(3)
    rec.batches_opened(0)
    rec.batches_opened(2)
    found = scraped(directory)
    assert (
        found[
            ("workerpool_batches_finished_total", (("fired_by", "outcome"), ("outcome", "success")))
        ]
        == 1
    )
    assert (
        found[
            ("workerpool_batches_finished_total", (("fired_by", "outcome"), ("outcome", "failure")))
        ]
        == 1
    )
    assert (
        found[
            ("workerpool_batches_finished_total", (("fired_by", "sweep"), ("outcome", "success")))
        ]
        == 1
    )
    assert found[("workerpool_batches_open", ())] == 4
    assert found[("workerpool_batches_opened_total", ())] == 5


def test_the_null_recorder_takes_the_batch_hooks():
    null = metrics.Null()
    null.batches_finished([Fired(1, "success", [])], "outcome")
    null.batches_open(0)
    null.batches_opened(1)
