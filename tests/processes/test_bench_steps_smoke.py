"""``python -m bench --quick --only steps,once`` (one run for both sections) reports a step's
write against a checkpoint's and a 10-step job against 10 plain jobs, and complete_in jobs
against plain jobs writing the same effect and no-op jobs returning, each with its ratio (no
timing asserted)."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy.engine import URL

from tests.helpers.bench import figures, run_bench


@pytest.fixture(scope="module")
def found(server_url: URL) -> dict[str, Any]:
    result = run_bench(server_url, "--quick", "--only", "steps,once")
    assert result.returncode == 0, result.stderr
    return figures(result)


def test_quick_steps_run_reports_a_step_against_a_checkpoint_and_plain_jobs(found):
    steps = {name: figure for name, figure in found.items() if not name.startswith("once_")}
    assert set(steps) == {
        "step_write_p50_ms",
        "checkpoint_write_p50_ms",
        "steps_plain_units_per_s",
        "steps_10step_units_per_s",
        "steps_10step_job_run_p50_ms",
    }
    assert steps["step_write_p50_ms"]["ratio_to"] == "checkpoint_write_p50_ms"
    assert steps["steps_10step_units_per_s"]["ratio_to"] == "steps_plain_units_per_s"
    assert all(figure["value"] > 0 for figure in steps.values())


def test_quick_once_run_reports_complete_in_against_plain_jobs(found):
    once = {name: figure for name, figure in found.items() if name.startswith("once_")}
    assert set(once) == {
        "once_return_jobs_per_s",
        "once_plain_jobs_per_s",
        "once_complete_in_jobs_per_s",
        "once_plain_job_p50_ms",
        "once_complete_in_job_p50_ms",
    }
    assert once["once_complete_in_jobs_per_s"]["ratio_to"] == "once_plain_jobs_per_s"
    assert once["once_complete_in_jobs_per_s"]["also_ratio_to"] == "once_return_jobs_per_s"
    assert once["once_plain_jobs_per_s"]["ratio_to"] == "once_return_jobs_per_s"
    assert once["once_complete_in_job_p50_ms"]["ratio_to"] == "once_plain_job_p50_ms"
    assert all(figure["value"] > 0 for figure in once.values())
