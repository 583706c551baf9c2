"""``python -m bench --quick --only logs`` reports a drain with log capture on against one with
it off, and checks itself that every attempt's logs were kept, or none (no timing asserted)."""

from __future__ import annotations

from sqlalchemy.engine import URL

from tests.helpers.bench import figures, run_bench


def test_quick_logs_run_reports_capture_on_against_off(server_url: URL):
    result = run_bench(server_url, "--quick", "--only", "logs")
    assert result.returncode == 0, result.stderr
    found = figures(result)
    assert set(found) == {"logs_off_jobs_per_s", "logs_on_jobs_per_s"}
    assert found["logs_on_jobs_per_s"]["ratio_to"] == "logs_off_jobs_per_s"
    assert all(figure["value"] > 0 for figure in found.values())
