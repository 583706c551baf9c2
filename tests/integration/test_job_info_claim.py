"""``pool.job`` reads what a job was enqueued with (payload, priority) and its latest claim
(who, when): what a framework's result (workerpool.contrib.django) is built from."""

from __future__ import annotations

from workerpool import WorkerPool, testing


def test_job_info_has_the_payload_priority_and_latest_claim(db_url):
    app = WorkerPool(db_url)

    @app.task(queue="q")
    def echo(job):
        return job.payload["n"]

    try:
        job_id = app.enqueue(echo, {"n": 7}, priority=-42)
        before = app.job(job_id)
        assert (before.payload, before.priority, before.claimed_by, before.claimed_at) == (
            {"n": 7},
            -42,
            None,
            None,
        )
        testing.drain(app)
        after = app.job(job_id)
        assert (after.state, after.result, after.payload, after.priority) == (
            "done",
            7,
            {"n": 7},
            -42,
        )
        assert after.claimed_by  # the worker that ran it
        assert before.created_at <= after.claimed_at <= after.finished_at
    finally:
        app.dispose()
