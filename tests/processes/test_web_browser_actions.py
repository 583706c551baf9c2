"""The job page's actions in a real browser (`workerpool web` as a subprocess, headless
Chromium): cancel a running job after a page says what may happen to the jobs sharing its
process, run a scheduled job now, send the signal a waiting job waits for, purge a dead job
after a dry run; each in the audit trail.

Skipped locally without chromium and chromedriver, a failure in CI (as test_web_browser.py).
"""

from __future__ import annotations

from tests.apps import web
from tests.helpers.db import job_state
from tests.helpers.web import dead_jobs


def seed(db_url, sql) -> dict:
    pool = web.build(db_url)
    running, neighbour = (pool.enqueue("ok", {"n": n}) for n in range(2))
    sql(
        "UPDATE workerpool_jobs SET state = 'processing', attempts = 1, claimed_by = 'h:7:a',"
        " claimed_at = now(), started_at = now() WHERE id IN (%s, %s)",
        running,
        neighbour,
    )
    later = pool.enqueue("ok", {"n": 3}, delay=3600)
    waiting = pool.enqueue("ok", {"n": 4})
    sql(
        "UPDATE workerpool_jobs SET state = 'waiting', signal = 'approved:7' WHERE id = %s", waiting
    )
    dead = dead_jobs(pool, 1)[0]
    cancelled = pool.enqueue("ok", {"n": 5}, delay=3600)
    pool.cancel([cancelled])
    pool.dispose()
    return {
        "running": running,
        "neighbour": neighbour,
        "later": later,
        "waiting": waiting,
        "dead": dead,
        "cancelled": cancelled,
    }


def test_an_operator_cancels_runs_now_signals_and_purges_from_a_job_page(
    db_url, sql, dashboard, browser, artifacts
):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    seeded = seed(db_url, sql)
    wait = WebDriverWait(browser, 15)

    def notice() -> str:
        wait.until(lambda d: d.find_elements(By.ID, "notice"))
        return browser.find_element(By.ID, "notice").text

    browser.get(f"{dashboard}/jobs/{seeded['running']}")
    browser.find_element(By.ID, "cancel").click()
    wait.until(lambda d: d.find_elements(By.ID, "cancel-effects"))
    effects = browser.find_element(By.ID, "cancel-effects").text
    assert "recycled once its other jobs finish" in effects
    assert f"1 other job now, each left to finish first: {seeded['neighbour']} (ok)" in effects
    assert job_state(sql, seeded["running"]) == "processing"  # nothing asked yet
    browser.save_screenshot(str(artifacts / "web-cancel-running-confirm.png"))
    browser.find_element(By.ID, "confirm-cancel").click()
    assert f"job {seeded['running']}: asked to stop" in notice()
    assert sql(
        "SELECT cancel_request IS NOT NULL FROM workerpool_jobs WHERE id = %s", seeded["running"]
    ) == [(True,)]

    browser.get(f"{dashboard}/jobs/{seeded['later']}")
    browser.find_element(By.ID, "run-now").click()
    assert f"job {seeded['later']} is due now (it was scheduled for" in notice()
    assert sql("SELECT run_at <= now() FROM workerpool_jobs WHERE id = %s", seeded["later"]) == [
        (True,)
    ]
    assert not browser.find_elements(By.ID, "run-now")  # due now: nothing to bring forward

    browser.get(f"{dashboard}/jobs/{seeded['waiting']}")
    browser.find_element(By.ID, "signal-payload").send_keys('{"by": "ops"}')
    browser.find_element(By.ID, "send-signal").click()
    assert "signal 'approved:7' sent" in notice()
    assert job_state(sql, seeded["waiting"]) == "pending"  # woken
    assert sql("SELECT payload FROM workerpool_signals WHERE name = 'approved:7'") == [
        ({"by": "ops"},)
    ]

    browser.get(f"{dashboard}/jobs/{seeded['dead']}")
    browser.find_element(By.ID, "purge").click()
    wait.until(lambda d: d.find_elements(By.ID, "confirm"))
    assert "Dry run: purge 1 dead job" in browser.find_element(By.TAG_NAME, "h1").text
    assert job_state(sql, seeded["dead"]) == "dead"  # the dry run changed nothing
    browser.find_element(By.CSS_SELECTOR, "#confirm button").click()
    assert f"purged job {seeded['dead']}" in notice()
    assert sql("SELECT count(*) FROM workerpool_jobs WHERE id = %s", seeded["dead"]) == [(0,)]

    browser.get(f"{dashboard}/jobs/{seeded['cancelled']}")
    browser.find_element(By.ID, "retry").click()
    assert f"retried job {seeded['cancelled']}: it is pending again" in notice()
    assert job_state(sql, seeded["cancelled"]) == "pending"
    assert "after it was cancelled" in browser.find_element(By.CLASS_NAME, "replay").text

    pool = web.build(db_url)
    graph = pool.workflow()
    graph.step("fetch", "ok", {})
    graph.step("parse", "ok", {}, after=["fetch"])
    flow = graph.run()
    pool.dispose()
    browser.get(f"{dashboard}/workflows/{flow['fetch']}")
    browser.find_element(By.ID, "act-on-all-submit").click()  # cancel, the default
    wait.until(lambda d: d.find_elements(By.ID, "bulk-all-plan"))
    assert (
        "Dry run: cancel 2 jobs matching the filter" in browser.find_element(By.TAG_NAME, "h1").text
    )
    browser.find_element(By.ID, "confirm-bulk-all").click()
    assert "2 jobs cancelled" in notice()
    assert [job_state(sql, i) for i in flow.values()] == ["cancelled", "cancelled"]

    audited = [row[0] for row in sql("SELECT action FROM workerpool_audit ORDER BY id")]
    assert audited == ["cancel", "cancel", "run_now", "signal", "purge", "retry", "cancel"]
    browser.get(f"{dashboard}/audit")
    assert "run_now" in browser.page_source and "signal approved:7" in browser.page_source
    errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert errors == []
