"""``python -m bench --quick --only once`` reports complete_in jobs against plain jobs writing the
same effect, throughput and enqueue-to-done, each with its ratio (no timing asserted)."""

from __future__ import annotations

import pytest
from sqlalchemy.engine import URL

from tests.helpers.bench import figures, run_bench


@pytest.mark.slow
def test_quick_once_run_reports_complete_in_against_plain_jobs(server_url: URL):
    result = run_bench(server_url, "--quick", "--only", "once")
    assert result.returncode == 0, result.stderr
    found = figures(result)
    assert set(found) == {
        "once_plain_jobs_per_s",
        "once_complete_in_jobs_per_s",
        "once_plain_job_p50_ms",
        "once_complete_in_job_p50_ms",
    }
    assert found["once_complete_in_jobs_per_s"]["ratio_to"] == "once_plain_jobs_per_s"
    assert found["once_complete_in_job_p50_ms"]["ratio_to"] == "once_plain_job_p50_ms"
    assert all(figure["value"] > 0 for figure in found.values())
