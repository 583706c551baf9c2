"""workerpool_demo/session_cleanup.py: the hourly TTL sweep, scheduled by cron and run through."""

from __future__ import annotations

from workerpool import WorkerPool, testing
from workerpool.runtime.maintenance import Maintenance
from workerpool_demo import session_cleanup


def test_hourly_sweep_deletes_only_what_expired(pool: WorkerPool, sql):
    pool.queue("housekeeping")
    session_cleanup.register(pool)
    assert pool.crons["session_cleanup"].expression == "0 * * * *"
    session_cleanup.create_tables(pool.engine)
    sql(
        "INSERT INTO example_sessions (user_id, expires_at) SELECT n, now() - interval '1 minute'"
        " FROM generate_series(1, 1500) AS n"
    )  # more than one batch
    sql("INSERT INTO example_sessions (user_id, expires_at) VALUES (1, now() + interval '1 day')")
    sql(
        "INSERT INTO example_api_tokens (user_id, token_hash, expires_at) VALUES"
        " (1, 'old', now() - interval '1 second'), (2, 'live', now() + interval '1 hour')"
    )
    sql(
        "INSERT INTO example_audit_log (at, event) VALUES"
        " (now() - interval '91 days', 'login'), (now() - interval '89 days', 'login')"
    )

    maintenance = Maintenance(pool.registry, pool.engine, worker_id="m")
    maintenance.run_pass()  # first sight: scheduled for the next full hour
    sql("UPDATE workerpool_cron SET next_tick = date_trunc('hour', now())")  # that hour has come
    maintenance.run_pass()
    [(job_id, state)] = testing.drain(pool, "housekeeping")
    assert state == "done"
    [(checkpoint,)] = sql("SELECT checkpoint FROM workerpool_jobs WHERE id = %s", job_id)
    assert checkpoint == {"done": {"sessions": 1500, "api_tokens": 1, "audit_log": 1}}
    assert sql("SELECT count(*) FROM example_sessions") == [(1,)]
    assert sql("SELECT token_hash FROM example_api_tokens") == [("live",)]
    assert sql("SELECT count(*) FROM example_audit_log") == [(1,)]
