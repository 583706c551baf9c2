"""Results and batches behind a real PgBouncer in transaction pooling mode: no LISTEN there, so
``pool.result`` finds the result by polling, and a batch's callback fires from its last
member's outcome, through the bouncer like everything else."""

from __future__ import annotations

from tests.apps import bouncer as app
from tests.helpers.pgbouncer import BROKEN
from tests.helpers.waiting import wait_until
from workerpool import WorkerPool
from workerpool.process import settings


def test_results_and_a_batch_through_pgbouncer(through_bouncer, bouncer, db_url, sql, monkeypatch):
    # the test's own pool too: no LISTEN, no prepare
    monkeypatch.setenv(settings.PGBOUNCER_ENV, "1")
    sql(app.LEDGER)
    sup = through_bouncer(pgbouncer_mode=True)
    sup.wait_running("work")
    pool = WorkerPool(bouncer.url(db_url))
    pool.queue("work")
    pool.task(queue="work", name="double")(app.double)
    try:
        job_id = pool.enqueue("double", {"n": 21})
        assert pool.result(job_id, timeout=30) == 42
        with pool.batch(on_complete="double", payload={"n": 50}) as batch:
            batch.enqueue_many([("double", {"n": n}) for n in range(5)])
        wait_until(
            lambda: pool.batch_status(batch.id).finished,
            30,
            message=f"the batch finished\n{sup.log()[-2000:]}",
        )
        status = pool.batch_status(batch.id)
        assert (status.done, status.fired_by) == (5, "outcome")
        assert pool.result(status.callback_ids[0], timeout=30) == 100
        assert sorted(m.result for m in pool.batch_results(batch.id)) == [0, 2, 4, 6, 8]
    finally:
        pool.dispose()
    assert sql("SELECT count(*) FROM workerpool_waiters") == [(0,)]  # it listed itself nowhere
    assert BROKEN not in sup.log() and "database_error" not in sup.log(), sup.log()[-3000:]
