"""``python -m bench --quick --only steps`` reports a step's write against a checkpoint's and a
10-step job against 10 plain jobs (no timing asserted)."""

from __future__ import annotations

from sqlalchemy.engine import URL

from tests.helpers.bench import figures, run_bench


def test_quick_steps_run_reports_a_step_against_a_checkpoint_and_plain_jobs(server_url: URL):
    result = run_bench(server_url, "--quick", "--only", "steps")
    assert result.returncode == 0, result.stderr
    found = figures(result)
    assert set(found) == {
        "step_write_p50_ms",
        "checkpoint_write_p50_ms",
        "steps_plain_units_per_s",
        "steps_10step_units_per_s",
        "steps_10step_job_run_p50_ms",
    }
    assert found["step_write_p50_ms"]["ratio_to"] == "checkpoint_write_p50_ms"
    assert found["steps_10step_units_per_s"]["ratio_to"] == "steps_plain_units_per_s"
    assert all(figure["value"] > 0 for figure in found.values())
