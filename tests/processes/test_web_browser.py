"""The dashboard in a real browser: `workerpool web` as a subprocess, headless Chromium driven
by Selenium through Debian's chromedriver.

The browser, the served dashboard and where screenshots go: ``tests/helpers/browser.py``.
"""

from __future__ import annotations

from tests.apps import web
from tests.helpers.web import dead_jobs
from workerpool.testing import drain


def test_an_operator_finds_a_dead_job_retries_it_and_pauses_a_queue(
    db_url, dashboard, browser, artifacts
):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    pool = web.build(db_url)
    for i in range(6):
        pool.enqueue("ok", {"n": i})
    drain(pool, "email")
    dead_id, other_id = dead_jobs(pool, 2)
    pool.enqueue("ok", {"later": True}, delay=3600)
    pool.dispose()
    wait = WebDriverWait(browser, 15)

    browser.get(dashboard + "/")
    assert "Overview" in browser.find_element(By.TAG_NAME, "h1").text
    assert browser.find_element(By.ID, "queue-email").is_displayed()
    browser.save_screenshot(str(artifacts / "web-overview.png"))

    browser.find_element(By.ID, "nav-jobs").click()
    wait.until(lambda d: d.execute_script("return typeof htmx") == "object")  # served locally
    browser.execute_script("window.sameDocument = true")
    Select(browser.find_element(By.ID, "filter-state")).select_by_value("dead")
    browser.find_element(By.ID, "filter-apply").click()
    wait.until(
        lambda d: (
            "state=dead" in d.current_url and len(d.find_elements(By.CSS_SELECTOR, "tr.job")) == 2
        )
    )
    assert browser.execute_script("return window.sameDocument") is True  # htmx swapped the table
    states = {e.text for e in browser.find_elements(By.CSS_SELECTOR, "tr.job .state")}
    assert states == {"dead"}
    browser.save_screenshot(str(artifacts / "web-dead-filter.png"))

    browser.find_element(By.CSS_SELECTOR, f'tr.job[data-id="{dead_id}"] a.job-link').click()
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "pre.traceback"))
    traceback = browser.find_element(By.CSS_SELECTOR, "pre.traceback").text
    assert "Traceback (most recent call last)" in traceback
    assert f"RuntimeError: the mail server said no {web.SCRIPT}" in traceback  # text, not run
    browser.save_screenshot(str(artifacts / "web-job.png"))

    browser.find_element(By.ID, "retry").click()
    wait.until(lambda d: d.find_elements(By.ID, "notice"))
    assert f"replayed job {dead_id}" in browser.find_element(By.ID, "notice").text
    listed = {e.get_attribute("data-id") for e in browser.find_elements(By.CSS_SELECTOR, "tr.job")}
    assert str(dead_id) not in listed and str(other_id) in listed
    browser.save_screenshot(str(artifacts / "web-after-retry.png"))

    browser.find_element(By.ID, "nav-overview").click()
    browser.find_element(By.CSS_SELECTOR, "#queue-email button.pause").click()
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#queue-email .badge.paused"))
    assert "queue email paused" in browser.find_element(By.ID, "notice").text
    browser.save_screenshot(str(artifacts / "web-paused.png"))
    errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert errors == []  # no blocked script or style (the CSP), no missing file, no failed call


def test_an_operator_follows_a_job_to_its_workflow_graph_and_back(
    db_url, dashboard, browser, artifacts
):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    pool = web.build(db_url)
    graph = pool.workflow()
    graph.step("fetch", "ok", {})
    graph.step("parse", "ok", {}, after=["fetch"])
    graph.step("fail", "boom", {}, after=["fetch"])
    graph.step("store", "ok", {}, after=["parse", "fail"])
    ids = graph.run()
    drain(pool, "email")
    pool.dispose()
    wait = WebDriverWait(browser, 15)

    browser.get(f"{dashboard}/jobs/{ids['parse']}")
    browser.find_element(By.CSS_SELECTOR, "#workflow a").click()
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "svg.workflow"))
    svg = browser.find_element(By.CSS_SELECTOR, "svg.workflow")
    assert svg.size["width"] > 300 and svg.size["height"] > 40  # drawn, not collapsed
    store = browser.find_element(By.CSS_SELECTOR, f"#node-{ids['store']} rect")
    assert "cancelled" in store.get_attribute("class")
    colours = {
        browser.execute_script("return getComputedStyle(arguments[0]).fill", rect)
        for rect in browser.find_elements(By.CSS_SELECTOR, "svg.workflow rect.node")
    }
    assert len(colours) == 3  # done, dead and cancelled nodes each have their colour
    browser.save_screenshot(str(artifacts / "web-workflow.png"))
    browser.find_element(By.CSS_SELECTOR, f"#node-{ids['fail']}").click()
    wait.until(lambda d: d.find_elements(By.ID, "job-state"))
    assert browser.find_element(By.ID, "job-state").text == "dead"
    errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert errors == []
