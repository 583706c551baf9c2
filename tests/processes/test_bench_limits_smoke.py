"""``python -m bench --quick --only limits`` reports the limits comparison (no timing asserted)."""

from __future__ import annotations

from sqlalchemy.engine import URL

from tests.helpers.bench import figures, run_bench

CONFIGS = ("global", "rate", "key")


def test_quick_limits_run_reports_each_limit_against_off(server_url: URL):
    result = run_bench(server_url, "--quick", "--only", "limits")
    assert result.returncode == 0, result.stderr
    found = figures(result)
    expected = {
        f"limits_drain_{c}_{unit}"
        for c in ("off", *CONFIGS)
        for unit in ("jobs_per_s", "cpu_us_per_job")
    } | {f"limits_claim_{c}_p{p}_ms" for c in ("off", *CONFIGS) for p in (50, 99)}
    assert set(found) == expected
    for config in CONFIGS:
        assert found[f"limits_drain_{config}_jobs_per_s"]["ratio_to"] == (
            "limits_drain_off_jobs_per_s"
        )
        assert found[f"limits_claim_{config}_p99_ms"]["target"] == "<= 2x"
