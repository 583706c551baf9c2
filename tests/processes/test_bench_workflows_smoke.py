"""``python -m bench --quick --only workflows`` reports its figures (no timing asserted)."""

from __future__ import annotations

from sqlalchemy.engine import URL

from tests.helpers.bench import figures, run_bench


def test_quick_workflows_run_reports_the_dependency_chain_and_sequence_figures(server_url: URL):
    result = run_bench(server_url, "--quick", "--only", "workflows")
    assert result.returncode == 0, result.stderr
    found = figures(result)
    assert set(found) == {
        "workflow_plain_enqueue_us",
        "workflow_dependent_enqueue_us",
        "workflow_plain_drain_jobs_per_s",
        "workflow_dependent_drain_jobs_per_s",
        "workflow_chain_per_link_ms",
        "workflow_sequence_drain_jobs_per_s",
    }
    assert found["workflow_dependent_enqueue_us"]["ratio_to"] == "workflow_plain_enqueue_us"
    assert found["workflow_sequence_drain_jobs_per_s"]["ratio_to"] == (
        "workflow_plain_drain_jobs_per_s"
    )
    assert all(figure["value"] > 0 for figure in found.values())
