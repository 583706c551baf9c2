"""Headless Chromium (Debian's, through its chromedriver) for the dashboard's browser tests,
and their fixtures: the served dashboard, the browser, where screenshots go.

CI (``CI`` set) must have Debian's ``chromium`` and ``chromium-driver`` (``.ci/run`` installs
them): there a missing binary fails the test. Locally it is skipped with the reason. Screenshots
go to ``tests/artifacts/`` (git-ignored; ``$WORKERPOOL_TEST_ARTIFACTS`` elsewhere).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.helpers.paths import ROOT
from tests.helpers.web import served

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-dev-shm-usage",
    "--disable-gpu",
    "--no-first-run",
    "--disable-extensions",
)


def browser_binaries() -> tuple[str, str]:
    found = [
        shutil.which(p) or (p if os.access(p, os.X_OK) else None) for p in (CHROMIUM, CHROMEDRIVER)
    ]
    if all(found):
        return CHROMIUM, CHROMEDRIVER
    reason = "chromium or chromedriver not installed (apt-get install chromium chromium-driver)"
    if os.environ.get("CI"):
        pytest.fail(f"{reason}: CI must run this test (.ci/run installs them)")
    pytest.skip(reason)


@contextmanager
def chromium(*flags: str, console: bool = False) -> Iterator[object]:
    """A headless Chromium driver with :data:`FLAGS` and ``flags``; ``console``: its console
    log kept (CSP reports land there). Quit afterwards."""
    binary, chromedriver = browser_binaries()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = binary
    if console:
        options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    for flag in (*FLAGS, *flags):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(chromedriver), options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def artifacts() -> Path:
    path = Path(os.environ.get("WORKERPOOL_TEST_ARTIFACTS", ROOT / "tests" / "artifacts"))
    path.mkdir(parents=True, exist_ok=True)
    print(f"screenshots: {path}")
    return path


@pytest.fixture
def dashboard(db_url, tmp_path) -> Iterator[str]:
    """`workerpool web tests.apps.web:pool` on a free port; its base URL."""
    with served(db_url, tmp_path / "web.log") as base:
        yield base
    print((tmp_path / "web.log").read_text()[-3000:])


@pytest.fixture
def browser() -> Iterator[object]:
    with chromium("--window-size=1400,1000", console=True) as driver:
        yield driver
