"""The default dashboard (`workerpool web`: loopback, no token) against a real headless Chromium
used as an attacker would: a name of another site resolving to 127.0.0.1 (DNS rebinding, made
with Chromium's ``--host-resolver-rules``), and a page on another port of the same host setting
the dashboard's cookies (cookies are not kept apart by port)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.apps import web
from tests.helpers.browser import chromium
from tests.helpers.web import served

FORGED = "Session expired: sign in again at evil.example"


@pytest.fixture
def rebinding_browser() -> Iterator[object]:
    """Headless Chromium in which evil.example resolves to 127.0.0.1."""
    with chromium("--host-resolver-rules=MAP evil.example 127.0.0.1") as driver:
        yield driver


class CookieSetter(BaseHTTPRequestHandler):
    """Another site on another port of 127.0.0.1: it sets the dashboard's notice cookie."""

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header(
            "Set-Cookie", "workerpool_notice=" + FORGED.replace(" ", "%20") + "; Path=/"
        )
        self.send_header("Content-Type", "text/html")
        self.end_headers()
        self.wfile.write(b"<p>hello</p>")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def other_port() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), CookieSetter)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_rebound_name_reads_no_payload_and_pauses_no_queue(
    db_url, sql, dashboard, rebinding_browser
):
    from selenium.webdriver.common.by import By

    pool = web.build(db_url)
    try:
        job_id = pool.enqueue("ok", {"secret": "payload-7b3c"}, delay=3600)
    finally:
        pool.dispose()
    port = dashboard.rsplit(":", 1)[1]
    rebinding_browser.get(f"http://evil.example:{port}/jobs/{job_id}")
    body = rebinding_browser.find_element(By.TAG_NAME, "body").text
    assert "payload-7b3c" not in body and "loopback names only" in body, body
    # the attacker's page posts the pause form to its own (rebound) origin
    status = rebinding_browser.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "fetch('/queues/email/pause', {method: 'POST'}).then(r => done(r.status))"
    )
    assert status == 400
    assert sql("SELECT count(*) FROM workerpool_audit")[0][0] == 0
    assert sql("SELECT count(*) FROM workerpool_queues WHERE paused")[0][0] == 0
    rebinding_browser.get(f"{dashboard}/jobs/{job_id}")  # the dashboard's own name still works
    assert "payload-7b3c" in rebinding_browser.find_element(By.TAG_NAME, "body").text


def test_a_page_on_another_port_cannot_set_the_notice(dashboard, other_port, rebinding_browser):
    from selenium.webdriver.common.by import By

    rebinding_browser.get(other_port + "/")
    assert {c["name"] for c in rebinding_browser.get_cookies()} >= {"workerpool_notice"}
    rebinding_browser.get(dashboard + "/")
    assert "Overview" in rebinding_browser.find_element(By.TAG_NAME, "h1").text
    assert rebinding_browser.find_elements(By.ID, "notice") == []
    assert "evil.example" not in rebinding_browser.find_element(By.TAG_NAME, "body").text


def status_for_host(base: str, host: str) -> int:
    import http.client
    from urllib.parse import urlsplit

    parts = urlsplit(base)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    try:
        conn.request("GET", "/", headers={"Host": host})
        return conn.getresponse().status
    finally:
        conn.close()


def test_the_command_serves_the_hosts_it_is_told_and_no_other(db_url, tmp_path):
    with served(db_url, tmp_path / "web.log", "--allow-host", "jobs.internal") as base:
        assert status_for_host(base, "jobs.internal:8080") == 200
        assert status_for_host(base, "localhost") == 200
        assert status_for_host(base, "evil.example") == 400
