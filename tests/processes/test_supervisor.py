"""`workerpool run` as a user runs it: real processes, real signals, real PostgreSQL.

Each test starts the supervisor on ``tests/apps/basic.py`` in its own process group (drain 1 s,
hang_timeout 5 s, poll 0.1 s unless stretched), with ``WORKER_CLAIM_STALE_MS`` at one hour so
that any recovery seen within seconds is the fast path, not the stale arm.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.apps import basic
from tests.helpers.db import job_row
from tests.helpers.paths import ROOT
from tests.helpers.processes import alive, group_alive
from tests.helpers.waiting import wait_until
from workerpool.process.settings import DRAIN_MARGIN, RELEASE_MARGIN

MEASURES = ROOT / ".workerpool" / "measurements.jsonl"


def record(name: str, **values: float) -> None:
    """Keep a measured figure (for the README and the notes): .workerpool/measurements.jsonl."""
    MEASURES.parent.mkdir(exist_ok=True)
    with MEASURES.open("a") as out:
        out.write(json.dumps({"measure": name, **values}) + "\n")
    print(name, values)


def begun(sql, job_id: int) -> bool:
    """The job's handler runs: it saved a checkpoint. A claimed job may still wait in the
    worker's prefetch buffer, and a drain gives such a job back unstarted."""
    return job_row(sql, job_id)["checkpoint"] is not None


def interruptions(row: dict) -> list[dict]:
    return [e for e in row["errors"] if e.get("type") == "Interrupted"]


# -- shutdown -----------------------------------------------------------------------------------


def test_term_while_short_jobs_run_lets_them_all_finish(start, app, sql):
    sup = start(env={"TEST_DRAIN": "8"})
    sup.wait_running("fast", "slow")
    # steps: each saves a checkpoint after its first step, so the test knows its handler runs
    # (a claimed job still queued for a handler thread is given back unstarted by a drain)
    ids = app.enqueue_many([("steps", {"n": 4, "step": 0.2}) for _ in range(2)])
    wait_until(lambda: all(begun(sql, i) for i in ids), 15, message="both handlers running")
    # the parent: one thread, no socket (no database connection), titled
    assert "Threads:\t1\n" in Path(f"/proc/{sup.pid}/status").read_text()
    fds = [os.readlink(fd) for fd in Path(f"/proc/{sup.pid}/fd").iterdir()]
    assert not [fd for fd in fds if fd.startswith("socket:")], fds
    assert Path(f"/proc/{sup.pid}/cmdline").read_bytes().startswith(b"workerpool: supervisor")
    fast = sup.child_pid("fast")
    assert Path(f"/proc/{fast}/cmdline").read_bytes().startswith(b"workerpool: fast")
    sent = time.monotonic()
    os.kill(sup.pid, signal.SIGTERM)
    assert sup.wait_exit(15) == 0
    took = time.monotonic() - sent
    assert [job_row(sql, i)["state"] for i in ids] == ["done"] * 2, (
        [job_row(sql, i) for i in ids],
        sup.log(),
    )
    assert took < 8, f"exit took {took:.1f}s: the drain waited for nothing"
    assert len(sup.events("drain_started")) == 1 and sup.events("drain_finished")
    assert not sup.events("killed_at_deadline")


def test_term_past_the_drain_releases_the_job_and_a_new_supervisor_resumes_it(start, app, sql):
    sup = start()
    sup.wait_running("slow")
    job = app.enqueue("steps", {"n": 30, "step": 0.1})
    wait_until(
        lambda: (job_row(sql, job)["checkpoint"] or {}).get("done", 0) >= 3,
        15,
        message="three steps checkpointed",
    )
    sent = time.monotonic()
    os.kill(sup.pid, signal.SIGTERM)
    assert sup.wait_exit(15) == 0
    took = time.monotonic() - sent
    row = job_row(sql, job)
    assert row["state"] == "pending" and row["attempts"] == 0  # attempt refunded
    assert row["checkpoint"]["done"] >= 3  # progress kept
    assert len(interruptions(row)) == 1
    assert took < basic.DRAIN + DRAIN_MARGIN + 1.0, f"exit took {took:.1f}s"
    record("term_past_drain_exit_seconds", seconds=round(took, 2), drain=basic.DRAIN)

    again = start()
    wait_until(lambda: job_row(sql, job)["state"] == "done", 20, message="job resumed and done")
    row = job_row(sql, job)
    assert row["attempts"] == 1 and row["checkpoint"]["resumed_from"] >= 3
    os.kill(again.pid, signal.SIGTERM)
    assert again.wait_exit(15) == 0


def test_quit_stops_at_once_and_releases_the_job(start, app, sql):
    sup = start(env={"TEST_DRAIN": "20"})
    sup.wait_running("slow")
    job = app.enqueue("steps", {"n": 300, "step": 0.1})
    wait_until(lambda: begun(sql, job), 15, message="job running")
    sent = time.monotonic()
    os.kill(sup.pid, signal.SIGQUIT)
    assert sup.wait_exit(15) == 0
    assert time.monotonic() - sent < 10  # far inside the 20 s drain
    row = job_row(sql, job)
    assert row["state"] == "pending" and row["attempts"] == 0
    assert sup.events("stop_now")


def test_term_to_the_whole_group_drains_once(start, app, sql):
    sup = start()
    sup.wait_running("fast", "slow")
    job = app.enqueue("steps", {"n": 40, "step": 0.1})
    wait_until(lambda: begun(sql, job), 15, message="job running")
    children = [sup.child_pid("fast"), sup.child_pid("slow")]
    os.killpg(sup.pid, signal.SIGTERM)  # kill -TERM -- -<pgid>: parent and children at once
    assert sup.wait_exit(15) == 0
    row = job_row(sql, job)
    assert row["state"] == "pending" and row["attempts"] == 0
    assert len(interruptions(row)) == 1  # released exactly once
    assert len(sup.events("drain_started")) == 1
    for worker in ("fast", "slow"):  # each child noted one stop request, then drained once
        assert len(sup.events("child_stopping", logger="child", worker=worker)) == 1
        assert sup.events("child_exited", worker=worker)[-1].fields["status"] == "exit:0"
    assert not [pid for pid in children if alive(pid)]


def test_a_child_that_cannot_drain_is_killed_at_the_deadline(start, app, sql):
    sup = start()
    sup.wait_running("fast", "slow")
    victim = sup.child_pid("fast")
    job = app.enqueue("hog", {})  # holds the GIL: the child cannot even see its SIGTERM
    wait_until(lambda: begun(sql, job), 15, message="hog running")
    sent = time.monotonic()
    os.kill(sup.pid, signal.SIGTERM)
    assert sup.wait_exit(basic.DRAIN + DRAIN_MARGIN + 10) == 0
    took = time.monotonic() - sent
    assert sup.events("killed_at_deadline", worker="fast", pid=str(victim))
    assert sup.events("child_exited", worker="fast")[-1].fields["status"] == "signal:SIGKILL"
    assert sup.events("child_exited", worker="slow")[-1].fields["status"] == "exit:0"
    assert took >= basic.DRAIN + DRAIN_MARGIN - 0.1  # it waited for the full drain first
    assert took < basic.DRAIN + DRAIN_MARGIN + RELEASE_MARGIN + 2.0, f"exit took {took:.1f}s"
    assert not alive(victim)
    # its claim did not wait for stale_after (one hour here): the releaser gave it back before
    # the supervisor exited; the hog's only attempt is spent, so it is dead/abandoned
    row = job_row(sql, job)
    assert row["state"] == "dead", row
    assert sql("SELECT dead_reason FROM workerpool_jobs WHERE id = %s", job) == [("abandoned",)]
    lost = [e for e in row["errors"] if e["type"] == "WorkerLost"]
    assert (
        len(lost) == 1 and lost[0]["worker"] == sup.events("releaser_started")[0].fields["workers"]
    ), row["errors"]
    [released] = sup.events("orphans_released_at_exit")
    assert released.fields["count"] == "1" and not sup.events("release_failed")
    assert len(sup.events("releaser_started")) == 1
    assert sup.events("job_dead", logger="dead")  # logged once at error level, by the releaser
    record("releaser_exit_seconds", seconds=round(took, 2), drain=basic.DRAIN)


def test_a_child_crashing_mid_drain_has_its_job_released_before_the_supervisor_exits(
    start, app, sql
):
    sup = start(env={"TEST_DRAIN": "20"})
    sup.wait_running("fast", "slow")
    job = app.enqueue("steps", {"n": 300, "step": 0.1})
    wait_until(lambda: begun(sql, job), 15, message="job running")
    victim = sup.child_pid("slow")
    os.kill(sup.pid, signal.SIGTERM)
    wait_until(
        lambda: sup.events("child_stopping", logger="child", worker="slow"),
        15,
        message="slow child draining",
    )
    sent = time.monotonic()
    os.kill(victim, signal.SIGKILL)  # dies mid-drain without releasing its claim
    assert sup.wait_exit(15) == 0
    took = time.monotonic() - sent
    assert took < 10, f"exit took {took:.1f}s: it waited for the 20 s drain"
    row = job_row(sql, job)
    assert row["state"] == "pending" and row["attempts"] == 1, row  # the attempt stays spent
    assert [e["type"] for e in row["errors"]] == ["WorkerLost"]
    assert sup.events("orphans_released_at_exit", count="1")


# -- crashes and hangs ----------------------------------------------------------------------


def test_kill_9_of_a_child_reruns_its_job_within_seconds(start, app, sql):
    sup = start()
    sup.wait_running("slow")
    job = app.enqueue("steps", {"n": 15, "step": 0.1})
    wait_until(
        lambda: (job_row(sql, job)["checkpoint"] or {}).get("done", 0) >= 2,
        15,
        message="job running",
    )
    victim = sup.child_pid("slow")
    killed_wall, killed = time.time(), time.monotonic()
    os.kill(victim, signal.SIGKILL)

    wait_until(lambda: sup.child_pid("slow") != victim, 15, message="a new slow child")
    wait_until(
        lambda: sup.heartbeat_mtime("slow") > killed_wall, 15, message="the new child's heartbeat"
    )
    fresh = time.monotonic() - killed
    wait_until(lambda: job_row(sql, job)["attempts"] == 2, 15, message="job claimed again")
    rerun = time.monotonic() - killed
    wait_until(lambda: job_row(sql, job)["state"] == "done", 20, message="job done")

    row = job_row(sql, job)
    assert row["attempts"] == 2  # the killed attempt counts
    assert [e["type"] for e in row["errors"]] == ["WorkerLost"]
    assert row["checkpoint"]["resumed_from"] >= 2
    exited = sup.events("child_exited", worker="slow", pid=str(victim))
    assert exited and exited[0].fields["status"] == "signal:SIGKILL"
    assert rerun < 10, f"job ran again only after {rerun:.1f}s"  # stale_after is one hour
    record(
        "kill9_child_recovery_seconds", job_rerun=round(rerun, 2), heartbeat_fresh=round(fresh, 2)
    )


def test_a_stopped_child_goes_stale_then_is_killed_and_replaced(start, app, sql):
    sup = start(env={"TEST_HANG": "5"})
    sup.wait_running("fast", "slow")
    wait_until(
        lambda: sup.healthcheck("--max-age", "1.5").returncode == 0, 15, message="healthy at start"
    )
    victim = sup.child_pid("fast")
    os.kill(victim, signal.SIGSTOP)
    try:
        stale = wait_until(
            lambda: (lambda r: r.returncode == 1 and r)(
                sup.healthcheck("--max-age", "1.5", "fast")
            ),
            15,
            message="fast heartbeat stale",
        )
        assert re.fullmatch(
            r"workerpool healthcheck: fast: heartbeat is [\d.]+s old "
            r"\(max 1\.5s\)\n",
            stale.stderr,
        ), stale.stderr
        wait_until(
            lambda: sup.events("hang_detected", worker="fast", pid=str(victim)),
            15,
            message="hang detected",
        )
        wait_until(lambda: sup.child_pid("fast") != victim, 15, message="replacement child")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(victim, signal.SIGCONT)
    assert sup.events("child_exited", pid=str(victim))[0].fields["status"] == "signal:SIGKILL"
    wait_until(
        lambda: sup.healthcheck("--max-age", "1.5").returncode == 0, 15, message="healthy again"
    )
    assert not alive(victim)


def test_a_child_starved_in_c_code_has_its_stack_dumped_then_is_replaced(start, app, sql):
    sup = start()
    sup.wait_running("fast")
    victim = sup.child_pid("fast")
    job = app.enqueue("hog", {})
    wait_until(
        lambda: sup.events("hang_detected", worker="fast", pid=str(victim)),
        15,
        message="hang detected",
    )
    wait_until(lambda: sup.child_pid("fast") != victim, 15, message="replacement child")
    # faulthandler's dump, written by the starved child itself: every thread, the hog's frame
    assert "Current thread" in sup.log() or "Thread 0x" in sup.log()
    assert "in hog" in sup.log()
    assert sup.events("child_exited", pid=str(victim))[0].fields["status"] == "signal:SIGKILL"
    wait_until(
        lambda: job_row(sql, job)["state"] == "dead",
        15,
        message="its only attempt released as dead/abandoned by the replacement",
    )
    assert sql("SELECT dead_reason FROM workerpool_jobs WHERE id = %s", job) == [("abandoned",)]


def test_kill_9_of_the_parent_leaves_no_child_behind(start, app, sql):
    sup = start()
    sup.wait_running("fast", "slow")
    job = app.enqueue("steps", {"n": 100, "step": 0.1})
    wait_until(lambda: begun(sql, job), 15, message="job running")
    children = [sup.child_pid("fast"), sup.child_pid("slow")]
    killed = time.monotonic()
    os.kill(sup.pid, signal.SIGKILL)
    wait_until(
        lambda: not [p for p in children if alive(p)],
        basic.DRAIN + DRAIN_MARGIN + 1,
        message="children gone after the parent died",
    )
    gone = time.monotonic() - killed
    row = job_row(sql, job)
    assert row["state"] == "pending" and row["attempts"] == 0  # drained and released
    record("kill9_parent_children_gone_seconds", seconds=round(gone, 2), drain=basic.DRAIN)


def test_a_worker_type_failing_at_boot_backs_off_then_the_supervisor_gives_up(start, app, sql):
    job = app.enqueue("quick", {"seconds": 0})
    # restart delays long enough for the fast child to boot and claim its job meanwhile
    sup = start(
        "--restart-delay",
        "1",
        "--boot-retries",
        "4",
        command=("-m", "tests.apps.boot_failure", "slow"),
    )
    assert sup.wait_exit(30) == 3
    delays = [
        float(e.fields["delay"].rstrip("s")) for e in sup.events("restart_scheduled", worker="slow")
    ]
    assert delays == [0.0, 1.0, 2.0]
    starts = [e.at for e in sup.events("child_started", worker="slow")]
    exits = [e.at for e in sup.events("child_exited", worker="slow")]
    gaps = [start_at - exit_at for exit_at, start_at in zip(exits, starts[1:], strict=False)]
    assert len(starts) == 4 and all(g >= d - 0.05 for g, d in zip(gaps, delays, strict=True))
    assert sup.events("worker_fatal", worker="slow")
    # the other worker type kept running: one child for the whole time, its job done
    assert len(sup.events("child_started", worker="fast")) == 1
    assert sup.events("child_exited", worker="fast")[-1].fields["status"] == "exit:0"
    assert job_row(sql, job)["state"] == "done"


# -- configuration ------------------------------------------------------------------------------


def run_refused(tmp_path: Path, *args: str, env: dict[str, str] | None = None):
    full_env = {
        k: v for k, v in os.environ.items() if not k.startswith(("WORKERPOOL_", "WORKER_", "TEST_"))
    }
    full_env.update(
        {
            "PYTHONPATH": str(ROOT),
            "WORKERPOOL_DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none",
            **(env or {}),
        }
    )
    return subprocess.run(
        [sys.executable, "-m", "workerpool", "run", "tests.apps.basic:pool", *args],
        env=full_env,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )


def test_bad_configurations_are_refused_with_one_line(tmp_path):
    good = tmp_path / "hb"
    good.mkdir(mode=0o700)
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    open_dir.chmod(0o777)
    link = tmp_path / "link"
    link.symlink_to(good)
    cases = [
        (["--heartbeat-dir", str(good), "--queue", "nope"], {}, "unknown queue 'nope'"),
        (["--heartbeat-dir", str(good), "--grace", "3"], {}, "orchestrator grace period (3s)"),
        (
            ["--heartbeat-dir", str(good)],
            {"WORKERPOOL_GRACE_PERIOD": "30", "WORKERPOOL_DRAIN_TIMEOUT": "29"},
            "drain_timeout of fast (29s)",
        ),
        (["--heartbeat-dir", str(open_dir)], {}, "group- or world-writable (mode 0777)"),
        (["--heartbeat-dir", str(link)], {}, "is a symlink"),
        (["--heartbeat-dir", str(good)], {"TEST_HANG": "0.1"}, "hang_timeout (0.1s) must be"),
        (["--heartbeat-dir", str(good)], {"WORKER_CLAIM_STALE_MS": "500"}, "stale_after is 0.5s"),
    ]
    for args, env, message in cases:
        done = run_refused(tmp_path, *args, env=env)
        assert done.returncode == 1, (args, env, done.stderr)
        lines = done.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("workerpool run: "), done.stderr
        assert message in lines[0], (message, lines[0])


def test_term_right_after_the_forks_still_drains_cleanly(start):
    """TERM to the group while children may still be between fork and their own handlers."""
    sup = start()
    children = {"fast", "slow", "@maintenance"}  # one per queue, plus the maintenance child
    wait_until(
        lambda: {e.fields["worker"] for e in sup.events("child_started")} == children,
        15,
        message="all forked",
    )
    os.killpg(sup.pid, signal.SIGTERM)
    assert sup.wait_exit(basic.DRAIN + DRAIN_MARGIN + 5) == 0
    assert wait_until(lambda: not group_alive(sup.pid), 5, message="the group is empty")
    statuses = [e.fields["status"] for e in sup.events("child_exited")]
    assert statuses == ["exit:0"] * len(children), sup.log()


def test_the_database_password_appears_in_no_log_line_and_no_argv(start):
    """DESIGN §8: a sentinel password on an unreachable server, where every child logs errors."""
    sentinel = "S3cretSentinelPw"
    sup = start(
        "--boot-retries",
        "50",
        env={"WORKERPOOL_DATABASE_URL": f"postgresql://bob:{sentinel}@127.0.0.1:1/nowhere"},
    )
    wait_until(lambda: sup.log().count("database") >= 3, 30, message="database errors logged")
    argv = [
        Path(f"/proc/{pid}/cmdline").read_bytes()
        for pid in group_alive(sup.pid)
        if Path(f"/proc/{pid}/cmdline").exists()
    ]
    assert argv, "no process of the supervisor's group found"
    assert not [a for a in argv if sentinel.encode() in a]
    os.kill(sup.pid, signal.SIGTERM)
    sup.wait_exit(20)
    log = sup.log()
    assert "127.0.0.1" in log  # the connection errors are logged, naming the server only
    assert sentinel not in log


def test_a_kill_9_of_a_busy_child_is_named_on_its_restart_line(start, app, sql):
    sup = start("--queue", "slow")
    sup.wait_running("slow")
    job = app.enqueue("steps", {"n": 50, "step": 0.1})
    wait_until(
        lambda: sql("SELECT checkpoint FROM workerpool_jobs WHERE id = %s", job)[0][0],
        20,
        message=f"the job has begun\n{sup.log()}",
    )
    os.kill(sup.child_pid("slow"), signal.SIGKILL)
    restarted = wait_until(
        lambda: sup.events("restart_scheduled", worker="slow"), 15, message=sup.log()
    )[0]
    assert (restarted.fields["cause"], restarted.fields["status"]) == ("signal", "signal:SIGKILL")
    assert restarted.fields["fast_exits"] == "0"  # it had claimed a job: no back-off
