"""workerpool.testing and limits: drain and inline mode run one job at a time and wait on no
limit (docs/testing.md, "Limits")."""

from __future__ import annotations

from workerpool import WorkerPool, testing


def limited(pool: WorkerPool) -> WorkerPool:
    pool.seen = []
    pool.queue("mail", rate_limit="1/h", global_concurrency=1)

    @pool.task(
        queue="mail",
        concurrency_limit=1,
        key_rate_limit="1/h",
        concurrency_key=lambda payload: payload["to"],
    )
    def send(job):
        pool.seen.append(job.payload["n"])

    return pool


def test_drain_runs_every_due_job_whatever_the_limits(pool, sql):
    app = limited(pool)
    ids = [app.enqueue("send", {"to": "ada", "n": n}) for n in range(3)]
    assert testing.drain(app, "mail") == [(job, "done") for job in ids]
    assert app.seen == [0, 1, 2]  # one at a time, in claim order: no limit is passed
    # and it spends nothing of the workers' limits: no start of the rate window counted
    assert sql("SELECT count(*) FROM workerpool_rate_counts") == [(0,)]
    assert sql("SELECT DISTINCT concurrency_key FROM workerpool_jobs") == [("ada",)]


def test_inline_mode_runs_each_job_at_once_whatever_the_limits(pool):
    app = limited(pool)
    with app.testing_mode("inline"):
        for n in range(3):
            app.enqueue("send", {"to": "ada", "n": n})
            assert app.seen == list(range(n + 1))
