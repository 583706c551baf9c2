"""``python -m bench --quick --only processes``: the CPU-bound drain with processes=1 and 2, and
with ``processes="auto"`` against as many supervisors of one child each.

No timing is asserted (a loaded machine's figures mean nothing): each configuration's figures
come out, every spin job of each drain ran (the bench raises otherwise), and the children's CPU
per job is at least most of the calibrated work, so the handler really computed.
"""

from __future__ import annotations

from sqlalchemy.engine import URL

from bench.processes import AUTO, COUNTS, SEPARATE, SPIN, figure
from tests.helpers.bench import figures, run_bench


def test_each_process_count_reports_its_rate_and_cpu(server_url: URL):
    result = run_bench(server_url, "--quick", "--only", "processes", timeout=300)
    assert result.returncode == 0, result.stderr
    found = figures(result)
    assert found[SPIN]["value"] > 0
    for processes in COUNTS:
        assert found[figure(processes)]["value"] > 0
        assert found[figure(processes, "worker_cpu_us_per_job")]["value"] >= 0.5 * 2000
        assert figure(processes, "db_cpu_us_per_job") in found
    assert found[figure(2)]["ratio_to"] == figure(1)
    for shape in (AUTO, SEPARATE):
        assert found[f"{shape}_jobs_per_s"]["value"] > 0
        assert found[f"{shape}_worker_cpu_us_per_job"]["value"] >= 0.5 * 2000
    assert found[f"{AUTO}_jobs_per_s"]["ratio_to"] == f"{SEPARATE}_jobs_per_s"
