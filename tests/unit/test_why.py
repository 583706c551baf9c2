"""`workerpool.ops.why`: each check reads the facts around one job; a new cause is one more
check."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

from workerpool.ops import why

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def job(**fields):
    row = {
        "id": 1,
        "queue": "email",
        "task": "send",
        "state": "pending",
        "dead_reason": None,
        "run_at": NOW,
        "attempts": 0,
        "max_attempts": 5,
        "payload_version": 1,
        "claimed_by": None,
        "claimed_at": None,
    }
    return SimpleNamespace(**{**row, **fields})


def worker(tasks, age=1.0, queue="email"):
    return SimpleNamespace(queue=queue, tasks=tasks, age=age)


def codes(facts, checks=None):
    return [reason.code for reason in why.reasons(facts, checks)]


def test_a_due_job_with_a_live_worker_that_knows_it_has_no_reason():
    assert codes(why.Facts(job(), NOW, workers=[worker({"send": 1})])) == []


def test_each_cause_is_named():
    live = [worker({"send": 1})]
    paused = SimpleNamespace(paused=True, paused_at=NOW, paused_by="ops")
    assert codes(why.Facts(job(run_at=NOW + timedelta(hours=1)), NOW, workers=live)) == [
        "scheduled"
    ]
    assert codes(why.Facts(job(), NOW, paused, live)) == ["paused"]
    assert codes(why.Facts(job(), NOW, workers=[worker({"send": 1}, age=600)])) == ["no_worker"]
    assert codes(why.Facts(job(), NOW, workers=[worker({"other": 1})])) == ["unknown_task"]
    assert codes(why.Facts(job(payload_version=2), NOW, workers=live)) == ["payload_version"]
    assert codes(why.Facts(job(), NOW, workers=live, known={"other": 1})) == ["unknown_task"]
    running = job(state="processing", claimed_by="h:1:a", claimed_at=NOW - timedelta(seconds=5))
    holder = SimpleNamespace(id="h:1:a", queue="email", tasks={"send": 1}, age=2.0)
    reasons = why.reasons(why.Facts(running, NOW, workers=[holder]))
    assert [r.code for r in reasons] == ["running"] and "worker h:1:a since 5.0s ago" in reasons[
        0
    ].text
    assert codes(why.Facts(running, NOW, workers=live)) == ["running", "orphaned"]
    silent = SimpleNamespace(id="h:1:a", queue="email", tasks={}, age=300.0)
    orphaned = why.reasons(why.Facts(running, NOW, workers=[silent]))[1]
    assert "was last seen 5.0m ago" in orphaned.text
    assert codes(why.Facts(job(state="dead", dead_reason="permanent"), NOW)) == ["finished"]


def test_with_the_app_known_a_queue_no_live_worker_serves_is_still_named():
    """The app says which tasks exist; only the live workers say whether anything runs them."""
    known = {"send": 1}
    assert codes(why.Facts(job(), NOW, known=known)) == ["no_worker"]
    assert codes(why.Facts(job(), NOW, workers=[worker({"send": 1}, age=600)], known=known)) == [
        "no_worker"
    ]
    assert codes(why.Facts(job(), NOW, workers=[worker({"send": 1})], known=known)) == []


def test_a_new_cause_is_one_more_check():
    def concurrency_limit(facts):
        return why.Reason("concurrency_limit", "its concurrency key is at its limit")

    facts = why.Facts(job(), NOW, workers=[worker({"send": 1})])
    assert codes(facts, [*why.CHECKS, concurrency_limit]) == ["concurrency_limit"]
