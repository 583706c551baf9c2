"""``python -m bench --quick --only capacity,typed`` (one run for both): the server's CPU per
job of each phase beside its floor, and jobs/s per server core; typed tasks against dict tasks.
Each figure has its ratio to its plain path (no timing asserted)."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy.engine import URL

from bench.capacity import PER_CORE_FIGURES, SERVER_US
from tests.helpers.bench import figures, run_bench


@pytest.fixture(scope="module")
def found(server_url: URL) -> dict[str, Any]:
    result = run_bench(server_url, "--quick", "--only", "capacity,typed")
    assert result.returncode == 0, result.stderr
    assert "capacity: server CPU per job" in result.stderr
    return figures(result)


def test_quick_capacity_run_reports_server_cpu_per_phase_and_jobs_per_core(found):
    capacity = {name: figure for name, figure in found.items() if name.startswith("capacity_")}
    expected = {f"capacity_{what}": ref for what, ref, *_ in (*SERVER_US, *PER_CORE_FIGURES)}
    assert set(capacity) == set(expected)
    for name, ref in expected.items():
        assert capacity[name]["ratio_to"] == (ref and f"capacity_{ref}"), name
        assert capacity[name]["value"] > 0, name
    assert capacity["capacity_enqueue_sql_us"]["also_ratio_to"] == "capacity_enqueue_raw_us"
    assert capacity["capacity_jobs_per_core"]["unit"] == "jobs/s/core"


def test_quick_typed_run_reports_each_typed_figure_against_its_dict_twin(found):
    twins = {f"typed_{step}_typed_us": f"typed_{step}_dict_us" for step in ("check", "rebuild")} | {
        f"typed_{step}_typed": f"typed_{step}_dict" for step in ("single", "bulk", "drain")
    }
    typed = {name: figure for name, figure in found.items() if name.startswith("typed_")}
    assert set(typed) == set(twins) | set(twins.values())
    for name, dict_twin in twins.items():
        assert typed[name]["ratio_to"] == dict_twin
        assert typed[name]["value"] > 0
