"""deploy/prometheus/ checked by the real tools, and a real Prometheus scraping a supervisor.

CI (``CI`` set) must have Debian's ``prometheus`` package (``.ci/run`` installs it): there a
missing binary fails the test. Locally it is skipped with the reason.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import urllib.parse
import urllib.request

import pytest

from bench.bouncer import stop
from tests.helpers.paths import ROOT
from tests.helpers.processes import free_port
from tests.helpers.waiting import wait_until

DEPLOY = ROOT / "deploy" / "prometheus"


def tool(name: str) -> str:
    found = shutil.which(name)
    if found:
        return found
    reason = f"{name} not installed (apt-get install prometheus)"
    if os.environ.get("CI"):
        pytest.fail(f"{reason}: CI must run these tests (.ci/run installs it)")
    pytest.skip(reason)


@pytest.mark.parametrize(
    "check",
    [
        ["check", "config", "prometheus.yml"],
        ["check", "rules", "alerts.yml"],
        ["test", "rules", "alerts_test.yml"],
    ],
)
def test_promtool_accepts_the_deploy_files(check):
    result = subprocess.run(
        [tool("promtool"), *check], cwd=DEPLOY, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout + result.stderr


def test_every_alert_has_a_unit_test():
    import yaml

    rules = yaml.safe_load((DEPLOY / "alerts.yml").read_text())
    alerts = {rule["alert"] for group in rules["groups"] for rule in group["rules"]}
    tests = yaml.safe_load((DEPLOY / "alerts_test.yml").read_text())["tests"]
    tested = {
        case["alertname"]
        for test in tests
        for case in test["alert_rule_test"]
        if case.get("exp_alerts")
    }
    assert alerts == tested
    assert {
        "WorkerpoolDeadJobsGrowing",
        "WorkerpoolOldestDueJobTooOld",
        "WorkerpoolChildRestarting",
        "WorkerpoolHeartbeatStale",
        "WorkerpoolTargetDown",
    } <= alerts


def query(port: int, expression: str) -> list[dict]:
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": expression})
    with urllib.request.urlopen(url, timeout=5) as response:
        body = json.loads(response.read())
    assert body["status"] == "success", body
    return body["data"]["result"]


def done_in_prometheus(port: int) -> float | None:
    try:
        result = query(port, 'sum(workerpool_jobs_finished_total{outcome="done"})')
    except OSError:
        return None
    return float(result[0]["value"][1]) if result else None


def test_a_real_prometheus_scrapes_the_supervisor(start, app, sql, tmp_path):
    server = tool("prometheus")
    metrics_port, prom_port = free_port(), free_port()
    sup = start("--metrics-port", str(metrics_port))
    sup.wait_running("fast", "slow")
    ids = app.enqueue_many([("quick", {"seconds": 0.01}) for _ in range(25)])
    wait_until(
        lambda: (
            sql("SELECT count(*) FROM workerpool_jobs WHERE state = 'done' AND id = ANY(%s)", ids)[
                0
            ][0]
            == len(ids)
        ),
        30,
        message="jobs done",
    )
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        f"rule_files: [{DEPLOY / 'alerts.yml'}]\n"
        "scrape_configs:\n"
        "  - job_name: workerpool\n"
        f"    static_configs: [{{targets: ['127.0.0.1:{metrics_port}']}}]\n"
    )
    log_path = tmp_path / "prometheus.log"
    with log_path.open("wb") as log_file:
        prom = subprocess.Popen(
            [
                server,
                f"--config.file={config}",
                f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{prom_port}",
            ],
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=log_file,
            start_new_session=True,
        )
    try:
        done = sql("SELECT count(*) FROM workerpool_jobs WHERE state = 'done'")[0][0]
        wait_until(
            lambda: done_in_prometheus(prom_port) == done,
            60,
            message=f"Prometheus sees {done} done jobs\n{log_path.read_text()[-2000:]}",
        )
        up = query(prom_port, 'up{job="workerpool"}')
        assert [float(series["value"][1]) for series in up] == [1.0]
        families = query(prom_port, 'count by (__name__) ({__name__=~"workerpool_.+"})')
        names = {series["metric"]["__name__"] for series in families}
        assert {
            "workerpool_heartbeat_age_seconds",
            "workerpool_claims_total",
            "workerpool_jobs_in_flight",
        } <= names
    finally:
        stop(prom, 20)
