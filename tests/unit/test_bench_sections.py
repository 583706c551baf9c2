"""Which sections ``python -m bench`` runs for ``--only`` and ``--scale`` (no database)."""

from __future__ import annotations

import pytest

from bench.__main__ import FULL, QUICK, UsageError, build_parser, make_plan
from bench.run import DEFAULT_SECTIONS, SECTIONS


def plan(*argv: str):
    return make_plan(build_parser().parse_args(["--quick", *argv]))


def test_scale_alone_runs_the_supervisor_counts_only():
    chosen = plan("--scale")
    assert chosen.sections == ("fleet",)
    assert chosen.fleet_counts == (1, 2, 4, 8)
    assert plan("--scale", "1,3").fleet_counts == (1, 3)


def test_scale_with_only_adds_the_counts_to_the_sections():
    assert plan("--only", "drain", "--scale", "2").sections == ("drain", "fleet")


def test_the_old_scale_section_name_still_selects_the_claim_against_the_table_size():
    assert plan("--only", "scale").sections == ("growth",)


def test_a_run_without_only_leaves_out_the_long_comparisons():
    assert plan().sections == DEFAULT_SECTIONS
    assert "growth" in DEFAULT_SECTIONS
    assert "fleet" not in DEFAULT_SECTIONS and "limits" not in DEFAULT_SECTIONS
    assert "burst" not in DEFAULT_SECTIONS  # kills processes, and its windows take time
    assert "steps" not in DEFAULT_SECTIONS  # three supervisors per repeat
    assert set(SECTIONS) - set(DEFAULT_SECTIONS) == {
        "fleet",
        "limits",
        "burst",
        "steps",
        "once",
        "workflows",
        "processes",
        "logs",
        "history",
        "typed",
        "capacity",  # reads the server's processes in /proc: a server on this machine only
    }
    assert "doors" in DEFAULT_SECTIONS  # as quick as the single enqueue beside it


def test_only_burst_runs_the_kill_9_burst_with_small_quick_sizes():
    chosen = plan("--only", "burst")
    assert chosen.sections == ("burst",)
    assert (chosen.kills, chosen.burst_window_s, chosen.burst_concurrency) == (
        QUICK["kills"],
        QUICK["burst_window_s"],
        QUICK["burst_concurrency"],
    )
    assert QUICK["kills"] < FULL["kills"] and QUICK["burst_window_s"] < FULL["burst_window_s"]
    assert plan("--only", "burst", "--kills", "5").kills == 5
    with pytest.raises(UsageError, match="--kills must be >= 1"):
        plan("--only", "burst", "--kills", "0")


def test_pgbouncer_goes_with_the_supervisor_counts():
    assert plan("--scale", "--pgbouncer").fleet_bouncer
    with pytest.raises(UsageError, match="--pgbouncer goes with --scale"):
        plan("--only", "drain", "--pgbouncer")


@pytest.mark.parametrize("counts", ["0", "1,1", "2,x", "33", ","])
def test_bad_counts_name_the_option(counts):
    with pytest.raises(UsageError, match="--scale wants"):
        plan("--scale", counts)


def test_only_processes_runs_the_cpu_bound_comparison_with_small_quick_sizes():
    from bench.__main__ import FULL

    chosen = plan("--only", "processes")
    assert chosen.sections == ("processes",)
    assert chosen.cpu_jobs == QUICK["cpu_jobs"] < FULL["cpu_jobs"]
    assert "processes" not in DEFAULT_SECTIONS  # it wants a quiet machine: asked for only


def test_only_capacity_runs_the_server_cpu_phases_alone():
    assert plan("--only", "capacity").sections == ("capacity",)
    assert plan("--only", "doors,capacity").sections == ("doors", "capacity")
