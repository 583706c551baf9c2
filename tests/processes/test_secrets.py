"""The database password appears nowhere a user or a scraper can read it (DESIGN §8).

Extends test_supervisor.py's sentinel test (an unreachable server) to a reachable one, where
every surface has something to say: the supervisor's and children's argv (process titles), the
log while backends are killed under the workers, the `/metrics` scrape, `status --json`,
`dead list --json`, the jobs' stored errors and the heartbeat files; and to malformed URLs,
whose error messages (CLI and Python, traceback included) must not quote the URL.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import traceback
import urllib.request
from pathlib import Path

import psycopg
import pytest

from tests.apps import basic
from tests.helpers.cli import run_cli
from tests.helpers.db import libpq
from tests.helpers.paths import ROOT
from tests.helpers.processes import free_port, group_alive
from tests.helpers.waiting import wait_until
from workerpool import WorkerPool

SENTINEL = "S3cretSentinelPw"


def with_sentinel(url):
    """``url`` with the sentinel as its password (the test server trusts local logins)."""
    return url.set(password=SENTINEL)


def argv_of_group(pgid: int) -> list[bytes]:
    found = []
    for pid in group_alive(pgid):
        path = Path(f"/proc/{pid}/cmdline")
        if path.exists():
            found.append(path.read_bytes())
    return found


def test_a_working_supervisor_leaks_the_password_nowhere(start, db_url, sql, tmp_path):
    secret_url = with_sentinel(db_url)
    port = free_port()
    sup = start(
        "--metrics-port",
        str(port),
        env={"WORKERPOOL_DATABASE_URL": secret_url.render_as_string(hide_password=False)},
    )
    sup.wait_running("fast", "slow")
    pool = basic.build(secret_url)
    ids = [pool.enqueue("quick", {"seconds": 0.05}), pool.enqueue("steps", {"step": 0.05})]
    pool.dispose()  # "steps" without "n" fails: an error with a traceback is stored and logged
    wait_until(
        lambda: sql("SELECT count(*) FROM workerpool_jobs WHERE attempts > 0")[0][0] == 2,
        30,
        message=f"both claimed\n{sup.log()}",
    )
    with psycopg.connect(libpq(db_url), autocommit=True) as admin:  # connection errors, logged
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND application_name LIKE 'workerpool%'"
        )
    wait_until(
        lambda: sql("SELECT state FROM workerpool_jobs WHERE id = %s", ids[0]) == [("done",)],
        30,
        message=f"done\n{sup.log()}",
    )
    argv = argv_of_group(sup.pid)
    assert len(argv) >= 3, argv  # the supervisor and its children, with their process titles
    assert not [a for a in argv if SENTINEL.encode() in a], argv
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        scraped = response.read().decode()
    assert "workerpool_" in scraped and SENTINEL not in scraped
    for args in (("status", "--json"), ("dead", "list", "--json"), ("status",)):
        shown = run_cli(*args, url=secret_url, cwd=tmp_path)
        assert shown.returncode == 0, shown.stderr
        assert SENTINEL not in shown.stdout + shown.stderr, args
    stored = sql("SELECT errors::text FROM workerpool_jobs")
    assert "KeyError" in str(stored) and SENTINEL not in str(stored)
    os.kill(sup.pid, signal.SIGTERM)
    assert sup.wait_exit(30) == 0, sup.log()
    beats = [p.read_bytes() for p in sup.heartbeat_dir.iterdir() if p.is_file()]
    assert not [b for b in beats if SENTINEL.encode() in b]
    assert "terminat" in sup.log().lower() or "connection" in sup.log().lower(), sup.log()
    assert SENTINEL not in sup.log()


MALFORMED = [
    f"postgresql://bob:{SENTINEL}@127.0.0.1:notaport/db",
    f"postgresql://bob:{SENTINEL}@[::1/db",
    f"bob:{SENTINEL}@127.0.0.1/db",
    f"host=127.0.0.1 user=bob password={SENTINEL}",
    f"postgresql://bob:{SENTINEL}@127.0.0.1:5432/db?sslmode=bogus",
    f"postgresql+nodriver://bob:{SENTINEL}@127.0.0.1/db",
]


@pytest.mark.parametrize("url", MALFORMED)
def test_a_malformed_url_is_never_quoted(url, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("WORKERPOOL_")}
    env["WORKERPOOL_DATABASE_URL"] = url
    for args in (
        ("status", "--json"),
        ("migrate",),
        ("run", "tests.apps.basic:pool", "--boot-retries", "1"),
    ):
        done = subprocess.run(
            [sys.executable, "-m", "workerpool", *args],
            cwd=tmp_path,
            env={**env, "PYTHONPATH": str(ROOT)},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode != 0, (args, done.stdout, done.stderr)
        assert SENTINEL not in done.stdout + done.stderr, (args, done.stderr)
    try:
        pool = WorkerPool(url)
        pool.queue("q")
        pool.task(queue="q")(lambda job: None)
        pool.enqueue("<lambda>", {})
    except Exception as exc:
        assert SENTINEL not in traceback.format_exc() and SENTINEL not in repr(exc)
    else:
        pytest.fail(f"{url!r} was accepted")
