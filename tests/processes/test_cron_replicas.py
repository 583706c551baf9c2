"""Three `workerpool run` replicas share one 1-second cron whose handler takes 1.5 s: kill -9 too.

Each replica is a real supervisor (its own process group: one child for the ``cron`` queue, one
``maintenance`` child that schedules). The handler writes a ledger row (database clock) when it
starts and when it ends.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.paths import ROOT
from tests.helpers.processes import kill_group
from tests.helpers.waiting import wait_until

HANDLER_SECONDS = 1.5
STALE_AFTER = 3

APP = f"""
import os, time
from sqlalchemy import text
from workerpool import WorkerPool

pool = WorkerPool()
pool.queue("cron", stale_after={STALE_AFTER}, drain_timeout=1, hang_timeout=5, poll_interval=0.05)
pool.maintenance(interval=0.3)

@pool.cron("* * * * * *", queue="cron", max_attempts=3)
def slow_tick(job):
    with pool.engine.begin() as conn:
        run = conn.execute(text(
            "INSERT INTO cron_ledger (tick, job_id, pid, attempt, started_at)"
            " VALUES (:tick, :job, :pid, :attempt, clock_timestamp()) RETURNING id"),
            dict(tick=job.payload["tick"], job=job.id, pid=os.getpid(), attempt=job.attempt),
        ).scalar()
    time.sleep({HANDLER_SECONDS})  # the work: longer than the one-second period
    with pool.engine.begin() as conn:
        conn.execute(text("UPDATE cron_ledger SET ended_at = clock_timestamp() WHERE id = :id"),
                     dict(id=run))
"""


@pytest.fixture
def replicas(db_url, tmp_path: Path, sql) -> Iterator[list[subprocess.Popen]]:
    sql(
        "CREATE TABLE cron_ledger (id serial PRIMARY KEY, tick text, job_id bigint, pid int,"
        " attempt int, started_at timestamptz, ended_at timestamptz)"
    )
    (tmp_path / "cronapp.py").write_text(APP)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WORKERPOOL_", "WORKER_"))}
    env.update(
        WORKERPOOL_DATABASE_URL=db_url.render_as_string(hide_password=False),
        PYTHONPATH=f"{ROOT}{os.pathsep}{tmp_path}",
    )
    logs, procs = [], []
    for n in range(3):
        heartbeats = tmp_path / f"heartbeats{n}"
        heartbeats.mkdir(mode=0o700)
        logs.append(open(tmp_path / f"replica{n}.log", "w"))
        procs.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "workerpool",
                    "run",
                    "cronapp:pool",
                    "--heartbeat-dir",
                    str(heartbeats),
                ],
                cwd=tmp_path,
                env=env,
                start_new_session=True,
                stdin=subprocess.DEVNULL,
                stdout=logs[-1],
                stderr=subprocess.STDOUT,
            )
        )
    yield procs
    stop_all(procs)
    for proc, log in zip(procs, logs, strict=True):
        log.close()
        print(f"--- replica {proc.pid} ---", Path(log.name).read_text()[-3000:])  # on failure


def ledger(sql):
    return sql(
        "SELECT tick, job_id, pid, attempt, started_at, ended_at FROM cron_ledger"
        " ORDER BY started_at"
    )


def stop_all(procs: list[subprocess.Popen]) -> None:
    """kill -9 every replica's whole process group (supervisor and children)."""
    for proc in procs:
        kill_group(proc)
        proc.wait(timeout=10)


def test_three_replicas_run_each_tick_at_most_once_and_never_overlap(replicas, sql):
    wait_until(
        lambda: (
            sql("SELECT count(*) FROM workerpool_workers WHERE queue = '@maintenance'")[0][0] == 3
        ),
        timeout=30,
        message="three schedulers registered",
    )
    completed = "SELECT count(*) FROM cron_ledger WHERE ended_at IS NOT NULL"
    wait_until(lambda: sql(completed)[0][0] >= 3, timeout=40, message="three completed runs")
    stop_all(replicas)

    runs = ledger(sql)
    ticks = [run[0] for run in runs]
    assert len(ticks) == len(set(ticks)), "a tick ran twice"
    for earlier, later in itertools.pairwise(runs):
        assert earlier[5] is not None and later[4] >= earlier[5], f"runs overlap: {earlier} {later}"

    jobs = sql("SELECT key, payload->>'tick' FROM workerpool_jobs WHERE task = 'slow_tick'")
    assert sorted(tick for _, tick in jobs) == sorted(set(tick for _, tick in jobs))
    assert {run[1] for run in runs} <= {
        int(x) for (x,) in sql("SELECT id FROM workerpool_jobs WHERE task = 'slow_tick'")
    }
    [(skipped, span)] = sql(
        "SELECT c.skipped, extract(epoch FROM c.last_tick - min((j.payload->>'tick')::timestamptz))"
        " FROM workerpool_cron c, workerpool_jobs j WHERE j.task = c.name GROUP BY c.skipped,"
        " c.last_tick"
    )
    assert skipped >= 1, "a 1.5 s handler on a 1 s schedule must skip ticks"
    # every tick from the first job's to the last handled one became one job or one skip, at most
    assert len(jobs) + skipped <= int(span) + 1


def test_kill_9_of_the_replica_running_the_cron_does_not_stop_the_schedule(replicas, sql):
    running = wait_until(
        lambda: sql("SELECT pid, tick, clock_timestamp() FROM cron_ledger WHERE ended_at IS NULL"),
        timeout=40,
        message="a cron run in progress",
    )
    pid, killed_tick, killed_at = running[0]  # pid: the queue child running the handler
    victim = next(proc for proc in replicas if proc.pid == os.getpgid(pid))
    stop_all([victim])  # the whole replica: its supervisor, its worker, its scheduler

    # the lost run's lease goes stale; its tick is re-run or the schedule moves on — either way a
    # later tick completes on a surviving replica, within stale_after + a few periods
    later = wait_until(
        lambda: sql(
            "SELECT tick, pid FROM cron_ledger WHERE ended_at IS NOT NULL"
            " AND started_at > %s AND tick > %s",
            killed_at,
            killed_tick,
        ),
        timeout=STALE_AFTER + 25,
        message="a later tick completed after the kill -9",
    )
    assert all(run_pid != pid for _, run_pid in later)
    state, attempts = sql(
        "SELECT state, attempts FROM workerpool_jobs WHERE payload->>'tick' = %s", killed_tick
    )[0]
    assert (state, attempts) == ("done", 2)  # the stale lease was taken over and the run redone
