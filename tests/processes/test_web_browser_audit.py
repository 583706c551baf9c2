"""Cron pause and the audit page in a real browser: the dashboard of
``tests/apps/cron_runtime.py`` served by uvicorn as a subprocess, whose user resolver reads a
``who`` cookie (alice: admin, bob: read-only), driven by headless Chromium through Selenium."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator

import pytest

from tests.helpers.paths import ROOT
from tests.helpers.processes import free_port, kill_group
from tests.helpers.waiting import wait_until
from tests.helpers.web import _listening


@pytest.fixture
def dashboard(db_url, tmp_path) -> Iterator[str]:
    """``uvicorn tests.apps.cron_runtime:dashboard`` on a free port; its base URL."""
    port, log_path = free_port(), tmp_path / "web.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("WORKERPOOL_")}
    env.update(
        WORKERPOOL_DATABASE_URL=db_url.render_as_string(hide_password=False), PYTHONPATH=str(ROOT)
    )
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "uvicorn",
                "tests.apps.cron_runtime:dashboard",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
            ],
            env=env,
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
        )
    try:
        wait_until(
            lambda: _listening(port) or proc.poll() is not None,
            30,
            message="the dashboard listening",
        )
        assert proc.poll() is None, log_path.read_text()
        yield f"http://127.0.0.1:{port}"
    finally:
        kill_group(proc, signal.SIGTERM)
        proc.wait(10)
        print(log_path.read_text()[-3000:])


def sign_in(browser, base: str, name: str) -> None:
    browser.get(base + "/static/style.css")  # a page of the origin, to set its cookie on
    browser.delete_all_cookies()
    browser.add_cookie({"name": "who", "value": name, "path": "/"})


def test_an_admin_pauses_a_cron_and_finds_it_on_the_audit_page_a_reader_cannot(
    db_url, dashboard, browser, artifacts, sql
):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    wait = WebDriverWait(browser, 15)
    sign_in(browser, dashboard, "alice")
    browser.get(dashboard + "/")
    browser.find_element(By.ID, "nav-cron").click()
    wait.until(lambda d: d.find_elements(By.ID, "cron-beat"))
    assert browser.find_element(By.ID, "user").text == "alice"
    assert "running" in browser.find_element(By.CSS_SELECTOR, "#cron-beat .state").text
    browser.find_element(By.CSS_SELECTOR, "#cron-beat button.pause").click()
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#cron-beat .badge.paused"))
    assert "cron beat paused" in browser.find_element(By.ID, "notice").text
    assert "by alice" in browser.find_element(By.CSS_SELECTOR, "#cron-beat .state").text
    assert sql("SELECT paused, paused_by FROM workerpool_cron WHERE name = 'beat'") == [
        (True, "alice")
    ]
    browser.save_screenshot(str(artifacts / "web-cron-paused.png"))

    browser.find_element(By.ID, "nav-audit").click()
    Select(browser.find_element(By.NAME, "action")).select_by_value("cron_pause")
    browser.find_element(By.CSS_SELECTOR, "#audit-filters button").click()
    wait.until(lambda d: "action=cron_pause" in d.current_url)
    rows = browser.find_elements(By.CSS_SELECTOR, "table.audit tbody tr")
    assert len(rows) == 1
    assert [
        rows[0].find_element(By.CSS_SELECTOR, f".{c}").text for c in ("actor", "action", "target")
    ] == ["alice", "cron_pause", "cron:beat"]
    browser.save_screenshot(str(artifacts / "web-audit.png"))

    sign_in(browser, dashboard, "bob")
    browser.get(dashboard + "/cron")
    wait.until(lambda d: d.find_elements(By.ID, "cron-beat"))
    assert browser.find_element(By.ID, "user").text == "bob"
    assert browser.find_elements(By.CSS_SELECTOR, "#cron-beat button") == []
    assert browser.find_elements(By.CSS_SELECTOR, "form[method=post]") == []
    browser.save_screenshot(str(artifacts / "web-cron-read-only.png"))
    forged = browser.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "fetch('/cron/beat/resume', {method: 'POST', body: new URLSearchParams({x: '1'})})"
        ".then(r => r.text().then(t => done([r.status, t])));"
    )
    assert forged == [403, "forbidden: bob has read-only access\n"]
    assert sql("SELECT paused FROM workerpool_cron WHERE name = 'beat'") == [(True,)]
    assert sql("SELECT count(*) FROM workerpool_audit")[0][0] == 1
    # the forged POST's refusal is logged as an error, and so is the favicon of the stylesheet
    # opened to set the cookie on (a page has its icon inline)
    errors = [
        e
        for e in browser.get_log("browser")
        if e["level"] == "SEVERE"
        and "403" not in e["message"]
        and "favicon.ico" not in e["message"]
    ]
    assert errors == []
