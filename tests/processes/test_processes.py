"""Several children per queue (``--processes QUEUE=N``) under a real supervisor: each child is
its own slot, with its own heartbeat file, worker id, restart, drain and crash release.

The app is ``tests/apps/basic.py`` (drain 1 s, hang 5 s) with ``WORKER_CLAIM_STALE_MS`` at one
hour, so that a job back within seconds after a ``kill -9`` came back by the crash release.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

from tests.apps import basic, limits
from tests.apps import poison as poison_app
from tests.helpers.db import job_row
from tests.helpers.processes import alive, kill_all, start_supervisor
from tests.helpers.waiting import wait_until
from workerpool.process.settings import DRAIN_MARGIN

SLOW = ("slow.0", "slow.1", "slow.2")


def begun(sql, job_id: int) -> bool:
    return job_row(sql, job_id)["checkpoint"] is not None


def registered(sql, queue: str) -> dict[int, str]:
    """pid -> worker id of the registered processes of ``queue``."""
    return dict(sql("SELECT pid, id FROM workerpool_workers WHERE queue = %s", queue))


def test_n_children_of_a_queue_each_with_its_own_heartbeat_worker_id_and_title(start, sql):
    sup = start("--processes", "slow=3")
    sup.wait_running(*SLOW, "fast")
    pids = {name: sup.child_pid(name) for name in (*SLOW, "fast")}
    assert len(set(pids.values())) == 4
    for name, pid in pids.items():
        assert Path(f"/proc/{pid}/cmdline").read_bytes().startswith(f"workerpool: {name}".encode())
    # one heartbeat file per child; the one-child queue keeps its plain name
    wait_until(
        lambda: all(sup.heartbeat_mtime(name) for name in (*SLOW, "fast")),
        15,
        message="every child's heartbeat file",
    )
    assert sorted(p.name for p in sup.heartbeat_dir.glob("*.heartbeat")) == [
        "@maintenance.heartbeat",
        "fast.heartbeat",
        "slow.0.heartbeat",
        "slow.1.heartbeat",
        "slow.2.heartbeat",
        "supervisor.heartbeat",
    ]
    probe = sup.healthcheck("slow")  # a queue's name judges each of its children
    assert probe.returncode == 0, probe.stderr
    assert all(f"{name} " in probe.stdout for name in SLOW) and "fast" not in probe.stdout
    # each child registered itself, under its own worker id
    wait_until(lambda: len(registered(sql, "slow")) == 3, 15, message="three slow workers")
    rows = registered(sql, "slow")
    assert set(rows) == {pids[name] for name in SLOW} and len(set(rows.values())) == 3
    assert {sup.events("child_started", worker=n)[-1].fields["pid"] for n in SLOW} == {
        str(pid) for pid in rows
    }
    status = subprocess.run(
        [sys.executable, "-m", "workerpool", "status", "--json"],
        env=sup.env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert status.returncode == 0, status.stderr
    shown = json.loads(status.stdout)
    assert shown["queues"]["slow"]["live_workers"] == 3
    assert sorted(w["pid"] for w in shown["workers"] if w["queue"] == "slow") == sorted(rows)


def test_kill_9_of_every_child_replaces_each_and_releases_its_claims(start, app, sql):
    sup = start("--processes", "slow=3")
    sup.wait_running(*SLOW)
    wait_until(lambda: len(registered(sql, "slow")) == 3, 15, message="three slow workers")
    jobs = app.enqueue_many([("steps", {"n": 40, "step": 0.1}) for _ in range(6)])
    # six jobs, two handler threads a child: every child runs two
    wait_until(lambda: all(begun(sql, job) for job in jobs), 20, message="six handlers running")
    holders = {job_row(sql, job)["claimed_by"] for job in jobs}
    assert holders == set(registered(sql, "slow").values())
    victims = {name: sup.child_pid(name) for name in SLOW}
    killed_wall, killed = time.time(), time.monotonic()
    for pid in victims.values():
        os.kill(pid, signal.SIGKILL)

    for name, victim in victims.items():  # each slot replaced, its heartbeat fresh again
        wait_until(
            lambda n=name, v=victim: sup.child_pid(n) != v,
            15,
            message=f"a new {name} child\n{sup.log()}",
        )
        wait_until(
            lambda n=name: sup.heartbeat_mtime(n) > killed_wall,
            15,
            message=f"{name}'s new heartbeat",
        )
        exited = sup.events("child_exited", worker=name, pid=str(victim))
        assert exited and exited[0].fields["status"] == "signal:SIGKILL"
    assert sup.healthcheck("--max-age", "5", "slow").returncode == 0
    # the replacements released the dead children's claims (stale_after is one hour)
    wait_until(
        lambda: all(job_row(sql, job)["claimed_by"] not in holders for job in jobs),
        15,
        message="every claim of the dead children released",
    )
    rerun = time.monotonic() - killed
    wait_until(
        lambda: all(job_row(sql, job)["state"] == "done" for job in jobs),
        60,
        message=f"every job done\n{sup.log()}",
    )
    for job in jobs:
        lost = [e for e in job_row(sql, job)["errors"] if e["type"] == "WorkerLost"]
        assert len(lost) == 1 and lost[0]["worker"] in holders, job_row(sql, job)
    assert rerun < 15, f"claims released only after {rerun:.1f}s"
    assert not [pid for pid in victims.values() if alive(pid)]


def test_sigterm_drains_every_child_and_each_gives_its_jobs_back(start, app, sql):
    sup = start("--processes", "slow=3")
    sup.wait_running(*SLOW, "fast")
    jobs = app.enqueue_many([("steps", {"n": 300, "step": 0.1}) for _ in range(6)])
    wait_until(lambda: all(begun(sql, job) for job in jobs), 20, message="six handlers running")
    assert len({job_row(sql, job)["claimed_by"] for job in jobs}) == 3
    children = [sup.child_pid(name) for name in SLOW]
    sent = time.monotonic()
    os.kill(sup.pid, signal.SIGTERM)
    assert sup.wait_exit(20) == 0
    took = time.monotonic() - sent
    for name in SLOW:  # each drained once and exited cleanly
        assert len(sup.events("child_stopping", logger="child", worker=name)) == 1
        assert sup.events("child_exited", worker=name)[-1].fields["status"] == "exit:0"
    for job in jobs:  # each handed back by its own child: attempt refunded, progress kept
        row = job_row(sql, job)
        assert row["state"] == "pending" and row["attempts"] == 0, row
        assert [e["type"] for e in row["errors"]] == ["Interrupted"]
    assert not sup.events("releaser_started")  # nothing was left for a releaser
    assert took < basic.DRAIN + DRAIN_MARGIN + 3, f"exit took {took:.1f}s"
    assert not [pid for pid in children if alive(pid)]


def test_a_per_key_limit_holds_across_the_children_of_one_supervisor(replicas, sql):
    keys, per_key = 10, 20
    app = limits.build(replicas.env["WORKERPOOL_DATABASE_URL"])
    app.enqueue_many(
        [
            ("serial", {"account": key, "n": n, "seconds": 0.01})
            for key in range(keys)
            for n in range(per_key)
        ]
    )
    app.dispose()
    sup = replicas.start("--queue", "keyed", "--processes", "keyed=3")
    wait_until(
        lambda: (
            sql("SELECT count(*) FROM workerpool_jobs WHERE state = 'done'")[0][0] == keys * per_key
        ),
        timeout=90,
        message=f"every job done\n{sup.log()}",
    )
    runs = sql("SELECT key, pid, started_at, ended_at FROM limits_ledger ORDER BY started_at")
    assert len(runs) == keys * per_key
    by_key = defaultdict(list)
    for key, _, start, end in runs:
        by_key[key].append((start, end))
    for key, spans in by_key.items():
        for (_, end), (start, _) in itertools.pairwise(spans):
            assert start >= end, f"two jobs of {key} overlapped"
    pids = {pid for _, pid, _, _ in runs}
    assert len(pids) > 1, "one child ran every job"  # the limit held across several children


def test_a_poison_job_dies_after_max_attempts_deaths_with_two_children(db_url, tmp_path, sql):
    ledger = tmp_path / "ledger"
    pool = poison_app.build(db_url)
    pool.enqueue_many([("ordinary", {"n": n}) for n in range(100)])
    poison = pool.enqueue("poison", {})
    pool.enqueue_many([("ordinary", {"n": n}) for n in range(100)])
    pool.dispose()
    sup = start_supervisor(
        "tests.apps.poison:pool", db_url, tmp_path, "--processes", "work=2", TEST_LEDGER=str(ledger)
    )
    try:
        wait_until(
            lambda: (
                sql(
                    "SELECT count(*) FROM workerpool_jobs WHERE state IN"
                    " ('pending', 'processing', 'failed')"
                )
                == [(0,)]
            ),
            120,
            interval=0.2,
            message=f"settled\n{sup.log()}",
        )
        ran = [int(line.split()[1]) for line in ledger.read_text().splitlines()]
        assert sql(
            "SELECT state, dead_reason, attempts FROM workerpool_jobs WHERE id = %s", poison
        ) == [("dead", "abandoned", 5)]
        assert ran.count(poison) <= 5 + 1, ran.count(poison)
        assert sql(
            "SELECT state, attempts, count(*) FROM workerpool_jobs"
            " WHERE task = 'ordinary' GROUP BY state, attempts"
        ) == [("done", 1, 200)]
        assert {e.fields["worker"] for e in sup.events("child_exited")} <= {"work.0", "work.1"}
        assert len(sup.events("job_dead", logger="dead")) == 1
    finally:
        kill_all([sup])


def test_metrics_show_each_child_and_sum_its_queue(start, app, sql):
    from tests.helpers.metrics import scrape_or_none, total
    from tests.helpers.processes import free_port

    port = free_port()
    sup = start("--metrics-port", str(port), "--processes", "slow=2", "--queue", "slow")
    sup.wait_running("slow.0", "slow.1")
    jobs = app.enqueue_many([("steps", {"n": 300, "step": 0.1}) for _ in range(4)])
    wait_until(lambda: all(begun(sql, job) for job in jobs), 20, message="four handlers running")

    def in_flight(families: dict) -> list[float]:
        return [
            s.value
            for s in families["workerpool_jobs_in_flight"].samples
            if s.labels["queue"] == "slow"
        ]

    # one series for the queue, summed over its children (two jobs each)
    families = wait_until(
        lambda: (lambda f: f if f and in_flight(f) == [4.0] else None)(scrape_or_none(port)),
        15,
        message="four jobs in flight in one series",
    )
    ages = {s.labels["worker"] for s in families["workerpool_heartbeat_age_seconds"].samples}
    assert {"slow.0", "slow.1"} <= ages and "slow" not in ages  # one series per child
    victim = sup.child_pid("slow.1")
    os.kill(victim, signal.SIGKILL)
    wait_until(lambda: sup.child_pid("slow.1") != victim, 15, message="slow.1 replaced")
    families = wait_until(
        lambda: (
            lambda f: (
                f
                if f and total(f, "workerpool_child_restarts", worker="slow.1", cause="signal") == 1
                else None
            )
        )(scrape_or_none(port)),
        15,
        message="slow.1's restart counted",
    )
    assert total(families, "workerpool_child_restarts", worker="slow.0") == 0
