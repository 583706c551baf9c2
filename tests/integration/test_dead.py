"""The dead-letter queue from Python: list, replay (retry) and purge against real PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from workerpool import Backoff, WorkerPool, testing
from workerpool.model.errors import InvalidFilter, ReplayRefused
from workerpool.ops.dead import DeadFilter, list_dead, parse_duration, parse_since, purge, retry

ROW_COLUMNS = "id, state, dead_reason, attempts, run_at, finished_at, errors, replays, checkpoint"


@pytest.fixture
def app(pool: WorkerPool) -> WorkerPool:
    pool.queue("email")
    pool.queue("billing")

    @pool.task(queue="email", max_attempts=2, backoff=Backoff(base=0, cap=0, jitter=0))
    def send(job):
        if job.payload.get("fail"):
            raise ConnectionError(f"smtp 421 on attempt {job.attempt}")

    @pool.task(queue="billing")
    def charge(job):
        pass

    return pool


def dead_row(
    sql, *, queue="email", task="send", reason="exhausted", age="1 hour", attempts=2
) -> int:
    """A dead row as the runtime leaves it: attempts spent, errors recorded, finished_at set."""
    return sql(
        "INSERT INTO workerpool_jobs (queue, task, state, dead_reason, attempts, max_attempts,"
        " errors, checkpoint, finished_at, created_at) VALUES (%s, %s, 'dead', %s, %s, 5,"
        " jsonb_build_array(jsonb_build_object('attempt', 1, 'type', 'ConnectionError',"
        " 'message', 'smtp 421')), '{\"step\": 2}', now() - %s::interval,"
        " now() - %s::interval - interval '1 minute') RETURNING id",
        queue,
        task,
        reason,
        attempts,
        age,
        age,
    )[0][0]


def rows(sql):
    return sql(f"SELECT {ROW_COLUMNS} FROM workerpool_jobs ORDER BY id")


def test_list_filters_and_orders_most_recent_first(app, sql):
    old = dead_row(sql, age="3 days")
    recent = dead_row(sql, age="10 minutes")
    permanent = dead_row(sql, reason="permanent", age="1 hour")
    billing = dead_row(sql, queue="billing", task="charge", reason="abandoned", age="2 hours")
    sql("INSERT INTO workerpool_jobs (queue, task) VALUES ('email', 'send')")  # not dead

    page = list_dead(app)
    assert [j.id for j in page.jobs] == [recent, permanent, billing, old] and page.total == 4
    email = list_dead(app, DeadFilter(queue="email")).jobs
    assert [j.id for j in email] == [recent, permanent, old]
    assert [j.id for j in list_dead(app, DeadFilter(reason="permanent")).jobs] == [permanent]
    assert [j.id for j in list_dead(app, DeadFilter(task="charge")).jobs] == [billing]
    assert [j.id for j in list_dead(app, DeadFilter(since=timedelta(hours=3))).jobs] == [
        recent,
        permanent,
        billing,
    ]
    page = list_dead(app, DeadFilter(queue="email"), limit=1)
    assert ([j.id for j in page.jobs], page.total) == ([recent], 3)
    job = page.jobs[0]
    assert (job.reason, job.attempts, job.error_count, job.last_error["message"]) == (
        "exhausted",
        2,
        1,
        "smtp 421",
    )
    assert job.to_json()["finished_at"] == job.finished_at.isoformat()


def test_replay_dry_run_changes_nothing(app, sql):
    ids = [dead_row(sql), dead_row(sql, reason="permanent")]
    before = rows(sql)
    result = retry(app, all_matching=True, filters=DeadFilter(queue="email"), dry_run=True)
    assert (result.ids, result.by_task, result.dry_run) == (ids, {"send": 2}, True)
    assert rows(sql) == before


def test_replay_resets_attempts_keeps_history_and_records_lineage(app, sql):
    job_id = dead_row(sql, reason="exhausted", attempts=2)
    untouched = dead_row(sql, queue="billing", task="charge")
    _, _, _, _, _, died_at, errors_before, _, _ = rows(sql)[0]

    result = retry(app, [job_id], by="ops@laptop")
    assert result.ids == [job_id] and result.not_dead == []
    [row] = sql(f"SELECT {ROW_COLUMNS}, now() FROM workerpool_jobs WHERE id = %s", job_id)
    _, state, reason, attempts, run_at, finished_at, errors, replays, checkpoint, now = row
    assert (state, reason, attempts, finished_at) == ("pending", None, 0, None)
    assert run_at <= now and errors == errors_before and checkpoint == {"step": 2}
    [entry] = replays
    assert (entry["attempts"], entry["dead_reason"], entry["by"]) == (2, "exhausted", "ops@laptop")
    assert datetime.fromisoformat(entry["finished_at"]) == died_at
    assert sql("SELECT state FROM workerpool_jobs WHERE id = %s", untouched) == [("dead",)]

    again = retry(app, [job_id])  # replaying twice: the second is a no-op
    assert (again.ids, again.not_dead) == ([], [job_id])
    assert len(sql("SELECT replays FROM workerpool_jobs WHERE id = %s", job_id)[0][0]) == 1


def test_a_replayed_job_runs_again_with_fresh_attempts_and_its_lineage_grows(app, sql):
    job_id = app.enqueue("send", {"fail": True})
    assert [state for _, state in testing.drain(app, "email")] == ["failed", "dead"]
    retry(app, [job_id])
    assert [state for _, state in testing.drain(app, "email")] == ["failed", "dead"]
    retry(app, [job_id])
    attempts, errors, replays = sql(
        "SELECT attempts, errors, replays FROM workerpool_jobs WHERE id = %s", job_id
    )[0]
    assert attempts == 0 and len(replays) == 2
    assert [e["message"] for e in errors] == ["smtp 421 on attempt 1", "smtp 421 on attempt 2"] * 2


def test_replay_of_a_task_no_longer_registered_is_refused_and_changes_nothing(app, sql, db_url):
    dead_row(sql)
    gone = dead_row(sql, task="old_newsletter")
    before = rows(sql)
    with pytest.raises(ReplayRefused, match=r"task 'old_newsletter' \(1 jobs\) is no longer"):
        retry(app, all_matching=True)
    assert rows(sql) == before
    assert retry(app, all_matching=True, filters=DeadFilter(task="send")).ids != []
    assert retry(app, [gone], known_tasks={"old_newsletter"}).ids == [gone]


def test_replay_without_the_app_trusts_only_live_workers(db_url, sql):
    bare = WorkerPool(db_url)  # e.g. `workerpool dead retry` without --app
    job_id = dead_row(sql)
    with pytest.raises(ReplayRefused, match="no live worker"):
        retry(bare, [job_id])
    sql(
        "INSERT INTO workerpool_workers (id, host, pid, queue, tasks)"
        " VALUES ('h:1:x', 'h', 1, 'email', '{\"send\": 1}')"
    )
    assert retry(bare, [job_id]).ids == [job_id]
    bare.dispose()


def test_bulk_replay_and_purge_go_in_batches_with_progress(app, sql):
    sql(
        "INSERT INTO workerpool_jobs (queue, task, state, dead_reason, attempts, finished_at)"
        " SELECT 'email', 'send', 'dead', 'exhausted', 5, now() - interval '40 days'"
        " FROM generate_series(1, 2500)"
    )
    calls: list[tuple[int, int]] = []
    result = retry(app, all_matching=True, progress=lambda *a: calls.append(a), batch=1000)
    assert len(result.ids) == 2500 and calls == [(1000, 2500), (2000, 2500), (2500, 2500)]
    assert sql(
        "SELECT count(*) FROM workerpool_jobs WHERE state = 'pending' AND attempts = 0"
        " AND jsonb_array_length(replays) = 1"
    ) == [(2500,)]


def test_purge_deletes_only_dead_rows_older_than_the_cutoff(app, sql):
    old = dead_row(sql, age="40 days")
    old_billing = dead_row(sql, queue="billing", task="charge", age="40 days")
    recent = dead_row(sql, age="2 days")
    sql(
        "INSERT INTO workerpool_jobs (queue, task, state, finished_at)"
        " VALUES ('email', 'send', 'done', now() - interval '60 days')"
    )
    assert purge(app, timedelta(days=30), dry_run=True).count == 2
    assert sql("SELECT count(*) FROM workerpool_jobs") == [(4,)]
    assert purge(app, timedelta(days=30), DeadFilter(queue="billing")).count == 1
    assert purge(app, 30 * 86400).count == 1
    remaining = {row[0]: row[1] for row in sql("SELECT id, state FROM workerpool_jobs")}
    assert old not in remaining and old_billing not in remaining
    assert remaining[recent] == "dead" and sorted(remaining.values()) == ["dead", "done"]


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: DeadFilter(reason="tired"), "reason must be one of exhausted, permanent, aband"),
        (lambda: DeadFilter(since=datetime(2024, 1, 1)), "since must be timezone-aware"),
        (lambda: DeadFilter(ids=(1, -2)), "job ids are positive integers"),
        (lambda: DeadFilter(queue="no such queue!"), "queue name 'no such queue!' is invalid"),
        (lambda: parse_duration("7 days"), "bad duration '7 days'"),
        (lambda: parse_since("yesterday"), "bad --since 'yesterday'"),
        (lambda: parse_since("2024-05-01T10:00:00"), "has no UTC offset"),
    ],
)
def test_bad_filters_are_refused_with_a_named_error(make, message):
    with pytest.raises(InvalidFilter) as caught:
        make()
    assert message in str(caught.value)


def test_retry_needs_ids_or_all_but_not_both(app):
    with pytest.raises(InvalidFilter, match="give job ids, or all_matching"):
        retry(app)
    with pytest.raises(InvalidFilter, match="not both"):
        retry(app, [1], all_matching=True)
    with pytest.raises(InvalidFilter, match="older_than must be >= 0"):
        purge(app, -5)
    with pytest.raises(InvalidFilter, match="finite number of seconds"):
        purge(app, float("nan"))


def test_durations_and_since():
    assert parse_duration("90") == timedelta(seconds=90)
    assert parse_duration("15m") == timedelta(minutes=15)
    assert parse_duration("7d") == timedelta(days=7)
    assert parse_since("2h") == timedelta(hours=2)
    assert parse_since("2024-05-01T10:00:00Z") == datetime(2024, 5, 1, 10, tzinfo=UTC)
