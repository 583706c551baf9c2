"""Bounded queues from the command line: `workerpool queue bound` binds the SQL door,
`workerpool enqueue` on an app whose pool declares a bound refuses past it (one line, exit 1,
nothing written), and the bound is lifted with `workerpool queue unbound`."""

from __future__ import annotations

import json

from tests.helpers.cli import run_cli
from tests.helpers.doors import error_line, psql
from workerpool import WorkerPool


def test_a_bound_set_by_the_cli_binds_sql_enqueue(db_url, dsn, sql, tmp_path):
    pool = WorkerPool(db_url)
    pool.queue("email")
    pool.task(queue="email", name="send")(lambda job: None)
    pool.register_tasks()
    pool.dispose()
    done = run_cli("queue", "bound", "email", "2", url=db_url, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "queue email: at most 2 jobs waiting to run\n"
    listed = run_cli("queue", "bounds", "--json", url=db_url, cwd=tmp_path)
    assert json.loads(listed.stdout) == {"email": 2}
    for _ in range(2):
        assert psql(dsn, "SELECT workerpool_enqueue('send', '{}')").code == 0
    full = psql(dsn, "SELECT workerpool_enqueue('send', '{}')")
    assert error_line(full) == "queue email is full: it holds its bound of 2 jobs waiting to run"
    status = run_cli("status", "--json", url=db_url, cwd=tmp_path)
    assert json.loads(status.stdout)["queues"]["email"]["max_pending"] == 2
    shown = run_cli("status", url=db_url, cwd=tmp_path).stdout
    title = "BOUNDED (queued and waiting jobs count; past the bound an enqueue raises QueueFull)"
    section = shown.split(title + "\n")[1]
    assert [line.split() for line in section.splitlines()[:2]] == [
        ["QUEUE", "MAX_PENDING", "COUNTED", "ROOM"],
        ["email", "2", "2", "0"],
    ]
    assert run_cli("queue", "unbound", "email", url=db_url, cwd=tmp_path).returncode == 0
    assert psql(dsn, "SELECT workerpool_enqueue('send', '{}')").code == 0
    assert sql("SELECT count(*) FROM workerpool_jobs") == [(3,)]


def test_bad_bounds_are_refused_with_one_line(db_url, sql, tmp_path):
    for args, line in [
        (("email", "0"), "workerpool queue: max_pending must be an int within 1..100000000"),
        (("bad name", "3"), "workerpool queue: queue name 'bad name' is invalid"),
    ]:
        done = run_cli("queue", "bound", *args, url=db_url, cwd=tmp_path)
        assert done.returncode == 1
        assert done.stderr.startswith(line), done.stderr
        assert len(done.stderr.splitlines()) == 1
    assert run_cli("queue", "bound", "email", "many", url=db_url, cwd=tmp_path).returncode == 2
    assert sql("SELECT count(*) FROM workerpool_queue_bounds") == [(0,)]


def test_cli_enqueue_refuses_past_the_apps_declared_bound(db_url, sql, tmp_path):
    def enqueue(n: int):
        return run_cli(
            "enqueue",
            "tests.apps.bounded:pool",
            "note",
            "--payload",
            json.dumps({"n": n}),
            url=db_url,
            cwd=tmp_path,
        )

    assert [enqueue(n).returncode for n in range(2)] == [0, 0]
    full = enqueue(3)
    assert full.returncode == 1
    assert full.stderr == (
        "workerpool enqueue: queue tiny is full: 2 jobs waiting to run or reserved, bound 2,"
        " refused 1 more\n"
    )
    assert sql("SELECT count(*) FROM workerpool_jobs") == [(2,)]
