"""Keys with a scope (forever, live, for a period) and what a second enqueue of a key does."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest

from tests.helpers.waiting import wait_until
from workerpool import DuplicateJob, IdempotencyConflict, InvalidJob, WorkerPool


@pytest.fixture
def app(pool: WorkerPool) -> WorkerPool:
    pool.queue("q")

    @pool.task(queue="q")
    def sync(job):
        return None

    @pool.task(queue="q", concurrency_limit=1)
    def reindex(job):
        return None

    return pool


def finish(sql, job_id: int, state: str = "done") -> None:
    reason = "'exhausted'" if state == "dead" else "NULL"
    sql(
        f"UPDATE workerpool_jobs SET state = %s, dead_reason = {reason}, finished_at = now()"
        " WHERE id = %s",
        state,
        job_id,
    )


def test_a_forever_key_keeps_todays_meaning(app, sql):
    first = app.enqueue("sync", {"id": 1}, key="k")
    finish(sql, first)
    assert app.enqueue("sync", {"id": 1}, key="k") == first
    with pytest.raises(IdempotencyConflict):
        app.enqueue("sync", {"id": 2}, key="k")


@pytest.mark.parametrize("end", ["done", "dead", "cancelled"])
def test_a_live_key_is_free_again_once_its_job_ended(app, sql, end):
    first = app.enqueue("sync", {"id": 1}, key="k", unique="live")
    assert app.enqueue("sync", {"id": 2}, key="k", unique="live") == first  # kept, no error
    finish(sql, first, end)
    second = app.enqueue("sync", {"id": 3}, key="k", unique="live")
    assert second != first
    assert sql("SELECT count(*) FROM workerpool_jobs WHERE key = 'k'") == [(2,)]


def test_two_threads_enqueueing_one_live_key_at_once_make_one_job(app, sql):
    for round_ in range(20):
        start = threading.Barrier(2)
        ids: list[int] = []

        def enqueue(n: int, key: str = f"race:{round_}") -> None:
            start.wait()
            ids.append(app.enqueue("sync", {"id": n}, key=key, unique="live"))

        threads = [threading.Thread(target=enqueue, args=(n,)) for n in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert len(ids) == 2 and ids[0] == ids[1]
    assert sql("SELECT count(*), count(DISTINCT key) FROM workerpool_jobs") == [(20, 20)]


def test_replace_gives_a_pending_holder_the_new_payload_and_run_at(app, sql):
    soon = datetime.now(UTC) + timedelta(seconds=5)
    later = datetime.now(UTC) + timedelta(seconds=60)
    first = app.enqueue(
        "reindex", {"v": 1}, key="reindex:7", unique="live", run_at=soon, on_conflict="replace"
    )
    again = app.enqueue(
        "reindex", {"v": 2}, key="reindex:7", unique="live", run_at=later, on_conflict="replace"
    )
    assert again == first
    [(payload, run_at, count)] = sql(
        "SELECT payload, run_at, (SELECT count(*) FROM workerpool_jobs) FROM workerpool_jobs"
    )
    assert (payload, count) == ({"v": 2}, 1)
    assert abs((run_at - later).total_seconds()) < 0.01  # debounce: moved to the new time


SCOPES = {"forever": {}, "live": {"unique": "live"}, "for a period": {"unique_for": 600}}


@pytest.mark.parametrize("holder_state", ["pending", "processing"])
@pytest.mark.parametrize("on_conflict", ["keep", "replace", "error"])
@pytest.mark.parametrize("scope", list(SCOPES))
def test_every_scope_and_on_conflict_with_a_held_key(app, sql, scope, on_conflict, holder_state):
    """A second enqueue of a held key, with another payload and a later run_at: "replace"
    gives a pending holder both in every scope; "keep" leaves the holder as it is (a key held
    forever names one job, so another payload is a conflict); "error" names the holder. Only a
    replace of a pending holder writes anything."""
    options = SCOPES[scope]
    first = app.enqueue("sync", {"v": 1}, key="d1", delay=600, on_conflict=on_conflict, **options)
    if holder_state == "processing":
        sql(
            "UPDATE workerpool_jobs SET state = 'processing', attempts = 1, claimed_by = 'w',"
            " claimed_at = now()"
        )
    before = sql("SELECT payload, run_at FROM workerpool_jobs")

    def second():
        return app.enqueue(
            "sync", {"v": 2}, key="d1", delay=1200, on_conflict=on_conflict, **options
        )

    if on_conflict == "error":
        with pytest.raises(DuplicateJob):
            second()
    elif on_conflict == "keep" and scope == "forever":
        with pytest.raises(IdempotencyConflict):
            second()
    else:
        assert second() == first
    [(payload, run_at)] = after = sql("SELECT payload, run_at FROM workerpool_jobs")
    if on_conflict == "replace" and holder_state == "pending":
        assert payload == {"v": 2}
        assert run_at > before[0][1]  # moved to the new, later time
    else:
        assert after == before


def test_replace_leaves_a_started_holder_alone(app, sql):
    first = app.enqueue("sync", {"v": 1}, key="k", unique="live", on_conflict="replace")
    sql(
        "UPDATE workerpool_jobs SET state = 'processing', attempts = 1, claimed_by = 'w',"
        " claimed_at = now()"
    )
    assert app.enqueue("sync", {"v": 2}, key="k", unique="live", on_conflict="replace") == first
    assert sql("SELECT payload FROM workerpool_jobs") == [({"v": 1},)]


def test_on_conflict_error_names_the_holder_and_writes_nothing(app, sql):
    first = app.enqueue("sync", {"v": 1}, key="k", unique="live")
    with pytest.raises(DuplicateJob) as raised:
        app.enqueue("sync", {"v": 1}, key="k", unique="live", on_conflict="error")
    assert (raised.value.job_id, raised.value.state) == (first, "pending")
    with app.engine.begin() as conn:  # in the caller's transaction too
        with pytest.raises(DuplicateJob):
            app.enqueue("sync", {"v": 1}, key="k", on_conflict="error", conn=conn)
    assert sql("SELECT count(*) FROM workerpool_jobs") == [(1,)]


def test_unique_for_holds_the_key_for_its_period_then_frees_it(app, sql):
    first = app.enqueue("sync", {"v": 1}, key="k", unique_for=0.5)
    finish(sql, first)  # done, yet held until the period is over
    assert app.enqueue("sync", {"v": 2}, key="k", unique_for=0.5) == first
    second = wait_until(
        lambda: (got := app.enqueue("sync", {"v": 3}, key="k", unique_for=0.5)) != first and got,
        timeout=10,
        message="the key free after its period",
    )
    assert sql("SELECT id, key_scope FROM workerpool_jobs ORDER BY id") == [
        (first, "expired"),
        (second, "for"),
    ]


def test_concurrency_key_from_the_task_function_and_the_option(app, sql):
    app.task(
        lambda job: None,
        queue="q",
        name="per_account",
        concurrency_limit=1,
        concurrency_key=lambda payload: f"account:{payload['account']}",
    )
    app.enqueue("per_account", {"account": 42})
    app.enqueue("per_account", {"account": 42}, concurrency_key="override")
    app.enqueue("reindex", {})
    assert sql("SELECT task, concurrency_key FROM workerpool_jobs ORDER BY id") == [
        ("per_account", "account:42"),
        ("per_account", "override"),
        ("reindex", "reindex"),
    ]


def test_live_keys_in_a_batch_keep_the_live_holder(app, sql):
    first = app.enqueue("sync", {"v": 1}, key="k", unique="live")
    ids = app.enqueue_many(
        [
            ("sync", {"v": 2}, {"key": "k", "unique": "live"}),
            ("reindex", {"v": 3}, {"key": "r", "unique": "live"}),
        ]
    )
    assert ids[0] == first
    finish(sql, first)
    again = app.enqueue_many([("sync", {"v": 4}, {"key": "k", "unique": "live"})])
    assert again[0] != first
    assert sql("SELECT concurrency_key FROM workerpool_jobs WHERE key = 'r'") == [("reindex",)]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"unique": "live"}, "need a key"),
        ({"on_conflict": "replace"}, "need a key"),
        ({"key": "k", "unique": "sometimes"}, "unique must be one of"),
        ({"key": "k", "on_conflict": "overwrite"}, "on_conflict must be one of"),
        ({"key": "k", "unique": "live", "unique_for": 5}, "not both"),
        ({"key": "k", "unique_for": 0}, "unique_for"),
        ({"key": "k", "unique_for": float("nan")}, "unique_for"),
        ({"key": "k", "unique_for": "5s"}, "unique_for"),
        ({"concurrency_key": "a"}, "limit nothing"),
    ],
)
def test_bad_key_options_are_refused_before_anything_is_written(app, sql, options, message):
    with pytest.raises(InvalidJob, match=message):
        app.enqueue("sync", {}, **options)
    assert sql("SELECT count(*) FROM workerpool_jobs") == [(0,)]


@pytest.mark.parametrize(
    "options",
    [
        {"key": "k", "unique_for": 5},
        {"key": "k", "on_conflict": "replace"},
        {"key": "k", "on_conflict": "error"},
    ],
)
def test_a_batch_refuses_what_only_a_single_enqueue_can_do(app, sql, options):
    with pytest.raises(InvalidJob, match="enqueue_many"):
        app.enqueue_many([("sync", {}), ("sync", {"v": 1}, options)])
    assert sql("SELECT count(*) FROM workerpool_jobs") == [(0,)]


def test_bad_concurrency_keys_are_refused_by_name(app, sql):
    with pytest.raises(InvalidJob, match="concurrency_key must be"):
        app.enqueue("reindex", {}, concurrency_key="")
    app.task(
        lambda job: None,
        queue="q",
        name="broken",
        concurrency_limit=1,
        concurrency_key=lambda payload: payload["missing"],
    )
    with pytest.raises(InvalidJob, match="concurrency_key function raised KeyError"):
        app.enqueue("broken", {})
    assert sql("SELECT count(*) FROM workerpool_jobs") == [(0,)]


def test_a_dead_job_whose_live_key_a_newer_job_holds_is_not_replayed(app, sql):
    from workerpool.ops.dead import retry

    old = app.enqueue("sync", {"v": 1}, key="k", unique="live")
    finish(sql, old, "dead")
    newer = app.enqueue("sync", {"v": 2}, key="k", unique="live")
    other = app.enqueue("sync", {"v": 3}, key="j", unique="live")
    finish(sql, other, "dead")
    result = retry(app, [old, other], by="test")  # no unique violation: the old one is skipped
    assert result.ids == [other]
    assert sql("SELECT id, state FROM workerpool_jobs ORDER BY id") == [
        (old, "dead"),
        (newer, "pending"),
        (other, "pending"),
    ]
