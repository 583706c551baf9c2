"""`python -m workerpool.chaos` for ~35 s with a fixed seed, as CI runs it: every check passes.

The run makes its own throwaway clusters (a primary and a synchronous standby, initdb + pg_ctl
on free ports), so it never restarts the machine's server; it injects every kind of fault,
fails over once, drains, and checks the whole history (lost = 0, fencing, effects once, cron).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter

from tests.helpers.paths import ROOT

SEED = "20261201"
COMMAND = [
    sys.executable,
    "-m",
    "workerpool.chaos",
    "--own-cluster",
    "--failover",
    "--seed",
    SEED,
    "--duration",
    "35",
    "--settle-timeout",
    "30",
]


def run(*args: str, cwd) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WORKERPOOL_", "WORKER_"))}
    env["PYTHONPATH"] = str(ROOT)
    # a liveness bound only: ~50 s alone, but two initdbs, a base backup and the run's own
    # processes share two cores with the rest of the suite under CI (85 s was once too few)
    return subprocess.run(
        [*COMMAND, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=240
    )


def test_a_seeded_run_passes_every_check(tmp_path):
    result_path = tmp_path / "chaos.json"
    done = run("--json", str(result_path), "--logs", str(tmp_path / "logs"), cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    assert "result: PASS" in done.stdout, done.stdout
    result = json.loads(result_path.read_text())
    assert result["ok"] and not result["violations"]
    landed = Counter(f["kind"] for f in result["faults"] if not f["error"])
    assert landed["failover"] == 1, result["faults"]
    # promoted only once the standby had flushed all the primary's WAL: a commit the primary
    # made visible without it (a backend terminated while it waited) is not the queue's to keep
    [failover] = [f for f in result["faults"] if f["kind"] == "failover"]
    assert "standby in sync after" in failover["target"], failover
    for kind in (
        "kill_child",
        "stop_child",
        "kill_supervisor",
        "term_supervisor",
        "terminate_backends",
        "blackhole",
        "exhaust_connections",
    ):
        assert landed[kind] >= 1, (kind, landed)
    assert landed["pg_restart_fast"] + landed["pg_restart_immediate"] >= 1, landed
    outcomes = result["outcomes"]
    # liveness bounds, not rates: a loaded CI machine once finished 71 plain jobs in the run
    assert outcomes.get("plain: done", 0) > 30 and outcomes.get("tick: done", 0) >= 5, outcomes
    assert outcomes.get("poison: dead/abandoned", 0) >= 1, outcomes
    # effects written with complete_in through every fault, counted once each by the checker
    assert outcomes.get("once: done", 0) > 10, outcomes
    assert result["history"].get("once effects counted", 0) == outcomes["once: done"], result
    assert result["history"].get("enqueue rollback: rolled_back", 0) >= 1


def test_the_same_seed_prints_the_same_schedule(tmp_path):
    first, second = (run("--schedule-only", cwd=tmp_path) for _ in range(2))
    assert first.returncode == 0 and first.stdout == second.stdout, first.stderr
    assert "failover" in first.stdout and first.stdout.count("\n") > 10
