"""Which steps a rerun keeps: the ones the handler ran before the named step, in the order of
their starts as instants (a JSON object keeps no order, and a timestamp's text may carry any
UTC offset), never the named one or a later one."""

from __future__ import annotations

import pytest

from workerpool.model.errors import UnknownStep
from workerpool.model.reruns import in_run_order, kept_steps


def entry(started: str) -> dict:
    return {"kind": "step", "value": 1, "started_at": started, "finished_at": started}


STEPS = {
    # stored out of order, "b" written by a session at +02:00: it started first
    "a": entry("2026-01-01T10:00:01+00:00"),
    "c": entry("2026-01-01T10:00:03.5+00:00"),
    "b": entry("2026-01-01T12:00:00.5+02:00"),
}


def test_steps_are_in_the_order_they_started_as_instants():
    assert in_run_order(STEPS) == ["b", "a", "c"]


def test_a_rerun_keeps_the_steps_before_the_named_one():
    kept = kept_steps(1, STEPS, "a")
    assert list(kept.steps or {}) == ["b"] and kept.dropped == ["a", "c"]
    assert kept_steps(1, STEPS, "b") == (None, ["b", "a", "c"])
    assert kept_steps(1, STEPS, None) == (None, ["b", "a", "c"])


def test_a_step_never_recorded_names_the_recorded_ones():
    with pytest.raises(UnknownStep, match=r"\(its steps: 'b', 'a', 'c'\)"):
        kept_steps(1, STEPS, "z")
    with pytest.raises(UnknownStep, match=r"\(its steps: none\)"):
        kept_steps(1, None, "z")
