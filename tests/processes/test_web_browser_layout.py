"""Every dashboard page in a real browser at 400 px wide (no page scrolls sideways: a wide
table scrolls in itself), the dark palette under ``prefers-color-scheme: dark``, and ``/`` to
search.

Skipped locally without chromium and chromedriver, a failure in CI (as test_web_browser.py).
"""

from __future__ import annotations

from tests.apps import web
from tests.helpers.web import dead_jobs

PAGES = ("/", "/jobs", "/dead", "/batches", "/workflows", "/tasks", "/cron", "/audit")
LIGHT, DARK = "rgb(246, 247, 249)", "rgb(17, 24, 39)"


def seed(db_url) -> dict:
    pool = web.build(db_url)
    pool.register_tasks()  # the tasks page shows its table
    dead = dead_jobs(pool, 2)
    keyed = pool.enqueue(
        "ok",
        {"text": "x" * 300},
        delay=3600,
        key="a-rather-long-invoice-key-" + "7" * 60,
        tags=["tenant:8"],
    )
    pool.dispose()
    return {"dead": dead, "keyed": keyed}


def sideways(driver) -> int:
    """How many pixels the page is wider than the window (0: it fits)."""
    return driver.execute_script(
        "return document.documentElement.scrollWidth - document.documentElement.clientWidth"
    )


def test_every_page_fits_400_px_and_wide_tables_scroll_in_themselves(
    db_url, dashboard, browser, artifacts
):
    seeded = seed(db_url)
    browser.set_window_size(400, 900)
    try:
        for path in (*PAGES, f"/jobs/{seeded['dead'][0]}", f"/jobs/{seeded['keyed']}"):
            browser.get(dashboard + path)
            assert sideways(browser) <= 0, f"{path} scrolls sideways by {sideways(browser)} px"
        browser.get(dashboard + "/jobs")
        table = browser.execute_script(
            "return getComputedStyle(document.querySelector('table.jobs')).overflowX"
        )
        assert table == "auto"  # were it wider than the screen, it would scroll in itself
        browser.save_screenshot(str(artifacts / "web-jobs-400px.png"))
    finally:
        browser.set_window_size(1400, 1000)


def test_the_dark_palette_follows_the_system(dashboard, browser, artifacts):
    def background() -> str:
        return browser.execute_script("return getComputedStyle(document.body).backgroundColor")

    browser.get(dashboard + "/jobs")
    assert background() == LIGHT
    browser.execute_cdp_cmd(
        "Emulation.setEmulatedMedia",
        {"features": [{"name": "prefers-color-scheme", "value": "dark"}]},
    )
    try:
        browser.get(dashboard + "/jobs")
        assert background() == DARK
        color = browser.execute_script("return getComputedStyle(document.body).color")
        assert color == "rgb(229, 231, 235)"
        browser.save_screenshot(str(artifacts / "web-jobs-dark.png"))
    finally:
        browser.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": []})


def test_slash_puts_the_cursor_in_the_search_box(db_url, dashboard, browser):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait

    seeded = seed(db_url)
    browser.get(dashboard + "/jobs")
    WebDriverWait(browser, 15).until(
        lambda d: d.execute_script("return document.readyState") == "complete"
    )
    ActionChains(browser).send_keys("/").perform()
    assert browser.switch_to.active_element.get_attribute("id") == "search-q"
    assert browser.find_element(By.ID, "search-q").get_attribute("value") == ""  # no "/" typed
    ActionChains(browser).send_keys(str(seeded["keyed"]), Keys.ENTER).perform()
    WebDriverWait(browser, 15).until(lambda d: d.current_url.endswith(f"/jobs/{seeded['keyed']}"))
    # typing in a field, "/" is a character like any other
    browser.get(dashboard + "/jobs")
    field = browser.find_element(By.ID, "filter-tag")
    field.click()
    field.send_keys("tenant/8")
    assert field.get_attribute("value") == "tenant/8"
    assert browser.switch_to.active_element.get_attribute("id") == "filter-tag"
    errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert errors == []  # the script is a file: nothing blocked by the CSP
