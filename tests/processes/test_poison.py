"""Poison messages under a real supervisor: a crash costs only the job that caused it.

Real forks, real ``os._exit`` and ``kill -9``, real PostgreSQL. The app is
``tests/apps/poison.py``; its handlers append every run to a ledger file.
"""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.apps import poison as app_module
from tests.helpers.processes import Supervisor, kill_all, start_supervisor
from tests.helpers.waiting import wait_until, wait_while_progressing

APP = app_module  # the app the shared app and supervise fixtures build (conftest)

SETTLE = 120.0  # a generous liveness bound, not a timing claim
STALL = 30.0  # no job finished for this long: the queue stopped working


@pytest.fixture
def ledger(tmp_path) -> Path:
    return tmp_path / "ledger"


@pytest.fixture
def run_poison(db_url, tmp_path, ledger) -> Iterator:
    running: list[Supervisor] = []

    def launch() -> Supervisor:
        sup = start_supervisor("tests.apps.poison:pool", db_url, tmp_path, TEST_LEDGER=str(ledger))
        running.append(sup)
        return sup

    yield launch
    kill_all(running)


def runs(ledger: Path) -> Counter:
    """Runs per job id, fatal ones included."""
    if not ledger.exists():
        return Counter()
    return Counter(int(line.split()[1]) for line in ledger.read_text().splitlines())


def settled(sql) -> bool:
    return sql(
        "SELECT count(*) FROM workerpool_jobs WHERE state IN ('pending', 'processing', 'failed')"
    ) == [(0,)]


def unsettled(sql) -> list:
    """What is left, for a failure's message: state, suspect or not, attempts, how many."""
    return sql(
        "SELECT state, crashes > 0, attempts, count(*) FROM workerpool_jobs"
        " WHERE state <> 'done' GROUP BY 1, 2, 3 ORDER BY 1, 2, 3"
    )


def restart_delays(sup: Supervisor) -> list[float]:
    return [float(e.fields["delay"].rstrip("s")) for e in sup.events("restart_scheduled")]


def test_two_poison_jobs_among_300_cost_their_neighbours_nothing(app, run_poison, ledger, sql):
    poison = []
    for part in range(3):  # in line: 100 ordinary, a poison job, 100, a poison job, 100
        app.enqueue_many([("ordinary", {"n": n}) for n in range(100)])
        if part < 2:
            poison.append(app.enqueue("poison", {"n": part}))
    started = time.monotonic()
    sup = run_poison()
    wait_until(lambda: settled(sql), SETTLE, interval=0.2, message=f"settled\n{sup.log()}")
    settle = time.monotonic() - started
    ran = runs(ledger)
    print(
        f"\n300 + 2 poison: settled in {settle:.1f}s; poison runs "
        f"{[ran[p] for p in poison]}; restarts {len(restart_delays(sup))}, "
        f"longest restart delay {max(restart_delays(sup), default=0):.2f}s"
    )
    ordinary = sql(
        "SELECT state, attempts, count(*) FROM workerpool_jobs"
        " WHERE task = 'ordinary' GROUP BY state, attempts"
    )
    assert ordinary == [("done", 1, 300)]
    assert (
        sql("SELECT state, dead_reason, attempts FROM workerpool_jobs WHERE task = 'poison'")
        == [("dead", "abandoned", 5)] * 2
    )
    assert all(ran[p] <= 5 + 1 for p in poison), ran
    assert max(restart_delays(sup), default=0) == 0.0  # no back-off: every child ran jobs
    message = sql("SELECT errors->-1->>'message' FROM workerpool_jobs WHERE id = %s", poison[0])
    assert "killed its process 5 times while running alone" in message[0][0]
    gave_up = sup.events("job_dead", logger="dead")
    assert len(gave_up) == 2
    assert all("killed its process 5 times while running alone" in e.message for e in gave_up)


def test_a_job_that_crashes_only_on_its_second_attempt_ends_done(app, run_poison, ledger, sql):
    app.enqueue_many([("ordinary", {"seconds": 0.05}) for _ in range(20)])
    job = app.enqueue("crashes_on_second_attempt", {})
    sup = run_poison()
    wait_until(lambda: settled(sql), SETTLE, interval=0.2, message=f"settled\n{sup.log()}")
    [(state, attempts, errors)] = sql(
        "SELECT state, attempts, errors FROM workerpool_jobs WHERE id = %s", job
    )
    assert state == "done"
    lost = [e for e in errors if e["type"] == "WorkerLost"]
    assert [e["alone"] for e in lost][-1] is True  # charged once it ran alone
    assert attempts == 3  # attempt 1 failed, attempt 2 crashed (charged), attempt 3 succeeded
    assert sql(
        "SELECT count(*) FROM workerpool_jobs WHERE task = 'ordinary'"
        " AND (state <> 'done' OR attempts <> 1)"
    ) == [(0,)]


def test_a_burst_of_kill_9_loses_nothing_and_the_queue_keeps_working(app, run_poison, ledger, sql):
    total = 4000
    app.enqueue_many([("ordinary", {"seconds": 0.02}) for _ in range(total)])
    sup = run_poison()
    done = lambda: sql("SELECT count(*) FROM workerpool_jobs WHERE state = 'done'")[0][0]  # noqa: E731
    wait_until(lambda: done() >= 50, 30, message=f"first jobs done\n{sup.log()}")
    before = rate(done, 2.0)
    kills, killed, burst_end = 0, None, time.monotonic() + 10.0
    while time.monotonic() < burst_end:
        # a child that runs jobs (one that is killed before it boots fails at boot instead:
        # back-off and FATAL, another test's subject)
        pid = running_child(sup)
        if pid and pid != killed:
            try:
                os.kill(pid, signal.SIGKILL)
                kills, killed = kills + 1, pid
            except ProcessLookupError:
                pass
        time.sleep(0.2)  # the burst's cadence
    wait_until(
        lambda: running_child(sup) not in (None, killed),
        30,
        message=f"a child running after the burst\n{sup.log()}",
    )
    after = rate(done, 5.0)
    print(
        f"\nkill -9 burst: {kills} kills; rate before {before:.0f}/s, after {after:.0f}/s,"
        f" ratio {after / before:.2f}"
    )
    # how long the rest takes depends on the suite's load: only a stall fails
    wait_while_progressing(
        lambda: settled(sql),
        done,
        STALL,
        message=lambda: f"settled; left: {unsettled(sql)}\n{sup.log()}",
    )
    assert sql("SELECT state, count(*) FROM workerpool_jobs GROUP BY state") == [("done", total)]
    assert kills >= 10  # it was a burst
    assert after > 0  # back to work after the burst; how fast is the bench's (`--only burst`)


def running_child(sup: Supervisor) -> int | None:
    running = sup.events("child_running", worker="work")
    return int(running[-1].fields["pid"]) if running else None


def rate(done, seconds: float) -> float:
    first, start = done(), time.monotonic()
    deadline = start + seconds
    while time.monotonic() < deadline:
        time.sleep(0.05)
    return (done() - first) / (time.monotonic() - start)
