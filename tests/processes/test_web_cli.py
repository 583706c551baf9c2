"""`workerpool web` as a user runs it: a real server process, its flags and its token."""

from __future__ import annotations

import urllib.error
import urllib.request

from tests.helpers.web import served

TOKEN = "process-test-token-0123456789"


def fetch(url: str, *, method: str = "GET", headers: dict[str, str] | None = None):
    request = urllib.request.Request(
        url, method=method, headers=headers or {}, data=b"" if method == "POST" else None
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def test_read_only_serves_the_pages_and_no_action(db_url, tmp_path):
    with served(db_url, tmp_path / "web.log", "--read-only") as base:
        status, page = fetch(base + "/")
        assert status == 200 and "read-only" in page and 'method="post"' not in page
        for path in ("/queues/email/pause", "/dead/retry", "/jobs/1/cancel"):
            assert fetch(base + path, method="POST")[0] in (404, 405), path


def test_with_the_token_set_every_request_must_carry_it(db_url, tmp_path):
    with served(db_url, tmp_path / "web.log", env={"WORKERPOOL_WEB_TOKEN": TOKEN}) as base:
        status, _ = fetch(base + "/")
        assert status == 401
        assert fetch(base + "/", headers={"Authorization": f"Bearer {TOKEN}"})[0] == 200
    assert TOKEN not in (tmp_path / "web.log").read_text()
