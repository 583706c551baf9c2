"""The dashboard under test: a TestClient on ``workerpool.web.app`` and its forms' tokens."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from starlette.testclient import TestClient

from tests.helpers.paths import ROOT
from tests.helpers.processes import free_port, kill_group
from tests.helpers.waiting import wait_until
from workerpool.testing import drain

TOKEN = re.compile(r'name="csrf_token" value="([0-9a-f]+)"')


def client(pool: Any, **options: Any) -> TestClient:
    from workerpool.web import app

    options.setdefault("token", None)
    # a loopback name: with no token the dashboard serves no other Host
    return TestClient(
        app(pool, **options), raise_server_exceptions=False, base_url="http://localhost"
    )


def csrf(http: TestClient, path: str = "/") -> str:
    """The CSRF token of a page's forms (the page also sets the cookie it is checked against)."""
    page = http.get(path)
    found = TOKEN.search(page.text)
    assert found, f"no form with a CSRF token on {path}: {page.status_code} {page.text[:300]}"
    return found[1]


def post(http: TestClient, path: str, form: dict[str, str] | None = None, page: str = "/") -> Any:
    """POST ``form`` with a valid token, not following the redirect."""
    data = {"csrf_token": csrf(http, page), **(form or {})}
    return http.post(path, data=data, follow_redirects=False)


def dead_jobs(pool: Any, count: int = 1, task: str = "boom", **payload: Any) -> list[int]:
    """``count`` jobs of ``task`` run once and dead, each with a real traceback."""
    ids = [pool.enqueue(task, {"n": i, **payload}) for i in range(count)]
    drain(pool, pool.registry.task_spec(task).queue)
    return ids


@contextmanager
def served(
    db_url: Any, log_path: Path, *args: str, env: dict[str, str] | None = None
) -> Iterator[str]:
    """`workerpool web tests.apps.web:pool ARGS` as a real process on a free port; its base URL.
    Stopped with SIGTERM afterwards (its whole session)."""

    port = free_port()
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("WORKERPOOL_")}
    full_env.update(
        {
            "WORKERPOOL_DATABASE_URL": db_url.render_as_string(hide_password=False),
            "PYTHONPATH": str(ROOT),
            **(env or {}),
        }
    )
    with log_path.open("wb") as log_file:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "workerpool",
                "web",
                "tests.apps.web:pool",
                "--port",
                str(port),
                *args,
            ],
            env=full_env,
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=log_file,
            start_new_session=True,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until(
            lambda: _listening(port) or proc.poll() is not None,
            30,
            message="the dashboard listening",
        )
        assert proc.poll() is None, log_path.read_text()
        yield base
    finally:
        kill_group(proc, signal.SIGTERM)
        proc.wait(10)


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False
