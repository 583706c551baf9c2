"""Live job, batch and workflow pages in a real browser (`workerpool web` as a subprocess,
headless Chromium): while what they show can still change they refresh themselves (htmx
polling, no reload), and stop once it has ended; a reason being typed on the job page stays.

Skipped locally without chromium and chromedriver, a failure in CI (as test_web_browser.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tests.apps import web
from workerpool.testing import drain


def test_job_batch_and_workflow_pages_follow_their_jobs_live(db_url, sql, dashboard, browser):
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    pool = web.build(db_url)
    job_id = pool.enqueue("ok", {})
    with pool.batch() as batch:
        members = [batch.enqueue("ok", {"n": n}) for n in range(2)]
    # A live page swaps its part in every 2 s: an element found just before a swap is stale
    # when it is read. The wait then calls its condition again (until its deadline), and
    # finds the element the swap put in.
    wait = WebDriverWait(browser, 20, ignored_exceptions=[StaleElementReferenceException])

    def text(element_id: str) -> str:
        return browser.find_element(By.ID, element_id).text

    def attribute(element_id: str, name: str) -> str | None:
        return browser.find_element(By.ID, element_id).get_attribute(name)

    def now(read: Callable[[], Any]) -> Any:
        """``read()`` as the page shows it now, read again if a swap made its element stale
        (the 1-tuple is true, so an empty text or a missing attribute is an answer too)."""
        return wait.until(lambda d: (read(),))[0]

    browser.get(f"{dashboard}/jobs/{job_id}")
    wait.until(lambda d: d.execute_script("return typeof htmx") == "object")
    browser.execute_script("window.sameDocument = true")
    reason = browser.find_element(By.NAME, "reason")
    reason.send_keys("half typed")
    sql(
        "UPDATE workerpool_jobs SET state = 'processing', attempts = 1, claimed_by = 'h:1:a',"
        " claimed_at = now(), started_at = now() WHERE id = %s",
        job_id,
    )
    wait.until(lambda d: text("job-state") == "processing")
    assert "it is running" in now(lambda: text("why"))  # the head follows too
    sql(
        "UPDATE workerpool_jobs SET state = 'done', finished_at = now(), claimed_by = NULL"
        " WHERE id = %s",
        job_id,
    )
    wait.until(lambda d: text("job-state") == "done")
    assert browser.execute_script("return window.sameDocument") is True  # swapped, not loaded
    assert reason.get_attribute("value") == "half typed"  # the actions were left alone
    assert not now(lambda: attribute("job-live", "hx-trigger"))  # stopped

    browser.get(f"{dashboard}/batches/{batch.id}")
    browser.execute_script("window.sameDocument = true")
    assert "0 of 2 members ended" in now(lambda: text("batch-progress"))
    drain(pool, "email")
    wait.until(lambda d: "2 of 2 members ended" in text("batch-progress"))
    wait.until(lambda d: "Finished" in text("batch-state"))
    assert browser.execute_script("return window.sameDocument") is True
    assert not now(lambda: attribute("batch-live", "hx-trigger"))

    graph = pool.workflow()
    graph.step("fetch", "ok", {})
    graph.step("parse", "ok", {}, after=["fetch"])
    flow = graph.run()
    browser.get(f"{dashboard}/workflows")  # the list leads to it
    browser.find_element(By.CSS_SELECTOR, f"#workflow-{flow['fetch']} a").click()
    WebDriverWait(browser, 15).until(lambda d: d.find_elements(By.ID, "workflow-live"))
    browser.execute_script("window.sameDocument = true")
    assert "pending" in now(lambda: text("workflow-counts"))
    sql(
        "UPDATE workerpool_jobs SET state = 'done', finished_at = now() WHERE id = ANY(%s)",
        list(flow.values()),
    )
    wait.until(lambda d: text("workflow-counts").split() == ["done", "2"])
    assert browser.execute_script("return window.sameDocument") is True
    assert not now(lambda: attribute("workflow-live", "hx-trigger"))
    assert members
    pool.dispose()
    errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert errors == []
