"""The dashboard under test: a TestClient on ``workerpool.web.app`` and its forms' tokens."""

from __future__ import annotations

import re
from typing import Any

from starlette.testclient import TestClient

from workerpool.testing import drain

TOKEN = re.compile(r'name="csrf_token" value="([0-9a-f]+)"')


def client(pool: Any, **options: Any) -> TestClient:
    from workerpool.web import app

    options.setdefault("token", None)
    return TestClient(app(pool, **options), raise_server_exceptions=False)


def csrf(http: TestClient, path: str = "/") -> str:
    """The CSRF token of a page's forms (the page also sets the cookie it is checked against)."""
    page = http.get(path)
    found = TOKEN.search(page.text)
    assert found, f"no form with a CSRF token on {path}: {page.status_code} {page.text[:300]}"
    return found[1]


def post(http: TestClient, path: str, form: dict[str, str] | None = None,
         page: str = "/") -> Any:
    """POST ``form`` with a valid token, not following the redirect."""
    data = {"csrf_token": csrf(http, page), **(form or {})}
    return http.post(path, data=data, follow_redirects=False)


def dead_jobs(pool: Any, count: int = 1, task: str = "boom", **payload: Any) -> list[int]:
    """``count`` jobs of ``task`` run once and dead, each with a real traceback."""
    ids = [pool.enqueue(task, {"n": i, **payload}) for i in range(count)]
    drain(pool, pool.task_spec(task).queue)
    return ids
