"""`workerpool demo` end to end, as a user runs it: a real supervisor over the example backend.

Each run checks the demo's own verdict (exit status and summary), then looks at the database
itself, independently of the demo's code: nothing processing, dead jobs exactly the ones meant to
die, one delivered email per idempotency key, every deletion complete.
"""

from __future__ import annotations

import itertools
import os
import re
import secrets
import subprocess
import sys
import tomllib
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from sqlalchemy.engine import URL

from tests.helpers.db import libpq
from tests.helpers.paths import ROOT

CHECKS = (
    "nothing left processing",
    "every job done, or dead on purpose",
    "one welcome job per user",
    "one email per idempotency key",
    "no half-deleted user",
    "no finished step ran again",
    "data exports: ",
    "session cleanup ran",
    "the supervisor drained and exited with status 0",
)


#: A liveness bound past the demo's own (its --duration, then up to --settle-timeout, 90 s by
#: default, then its drain): on a loaded machine the demo must be let to give its verdict, and
#: its output, instead of being killed before it does.
DEMO_BOUND = 240


@pytest.fixture
def demo(server_url: URL, tmp_path: Path) -> Iterator[Callable[..., tuple[Any, Callable]]]:
    """Run `workerpool demo` on a fresh, randomly named database; drop it afterwards."""
    names: list[str] = []

    def run(*args: str) -> tuple[subprocess.CompletedProcess, Callable]:
        name = f"wp_demo_{secrets.token_hex(5)}"
        names.append(name)
        env = {k: v for k, v in os.environ.items() if not k.startswith("WORKERPOOL_")}
        env.update(WORKERPOOL_DATABASE_URL=libpq(server_url), PYTHONPATH=str(ROOT))
        result = subprocess.run(
            [sys.executable, "-m", "workerpool", "demo", "--database", name, *args],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=DEMO_BOUND,
        )

        def sql(statement: str) -> list[tuple]:
            with psycopg.connect(libpq(server_url.set(database=name))) as conn:
                return conn.execute(statement).fetchall()

        return result, sql

    yield run
    with psycopg.connect(libpq(server_url), autocommit=True) as admin:
        for name in names:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def assert_passed(result: subprocess.CompletedProcess) -> None:
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "[FAIL]" not in output and "result: PASS" in output, output
    for check in CHECKS:
        assert f"[ok] {check}" in output, f"missing check {check!r} in:\n{output}"


def assert_database_agrees(sql: Callable[[str], list[tuple]]) -> None:
    states = Counter(state for (state,) in sql("SELECT state FROM workerpool_jobs"))
    assert states["processing"] == 0
    dead = sql(
        "SELECT task, dead_reason, attempts, max_attempts FROM workerpool_jobs WHERE state = 'dead'"
    )
    assert {task for task, *_ in dead} == {"send_welcome"}, dead
    abandoned = [row for row in dead if row[1] == "abandoned"]
    assert len(abandoned) == 1, f"only the poison message is abandoned: {dead}"
    assert abandoned[0][2] == abandoned[0][3], "the poison ran exactly max_attempts times"
    assert all(reason in ("permanent", "abandoned") for _, reason, *_ in dead)
    left = sql(
        "SELECT task, state FROM workerpool_jobs "
        "WHERE state NOT IN ('done', 'dead') AND task <> 'session_cleanup'"
    )
    assert left == [], left
    twice = sql("SELECT idempotency_key FROM demo_inbox GROUP BY 1 HAVING count(*) > 1")
    assert twice == []
    undelivered = sql(
        "SELECT key FROM workerpool_jobs WHERE queue = 'email' AND state = 'done' "
        "AND key NOT IN (SELECT idempotency_key FROM demo_inbox)"
    )
    assert undelivered == []
    deleted = sql("SELECT substr(key, 8)::bigint FROM workerpool_jobs WHERE task = 'delete_user'")
    assert deleted, "the scenario deletes users"
    for (user_id,) in deleted:
        assert sql(f"SELECT count(*) FROM demo_users WHERE id = {user_id}") == [(0,)]
        assert sql(f"SELECT count(*) FROM demo_uploads WHERE user_id = {user_id}") == [(0,)]
    exports = sql(
        "SELECT j.id, count(e.job_id) FROM workerpool_jobs j LEFT JOIN demo_exports e"
        " ON e.job_id = j.id WHERE j.task = 'export_data' GROUP BY j.id"
    )
    assert exports and all(delivered == 1 for _, delivered in exports), exports
    waits = sql(
        "SELECT count(*) FROM workerpool_jobs WHERE task = 'export_data'"
        " AND steps ? 'cool_off' AND steps ? 'collect' AND result ? 'uploads'"  # complete_in's
    )
    assert waits == [(len(exports),)]
    runs = sql(
        "SELECT claimed_at, finished_at FROM workerpool_jobs "
        "WHERE task = 'session_cleanup' AND state = 'done' ORDER BY claimed_at"
    )
    assert runs, "the cron job ran"
    assert all(later[0] >= earlier[1] for earlier, later in itertools.pairwise(runs)), runs


@pytest.mark.timeout(DEMO_BOUND + 30)
def test_demo_runs_end_to_end_and_checks_itself(demo) -> None:
    result, sql = demo("--duration", "3", "--users", "40", "--seed", "7")
    assert_passed(result)
    assert_database_agrees(sql)


@pytest.mark.timeout(DEMO_BOUND + 30)
def test_demo_with_chaos_loses_nothing(demo) -> None:
    result, sql = demo(
        "--duration", "6", "--users", "40", "--seed", "11", "--chaos", "--chaos-every", "1"
    )
    assert_passed(result)
    killed = re.search(r"chaos: (\d+) worker processes killed with SIGKILL", result.stdout)
    assert killed and int(killed.group(1)) >= 2, result.stdout
    assert_database_agrees(sql)


@pytest.mark.parametrize(
    "args, message",
    [
        (("--users", "3"), "--users must be within"),
        (("--database", "Robert'); DROP"), "--database"),
        (("--duration", "0"), "--duration must be within"),
    ],
)
def test_bad_options_are_refused_before_anything_is_written(demo, args, message) -> None:
    result, sql = demo(*args)
    assert result.returncode == 1
    assert result.stderr.startswith("workerpool demo: ") and message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    with pytest.raises(psycopg.OperationalError):
        sql("SELECT 1")  # its database was never created


def test_the_wheel_lists_every_package() -> None:
    """setuptools ships only the packages pyproject names. A subpackage left out imports from a
    checkout but is missing from the wheel, where `workerpool demo` must run too."""
    setup = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(setup["packages"])
    sources = {
        "workerpool": "workerpool",
        "workerpool_demo": "workerpool_demo",
        **setup.get("package-dir", {}),
    }
    needed = set()
    for package, directory in sources.items():
        for path in (ROOT / directory).rglob("*.py"):
            parts = path.parent.relative_to(ROOT / directory).parts
            if "__pycache__" not in parts:
                needed.add(".".join((package, *parts)))
    assert needed <= listed, f"add to [tool.setuptools] packages: {sorted(needed - listed)}"
