"""``python -m bench --quick`` works end to end: figures come out as parseable JSON lines.

Never asserts a timing: the figures of a CI machine mean nothing. It proves the harness runs
against a real server, reports every figure it promises, and cleans up its private database.
"""

from __future__ import annotations

import re
import subprocess

import pytest
from sqlalchemy.engine import URL

from tests.helpers.bench import bench_databases, figures, run_bench

EXPECTED = {
    "ceiling_jobs_per_s",
    "ceiling_2proc_jobs_per_s",
    "lean_floor_jobs_per_s",
    "lean_floor_2proc_jobs_per_s",
    "drain_1child_jobs_per_s",
    "drain_2children_jobs_per_s",
    "drain_defaults_1_jobs_per_s",
    "drain_defaults_2_jobs_per_s",
    "drain_metrics_off_jobs_per_s",
    "drain_metrics_on_jobs_per_s",
    "drain_metrics_off_cpu_us_per_job",
    "drain_metrics_on_cpu_us_per_job",
    *(f"pickup_{mode}_p{p}_ms" for mode in ("raw", "notify", "poll") for p in (50, 90, 99)),
    "rss_parent_peak_mb",
    "rss_child_peak_mb",
    "enqueue_bulk_raw_rows_per_s",
    "enqueue_bulk_raw_copy_rows_per_s",
    "enqueue_bulk_rows_per_s",
    "enqueue_bulk_keyed_rows_per_s",
    "enqueue_single_raw_per_s",
    "enqueue_single_per_s",
    "enqueue_single_bounded_per_s",
    "enqueue_single_raw_cpu_us",
    "enqueue_single_cpu_us",
    "enqueue_single_raw_tx_per_s",
    "enqueue_single_tx_per_s",
    "enqueue_single_raw_tx_procs_per_s",
    "enqueue_single_tx_procs_per_s",
    *(f"doors_{kind}_{unit}" for kind in ("raw", "pool", "sql") for unit in ("per_s", "cpu_us")),
    "claim_empty_p50_ms",
    "claim_empty_p99_ms",
    "claim_large_p50_ms",
    "claim_large_p99_ms",
    "healthcheck_ms",
    "status_ms",
    "dead_list_ms",
    "depth_sample_ms",
    "web_overview_p50_ms",
    "web_overview_p99_ms",
    "batch_plain_enqueue_rows_per_s",
    "batch_member_enqueue_rows_per_s",
    "batch_plain_drain_jobs_per_s",
    "batch_member_drain_jobs_per_s",
    "batch_callback_delay_p50_ms",
    "batch_callback_delay_p99_ms",
    "result_wait_p50_ms",
    "result_wait_p99_ms",
    "result_done_p50_ms",
}
#: Figures that may be 0 in a run (a delay that the run's own transaction made none).
MAY_BE_ZERO = {"batch_callback_delay_p50_ms", "batch_callback_delay_p99_ms"}
FIELDS = {"name", "value", "unit", "median_of", "samples", "ratio", "ratio_to", "target", "met"}
#: Only on a figure with a second reference (the drains: the ceiling, then the lean floor).
ALSO = {"also_ratio", "also_ratio_to"}


@pytest.fixture(scope="module")
def quick_run(server_url: URL) -> subprocess.CompletedProcess:
    # every default section, the two floors at two process counts each: 80-140 s on the 2-core
    # machine while other suites run
    return run_bench(server_url, "--quick", timeout=240)


def test_quick_run_prints_every_figure_as_a_json_line(quick_run):
    assert quick_run.returncode == 0, quick_run.stderr
    found = figures(quick_run)
    assert set(found) == EXPECTED
    for figure in found.values():
        assert set(figure) in (FIELDS, FIELDS | ALSO), figure
        assert figure["median_of"] == len(figure["samples"]) >= 1
        assert isinstance(figure["value"], int | float), figure
        assert figure["value"] > 0 or (figure["name"] in MAY_BE_ZERO and figure["value"] == 0)


def test_ratios_point_at_figures_of_the_same_run(quick_run):
    found = figures(quick_run)
    for figure in found.values():
        if figure["ratio_to"] is not None:
            assert figure["ratio_to"] in found
            assert figure["ratio"] == pytest.approx(
                figure["value"] / found[figure["ratio_to"]]["value"], rel=0.01, abs=0.001
            )
        if "also_ratio_to" in figure:
            assert figure["also_ratio"] == pytest.approx(
                figure["value"] / found[figure["also_ratio_to"]]["value"], rel=0.01, abs=0.001
            )
    assert found["ceiling_2proc_jobs_per_s"]["ratio_to"] == "ceiling_jobs_per_s"
    # like with like: two workerpool processes against the two-process raw loop
    assert found["drain_2children_jobs_per_s"]["ratio_to"] == "ceiling_2proc_jobs_per_s"
    assert found["drain_2children_jobs_per_s"]["target"] == ">= 0.7x"
    # and beside the lean floor at the same process counts
    assert found["drain_1child_jobs_per_s"]["also_ratio_to"] == "lean_floor_jobs_per_s"
    assert found["drain_2children_jobs_per_s"]["also_ratio_to"] == "lean_floor_2proc_jobs_per_s"
    assert found["lean_floor_2proc_jobs_per_s"]["ratio_to"] == "ceiling_2proc_jobs_per_s"
    assert found["doors_sql_per_s"]["ratio_to"] == "doors_pool_per_s"
    assert found["doors_sql_per_s"]["also_ratio_to"] == "doors_raw_per_s"
    assert found["drain_defaults_2_jobs_per_s"]["ratio_to"] == "drain_2children_jobs_per_s"
    assert found["pickup_notify_p50_ms"]["ratio_to"] == "pickup_raw_p50_ms"
    assert found["enqueue_single_per_s"]["ratio_to"] == "enqueue_single_raw_per_s"
    assert found["enqueue_single_bounded_per_s"]["ratio_to"] == "enqueue_single_per_s"
    assert found["claim_large_p99_ms"]["target"] == "<= 2x"
    assert found["drain_metrics_on_jobs_per_s"]["ratio_to"] == "drain_metrics_off_jobs_per_s"
    assert found["drain_metrics_on_jobs_per_s"]["target"] == ">= 0.95x"


def test_table_lists_the_figures_and_the_private_databases_are_dropped(quick_run, server_url):
    table = [line for line in quick_run.stdout.splitlines() if line.startswith("|")]
    assert table[0].split("|")[1].strip() == "figure"
    assert {line.split("|")[1].strip() for line in table[2:]} == EXPECTED
    created = re.findall(r"created (wp_bench_[0-9a-f]+)", quick_run.stderr)
    assert len(created) == 2  # the run's own, and the growth section's empty table
    assert not set(created) & bench_databases(server_url)


BURST = {
    "burst_rate_before_jobs_per_s": "jobs/s",
    "burst_rate_after_jobs_per_s": "jobs/s",
    "burst_recovery_s": "s",
    "burst_held_jobs": "jobs",
}


def test_quick_burst_run_kills_the_child_and_reports_rates_and_recovery(server_url):
    """``--only burst``: not in a run without ``--only``, so smoke-tested on its own. Exit 0
    means every job of the backlog ended ``done`` (the section raises otherwise)."""
    result = run_bench(server_url, "--quick", "--only", "burst")
    assert result.returncode == 0, result.stderr
    found = figures(result)
    assert {name: f["unit"] for name, f in found.items()} == BURST
    assert found["burst_rate_after_jobs_per_s"]["ratio_to"] == "burst_rate_before_jobs_per_s"
    assert found["burst_rate_after_jobs_per_s"]["target"] == ">= 0.8x"
    assert found["burst_rate_before_jobs_per_s"]["value"] > 0
    assert found["burst_rate_after_jobs_per_s"]["value"] >= 0
    assert found["burst_recovery_s"]["value"] >= 0
    assert found["burst_held_jobs"]["value"] >= 1  # a kill lands while the child holds a job
    assert re.search(r"burst: 3 kill -9s in .*jobs, all done", result.stderr), result.stderr
    created = re.findall(r"created (wp_bench_[0-9a-f]+)", result.stderr)
    assert len(created) == 1 and not set(created) & bench_databases(server_url)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--n", "1000"], "--n must be >= 50000"),
        (["--repeats", "1"], "--repeats must be >= 3"),
        (["--quick", "--n", "0"], "--n must be >= 1"),
        (["--quick", "--only", "ceiling,bogus"], "unknown section"),
        (["--quick", "--concurrency", "1001"], "--concurrency must be within 1..1000"),
    ],
)
def test_bad_arguments_are_refused_before_any_database_is_created(server_url, args, message):
    result = run_bench(server_url, *args, timeout=30)
    assert result.returncode == 2
    assert message in result.stderr
    # the one line is the refusal: a bench that got as far as a database logs "created <name>"
    # first (the server's list of databases would also show other files' benches running now)
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "created wp_bench_" not in result.stderr
    assert result.stdout == ""
