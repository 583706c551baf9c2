"""The jobs list in a real browser (`workerpool web` as a subprocess, headless Chromium through
Selenium): state tabs with counts, the exact time on hover, the tag filter, ticking jobs and
cancelling or replaying them after a dry run, the header's search, and a job's progress, tags
and attempt logs on its page.

Skipped locally without chromium and chromedriver, a failure in CI (as test_web_browser.py).
"""

from __future__ import annotations

import logging
import re

from tests.apps import web
from tests.helpers.db import job_state
from tests.helpers.web import dead_jobs
from workerpool.testing import drain

log = logging.getLogger("imports")


def seed(db_url) -> dict:
    """An import job that ran with progress and logs, three delayed jobs of tenant 8, two
    dead ones and a keyed one."""
    pool = web.build(db_url)
    pool.queue("imports", capture_logs=True)

    @pool.task(queue="imports")
    def load(job):
        log.warning("importing %s rows", job.payload["rows"])
        job.progress({"done": job.payload["rows"], "of": job.payload["rows"]})
        job.progress(1.0)

    seeded = {"import": pool.enqueue("load", {"rows": 40}, tags=["tenant:7", "import"])}
    drain(pool, "imports")
    seeded["later"] = [
        pool.enqueue("ok", {"n": n}, delay=3600, tags=["tenant:8"]) for n in range(3)
    ]
    seeded["dead"] = dead_jobs(pool, 2)
    seeded["keyed"] = pool.enqueue("ok", {}, delay=3600, key="invoice-2026-7")
    pool.dispose()
    return seeded


def rows(driver) -> list[str]:
    # one script: read between two htmx swaps, never from a row a swap just replaced
    return driver.execute_script(
        "return Array.from(document.querySelectorAll('tr.job')).map(e => e.dataset.id)"
    )


def tab_count(driver, state: str) -> str:
    from selenium.webdriver.common.by import By

    return driver.find_element(By.CSS_SELECTOR, f"#tab-{state} .count").text


def test_an_operator_filters_ticks_cancels_replays_and_searches(
    db_url, sql, dashboard, browser, artifacts
):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import Select, WebDriverWait

    seeded = seed(db_url)
    wait = WebDriverWait(browser, 15)

    browser.get(dashboard + "/jobs")
    wait.until(lambda d: d.execute_script("return typeof htmx") == "object")
    assert (
        tab_count(browser, "all"),
        tab_count(browser, "pending"),
        tab_count(browser, "dead"),
        tab_count(browser, "done"),
    ) == ("7", "4", "2", "1")
    run_at, created = browser.find_elements(By.CSS_SELECTOR, "tr.job time.when")[:2]
    assert re.fullmatch(r"in (59|60) min", run_at.text)  # the newest row, due in an hour
    assert re.fullmatch(r"\d+ s ago", created.text), created.text
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\+00:00", created.get_attribute("title"))
    browser.save_screenshot(str(artifacts / "web-jobs-tabs.png"))

    browser.find_element(By.ID, "tab-dead").click()
    wait.until(lambda d: "state=dead" in d.current_url and len(rows(d)) == 2)
    assert "active" in browser.find_element(By.ID, "tab-dead").get_attribute("class")

    browser.get(dashboard + "/jobs")
    browser.execute_script("window.sameDocument = true")
    browser.find_element(By.ID, "filter-tag").send_keys("tenant:8")
    browser.find_element(By.ID, "filter-apply").click()
    wait.until(lambda d: "tag=tenant" in d.current_url and len(rows(d)) == 3)
    assert browser.execute_script("return window.sameDocument") is True  # htmx swapped it
    assert sorted(rows(browser)) == sorted(str(i) for i in seeded["later"])
    # the tabs were swapped with the table: counted and linked under the filter; the address
    # carries the one field set, not every empty one
    assert browser.current_url.endswith("/jobs?tag=tenant%3A8"), browser.current_url
    assert (
        tab_count(browser, "all"),
        tab_count(browser, "pending"),
        tab_count(browser, "dead"),
    ) == ("3", "3", "0")
    assert "tag=tenant%3A8" in browser.find_element(By.ID, "tab-pending").get_attribute("href")
    browser.find_element(By.ID, "select-all").click()
    assert all(box.is_selected() for box in browser.find_elements(By.CSS_SELECTOR, "input.pick"))
    Select(browser.find_element(By.ID, "bulk-action")).select_by_value("cancel")
    browser.find_element(By.ID, "bulk-submit").click()
    wait.until(lambda d: d.find_elements(By.ID, "bulk-plan"))
    assert "Dry run: cancel 3 jobs" in browser.find_element(By.TAG_NAME, "h1").text
    assert [job_state(sql, i) for i in seeded["later"]] == ["pending"] * 3  # nothing yet
    browser.save_screenshot(str(artifacts / "web-jobs-bulk-dry-run.png"))
    browser.find_element(By.ID, "confirm-bulk").click()
    wait.until(lambda d: d.find_elements(By.ID, "notice"))
    assert "3 jobs cancelled" in browser.find_element(By.ID, "notice").text
    assert [job_state(sql, i) for i in seeded["later"]] == ["cancelled"] * 3

    browser.get(dashboard + "/jobs?state=dead")
    for job_id in seeded["dead"]:
        browser.find_element(By.CSS_SELECTOR, f'input.pick[value="{job_id}"]').click()
    Select(browser.find_element(By.ID, "bulk-action")).select_by_value("retry")
    browser.find_element(By.ID, "bulk-submit").click()
    wait.until(lambda d: d.find_elements(By.ID, "bulk-plan"))
    assert "Dry run: replay 2 jobs" in browser.find_element(By.TAG_NAME, "h1").text
    browser.find_element(By.ID, "confirm-bulk").click()
    wait.until(lambda d: d.find_elements(By.ID, "notice"))
    assert [job_state(sql, i) for i in seeded["dead"]] == ["pending", "pending"]

    search = browser.find_element(By.ID, "search-q")
    search.send_keys("invoice-2026-7", Keys.ENTER)
    wait.until(lambda d: "key=invoice-2026-7" in d.current_url)
    assert rows(browser) == [str(seeded["keyed"])]

    browser.find_element(By.ID, "search-q").send_keys(str(seeded["import"]), Keys.ENTER)
    wait.until(lambda d: d.current_url.endswith(f"/jobs/{seeded['import']}"))
    assert browser.find_element(By.ID, "tags").text.split() == ["tenant:7", "import"]
    progress = browser.find_element(By.ID, "progress")
    assert "100% (attempt 1" in progress.text
    assert progress.find_element(By.TAG_NAME, "progress").get_attribute("value") == "1"
    log_text = browser.find_element(By.CSS_SELECTOR, "pre.attempt-log[data-attempt='1']").text
    assert "WARNING imports: importing 40 rows" in log_text
    browser.save_screenshot(str(artifacts / "web-job-progress-logs.png"))

    browser.find_element(By.CSS_SELECTOR, "#tags a.tag").click()  # a tag links its jobs
    wait.until(lambda d: "tag=tenant" in d.current_url and rows(d) == [str(seeded["import"])])
    errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert errors == []  # the select-all script is a file: nothing blocked by the CSP


def test_the_query_box_filters_the_list_its_tabs_and_the_action_on_every_match(
    db_url, sql, dashboard, browser
):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait

    seeded = seed(db_url)
    wait = WebDriverWait(browser, 15)
    browser.get(dashboard + "/jobs")
    wait.until(lambda d: d.execute_script("return typeof htmx") == "object")
    browser.find_element(By.ID, "filter-q").send_keys("args.n:1 tag:tenant:8")
    browser.find_element(By.ID, "filter-apply").click()
    wait.until(lambda d: rows(d) == [str(seeded["later"][1])])
    assert (tab_count(browser, "all"), tab_count(browser, "pending")) == ("1", "1")
    assert browser.current_url.endswith("/jobs?q=args.n%3A1+tag%3Atenant%3A8")
    # the action on every match follows the filter the table was swapped for
    browser.find_element(By.ID, "bulk-all-submit").click()
    wait.until(lambda d: d.find_elements(By.ID, "bulk-all-plan"))
    assert (
        "Dry run: cancel 1 job matching the filter" in browser.find_element(By.TAG_NAME, "h1").text
    )
    assert "q=args.n:1 tag:tenant:8" in browser.find_element(By.ID, "bulk-all-filter").text
    browser.find_element(By.ID, "confirm-bulk-all").click()
    wait.until(lambda d: d.find_elements(By.ID, "notice"))
    assert "1 jobs cancelled" in browser.find_element(By.ID, "notice").text
    assert [job_state(sql, i) for i in seeded["later"]] == ["pending", "cancelled", "pending"]
    ActionChains(browser).send_keys(Keys.ESCAPE).perform()
    browser.find_element(By.TAG_NAME, "h1").click()  # out of the field: "/" is the shortcut
    ActionChains(browser).send_keys("/", "args.rows:40", Keys.ENTER).perform()
    wait.until(lambda d: "q=args.rows" in d.current_url and rows(d) == [str(seeded["import"])])
    assert browser.find_element(By.ID, "filter-q").get_attribute("value") == "args.rows:40"
