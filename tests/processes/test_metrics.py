"""`workerpool run --metrics-port`: a real scrape of the supervisor, parsed by prometheus_client.

The counters are checked against the jobs table after a run in which a child is SIGKILLed: the
dead child's counts must still be in the scrape (not lost) and the jobs its replacement reran
counted once (not twice).
"""

from __future__ import annotations

import os
import signal
import socket

from tests.helpers.metrics import scrape_or_none, total
from tests.helpers.processes import free_port
from tests.helpers.waiting import wait_until


def test_counters_match_the_jobs_table_after_a_child_is_killed(start, app, sql):
    port = free_port()
    sup = start("--metrics-port", str(port))
    sup.wait_running("fast", "slow")
    first = app.enqueue_many([("quick", {"seconds": 0.01}) for _ in range(10)])
    long = app.enqueue("quick", {"seconds": 3.0})

    def only_the_long_job_left():
        done = sql(
            "SELECT count(*) FROM workerpool_jobs WHERE state = 'done' AND id = ANY(%s)", first
        )[0][0]
        running = sql("SELECT state FROM workerpool_jobs WHERE id = %s", long)[0][0]
        families = scrape_or_none(port)
        return (
            done == len(first)
            and running == "processing"
            and families is not None
            and total(families, "workerpool_jobs_finished", outcome="done") == done
        )

    # The kill must land where no outcome commit is in flight: a SIGKILL after the server
    # committed but before the child wrote its count loses that count, and no counter can be
    # exact across that window. So the quick jobs' counts are already in the scrape, and the child
    # is only waiting on the long job, which its replacement reruns.
    wait_until(only_the_long_job_left, 30, message="the quick jobs counted, the long one running")
    victim = sup.child_pid("fast")
    os.kill(victim, signal.SIGKILL)
    wait_until(
        lambda: len(sup.events("child_started", worker="fast")) == 2, 15, message="fast restarted"
    )
    second = app.enqueue_many([("quick", {"seconds": 0.01}) for _ in range(20)])
    ids = [*first, long, *second]
    wait_until(
        lambda: (
            sql("SELECT count(*) FROM workerpool_jobs WHERE state = 'done' AND id = ANY(%s)", ids)[
                0
            ][0]
            == len(ids)
        ),
        60,
        message=f"every job done\n{sup.log()}",
    )
    assert sql("SELECT attempts FROM workerpool_jobs WHERE id = %s", long)[0][0] == 2  # rerun

    def settled():
        families = scrape_or_none(port)
        if families and total(families, "workerpool_jobs_finished", outcome="done") == len(ids):
            return families
        return None

    families = wait_until(settled, 15, message="the done counter reaches the table's count")
    # Exactly the table's count: kept from the dead child, not counted twice for the reruns.
    assert total(
        families, "workerpool_jobs_finished", outcome="done", queue="fast", task="quick"
    ) == len(ids)
    assert total(families, "workerpool_child_restarts", worker="fast", cause="signal") == 1
    assert total(families, "workerpool_child_restarts") == 1
    claimed = sum(
        s.value
        for s in families["workerpool_claim_batch_size"].samples
        if s.name == "workerpool_claim_batch_size_sum" and s.labels["queue"] == "fast"
    )
    assert claimed == len(ids) + 1  # the long job twice
    pickups = [
        s
        for s in families["workerpool_pickup_delay_seconds"].samples
        if s.name.endswith("_count") and s.labels["queue"] == "fast"
    ]
    assert pickups[0].value == claimed
    in_flight = [
        s.value
        for s in families["workerpool_jobs_in_flight"].samples
        if s.labels["queue"] == "fast"
    ]
    assert in_flight == [0.0]  # the dead child's gauge is gone (livesum), not stuck at its last
    assert total(families, "workerpool_wakeups", queue="fast", source="notify") >= 1


def test_queue_depth_is_sampled_by_maintenance(start, app, sql):
    port = free_port()
    sup = start("--metrics-port", str(port), "--queue", "slow")
    sup.wait_running("slow")
    for _ in range(3):
        app.enqueue("steps", {"n": 1}, delay=3600.0)  # waiting, not due

    def pending_three():
        families = scrape_or_none(port)
        if not families or "workerpool_queue_depth" not in families:
            return None
        depth = {
            (s.labels["queue"], s.labels["state"]): s.value
            for s in families["workerpool_queue_depth"].samples
        }
        return families if depth.get(("slow", "queued")) == 3.0 else None

    families = wait_until(pending_three, 20, message="the depth gauge sampled")
    ages = {
        s.labels["queue"]: s.value for s in families["workerpool_oldest_due_age_seconds"].samples
    }
    assert ages["slow"] == 0.0  # none is due yet
    sql(
        "UPDATE workerpool_jobs SET run_at = now() - interval '1 hour', state = 'failed', "
        "attempts = max_attempts"
    )  # due, but never claimable: it stays waiting

    def aged():
        families = scrape_or_none(port)
        if not families:
            return None
        ages = {
            s.labels["queue"]: s.value
            for s in families["workerpool_oldest_due_age_seconds"].samples
        }
        depth = {
            (s.labels["queue"], s.labels["state"]): s.value
            for s in families["workerpool_queue_depth"].samples
        }
        return ages.get("slow", 0) >= 3500 and depth[("slow", "queued")] == 3.0

    wait_until(aged, 20, message="the oldest due age and the failed depth sampled")


def test_names_and_labels_follow_prometheus_conventions(start, app, sql):
    port = free_port()
    sup = start("--metrics-port", str(port))
    sup.wait_running("fast", "slow")
    app.enqueue("quick", {"seconds": 0.01})
    families = wait_until(
        lambda: (f := scrape_or_none(port)) and "workerpool_jobs_finished" in f and f,
        20,
        message="a scrape",
    )
    assert families
    for name, family in families.items():
        assert name.startswith("workerpool_"), name
        for sample in family.samples:
            assert not {"id", "job_id", "pid", "worker_id"} & set(sample.labels), sample
            if family.type == "counter":
                assert sample.name.endswith(("_total", "_created")), sample.name
        if family.type == "histogram":
            assert name.endswith(("_seconds", "_size")), name


def test_a_taken_port_refuses_to_start_before_any_fork(start):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        sup = start("--metrics-port", str(port))
        assert sup.wait_exit(30) != 0
    lines = [line for line in sup.log().splitlines() if line.strip()]
    assert lines == [
        f"workerpool run: --metrics-port {port}: cannot listen on "
        f"127.0.0.1:{port}: Address already in use"
    ], sup.log()
    assert not sup.events("child_started")


def test_bad_metrics_settings_are_refused_by_name(start):
    sup = start("--metrics-port", "http")
    assert sup.wait_exit(30) != 0
    assert sup.log().strip() == (
        "workerpool run: --metrics-port must be a TCP port (1..65535), got 'http'"
    )
    sup = start(env={"WORKERPOOL_METRICS_PORT": "70000"})
    assert sup.wait_exit(30) != 0
    assert sup.log().strip() == (
        "workerpool run: WORKERPOOL_METRICS_PORT must be a TCP port (1..65535), got '70000'"
    )
