"""The soak's backlog spike: its schedule, its option's refusals, and its verdict."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from bench.__main__ import UsageError, spike_option
from bench.soak import Sample, SoakPlan, spike_verdict, verdict


def sample(t: float, backlog: int, p50: float) -> Sample:
    return Sample(
        t=t,
        enqueued=0,
        done=0,
        done_per_s=0.0,
        backlog=backlog,
        claim_p50_ms=p50,
        claim_p99_ms=p50,
        pickup_p99_ms=None,
        child_rss_mb=None,
        table_mb=0.0,
        index_mb=0.0,
        dead=0,
        horizon_age_s=None,
        checkpoints=0,
        autovacuums=0,
    )


def test_the_spike_rate_is_offered_only_inside_its_window():
    plan = SoakPlan(
        minutes=10, rate=100, out=Path("."), spike_at=2, spike_minutes=1, spike_rate=900
    )
    assert [plan.rate_at(s) for s in (0, 119.9, 120, 179.9, 180)] == [100, 100, 900, 900, 100]


@pytest.mark.parametrize("value", ["1:2", "a:1:2", "5:6:100", "1:0:100", "1:1:-5"])
def test_a_bad_spike_is_refused_by_name(value):
    with pytest.raises(UsageError, match="--spike"):
        spike_option(value, minutes=10)


def test_the_verdict_finds_the_drain_and_the_recovery():
    plan = SoakPlan(
        minutes=20, rate=100, out=Path("."), spike_at=2, spike_minutes=1, spike_rate=900
    )
    samples = [
        sample(60, 10, 1.0),
        sample(120, 5, 1.0),
        sample(180, 40000, 9.0),
        sample(240, 5, 3.0),
        sample(300, 0, 1.1),
        sample(900, 0, 1.1),
    ]
    lines = spike_verdict(plan, samples)
    assert "drained at t=240 s" in lines[0]
    assert "1.0 min after the drain: met" in lines[1], lines
    assert lines[2].endswith("(target <= 1.2x pre-spike)") and ": met" in lines[2]
    slow = [*samples[:4], sample(300, 0, 2.0), sample(900, 0, 2.0)]
    assert "never back" in spike_verdict(plan, slow)[1]


def test_the_table_size_verdict_leaves_the_spike_backlog_aside():
    plan = SoakPlan(
        minutes=20,
        rate=100,
        out=Path("."),
        retention=10,
        spike_at=5,
        spike_minutes=1,
        spike_rate=900,
    )
    sizes = [
        (60, 0, 30.0),
        (240, 0, 35.0),
        (330, 40000, 190.0),
        (400, 5000, 120.0),
        (460, 0, 36.0),
        (900, 0, 31.0),
    ]
    samples = [replace(sample(t, backlog, 1.0), table_mb=mb) for t, backlog, mb in sizes]
    line = next(line for line in verdict(plan, samples) if line.startswith("table size"))
    assert "30.0...36.0 MiB: met" in line, line
    without = replace(plan, spike_at=None)  # no spike: every sample counts
    line = next(line for line in verdict(without, samples) if line.startswith("table size"))
    assert "30.0...190.0 MiB: MISSED" in line, line
