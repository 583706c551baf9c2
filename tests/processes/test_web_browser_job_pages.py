"""What a job's page shows for a stuck, a running, a finished and a waiting job, read in a real
browser (`workerpool web` as a subprocess, headless Chromium): the lines docs/dashboard.md
quotes under "What a job page shows", with a screenshot of each.

Skipped locally without chromium and chromedriver, a failure in CI (as test_web_browser.py).
"""

from __future__ import annotations

import re

from tests.apps import web
from workerpool.testing import drain


def seed(db_url, sql) -> dict:
    pool = web.build(db_url)
    stuck = pool.enqueue("ok", {})
    sql(
        "UPDATE workerpool_jobs SET queue = 'legacy', run_at = now() - interval '5 minutes'"
        " WHERE id = %s",
        stuck,
    )
    running = pool.enqueue("ok", {})
    sql(
        "INSERT INTO workerpool_workers (id, host, pid, queue, tasks)"
        " VALUES ('web-host:42:abc', 'web-host', 42, 'email', '{\"ok\": 1}')"
    )
    sql(
        "UPDATE workerpool_jobs SET state = 'processing', attempts = 1,"
        " claimed_by = 'web-host:42:abc', run_at = now() - interval '8 minutes',"
        " started_at = now() - interval '6 minutes', claimed_at = now() - interval '1 second'"
        " WHERE id = %s",
        running,
    )
    finished = pool.enqueue("ok", {})
    drain(pool, "email")
    sql(
        "UPDATE workerpool_jobs SET run_at = started_at - interval '90 seconds',"
        " finished_at = started_at + interval '5 seconds' WHERE id = %s",
        finished,
    )
    waiting = pool.enqueue("ok", {})
    sql(
        "UPDATE workerpool_jobs SET state = 'waiting', signal = 'approved:7', steps ="
        " jsonb_build_object('approved:7', jsonb_build_object('kind', 'wait', 'attempt', 1,"
        " 'started_at', now() - interval '2 minutes', 'signal', 'approved:7'))"
        " WHERE id = %s",
        waiting,
    )
    pool.dispose()
    return {"stuck": stuck, "running": running, "finished": finished, "waiting": waiting}


def test_what_a_job_page_shows_stuck_running_finished_and_waiting(
    db_url, sql, dashboard, browser, artifacts
):
    from selenium.webdriver.common.by import By

    seeded = seed(db_url, sql)
    # The pages read now(): on a loaded machine seconds pass between the seed and each page,
    # so a duration may read a tenth of a minute more than was seeded.

    def page(name: str) -> dict[str, str]:
        browser.get(f"{dashboard}/jobs/{seeded[name]}")
        browser.save_screenshot(str(artifacts / f"web-job-{name}.png"))
        seen = {
            key: browser.find_element(By.ID, key).text
            for key in ("job-state", "why", "started", "waited", "ran", "lease")
        }
        seen["live"] = "live" in (
            browser.find_element(By.ID, "job-live").get_attribute("class") or ""
        )
        seen["buttons"] = " ".join(
            b.text for b in browser.find_elements(By.CSS_SELECTOR, ".actions button")
        )
        return seen

    stuck = page("stuck")
    assert stuck["job-state"] == "pending"
    assert "no live worker serves queue legacy" in stuck["why"]
    assert re.fullmatch(r"5\.[0-2]m so far \(due since .+\)", stuck["waited"]), stuck["waited"]
    assert (stuck["started"], stuck["ran"], stuck["lease"]) == ("-", "-", "none")
    assert stuck["live"] and stuck["buttons"] == "Cancel"

    running = page("running")
    assert running["job-state"] == "processing"
    assert re.search(
        r"it is running: the lease is held by worker web-host:42:abc since 6\.[0-2]m"
        r" ago \(attempt 1 of \d+\)",
        running["why"],
    ), running["why"]
    assert running["started"] == "6 min ago"
    assert running["waited"] == "2.0m from due to its start"
    assert re.fullmatch(r"for 6\.[0-2]m so far", running["ran"]), running["ran"]
    assert re.search(
        r"since .+ \(6\.[0-2]m ago\), last renewed \d+\.\ds ago; that worker \(host"
        r" web-host, pid 42\) was last seen",
        running["lease"],
    ), running["lease"]
    assert running["live"] and running["buttons"] == "Cancel…"

    finished = page("finished")
    assert finished["job-state"] == "done"
    assert "it is done: it will not run again" in finished["why"]
    assert (finished["waited"], finished["ran"]) == ("90.0s from due to its start", "5.0s")
    assert finished["lease"].startswith("none (last held by")
    assert not finished["live"] and finished["buttons"] == "Rerun"  # admins may run it again

    waiting = page("waiting")
    assert waiting["job-state"] == "waiting"
    assert re.search(
        r"it waits for signal 'approved:7' for 2\.[0-2]m, with no deadline", waiting["why"]
    ), waiting["why"]
    assert (waiting["started"], waiting["waited"], waiting["ran"]) == ("-", "-", "-")
    assert waiting["live"] and waiting["buttons"] == "Send signal approved:7 Cancel"
