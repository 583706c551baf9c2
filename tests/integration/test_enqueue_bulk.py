"""enqueue_many: ids line up with the input however keys and new rows mix, by COPY (no key), in
one statement or in pipelined chunks (keys, batches larger than INSERT_CHUNK), and a bad batch
writes nothing."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from sqlalchemy import text

from workerpool import IdempotencyConflict, InvalidJob, PayloadError, WorkerPool
from workerpool.client.enqueue import INSERT_CHUNK


@pytest.fixture
def app(pool: WorkerPool) -> WorkerPool:
    @pool.task(queue="bulk")
    def work(job):
        return None

    @pool.task(queue="bulk", concurrency_limit=2)
    def sync(job):
        return None

    return pool


def payload_by_id(sql) -> dict[int, int]:
    return dict(sql("SELECT id, (payload->>'n')::int FROM workerpool_jobs"))


LATE = 3 * INSERT_CHUNK + 7  # an index in the fourth chunk: three chunks were sent before it
#: How a batch is written: COPY (no key in it), or INSERTs (one key among its jobs).
PATHS = ["copy", "insert"]


def chunked(count: int, bad_at: int | None = None, path: str = "copy") -> list[tuple]:
    items: list[tuple] = [
        ("work", {"n": n} if n != bad_at else {"n": {1, 2}}) for n in range(count)
    ]
    if path == "insert":
        items[0] = (*items[0], {"key": "first"})
    return items


@pytest.mark.parametrize("path", PATHS)
def test_a_large_batch_returns_ids_in_input_order(app, sql, path):
    ids = app.enqueue_many(chunked(3000, path=path))
    stored = payload_by_id(sql)
    assert [stored[job_id] for job_id in ids] == list(range(3000))


def test_mixed_batch_lines_up_new_taken_and_repeated_keys(app, sql):
    taken = app.enqueue("work", {"n": 100}, key="taken")
    items = [
        ("work", {"n": 0}),
        ("work", {"n": 100}, {"key": "taken"}),  # an earlier job holds it: that job's id
        ("work", {"n": 2}, {"key": "fresh"}),
        ("work", {"n": 3}),
        ("work", {"n": 2}, {"key": "fresh"}),  # same job twice in one batch: one row
        ("work", {"n": 100}, {"key": "taken"}),
        ("work", {"n": 6}, {"delay": 60}),
        ("work", {"n": 7}, {"key": "last"}),
    ]
    ids = app.enqueue_many(items)
    assert ids[1] == ids[5] == taken
    assert ids[2] == ids[4]
    assert len(set(ids)) == 6
    stored = payload_by_id(sql)
    assert [stored[job_id] for job_id in ids] == [0, 100, 2, 3, 2, 100, 6, 7]
    keys = dict(sql("SELECT id, key FROM workerpool_jobs WHERE key IS NOT NULL"))
    assert (keys[ids[2]], keys[ids[7]]) == ("fresh", "last")
    assert len(stored) == 6  # the earlier job plus five new rows


def test_a_batch_whose_keys_are_all_taken_writes_nothing_and_returns_the_holders(app, sql):
    first = app.enqueue_many([("work", {"n": n}, {"key": f"k{n}"}) for n in range(5)])
    again = app.enqueue_many([("work", {"n": n}, {"key": f"k{n}"}) for n in reversed(range(5))])
    assert again == list(reversed(first))
    assert sql("SELECT count(*) FROM workerpool_jobs") == [(5,)]


def test_a_conflict_late_in_a_keyed_batch_rolls_back_its_new_rows(app, sql):
    app.enqueue("work", {"n": 1}, key="held")
    with pytest.raises(IdempotencyConflict, match="held"):
        app.enqueue_many([("work", {"n": 0}, {"key": "new"}), ("work", {"n": 9}, {"key": "held"})])
    assert sql("SELECT key FROM workerpool_jobs") == [("held",)]


MALFORMED = [("work",), ("work", {}, {}, "extra"), "work", ("work", {}, "key")]


@pytest.mark.parametrize("item", MALFORMED)
def test_a_malformed_item_is_an_invalid_job_and_nothing_is_written(app, sql, item):
    with pytest.raises(InvalidJob, match="task, payload"):
        app.enqueue_many([("work", {"n": 0}), item])
    assert sql("SELECT count(*) FROM workerpool_jobs") == [(0,)]


@pytest.mark.parametrize("jobs", [None, 5, "work", {"work": {}}, ("work", {})])
def test_a_batch_that_is_not_a_list_of_items_is_an_invalid_job(app, sql, jobs):
    with pytest.raises(InvalidJob, match=r"iterable of|task, payload"):
        app.enqueue_many(jobs)
    assert sql("SELECT count(*) FROM workerpool_jobs") == [(0,)]


@pytest.mark.parametrize("count", [1, INSERT_CHUNK + 1])
def test_a_conn_that_is_not_a_sqlalchemy_connection_is_an_invalid_job(app, sql, dsn, count):
    import psycopg

    with psycopg.connect(dsn) as raw:  # a DBAPI connection is a common mistake
        with pytest.raises(InvalidJob, match="SQLAlchemy Connection"):
            app.enqueue_many([("work", {"n": n}) for n in range(count)], conn=raw)
        with pytest.raises(InvalidJob, match="SQLAlchemy Connection"):
            app.enqueue("work", {}, conn=raw)
    assert sql("SELECT count(*) FROM workerpool_jobs") == [(0,)]


@pytest.mark.parametrize("path", PATHS)
def test_concurrent_batches_each_get_their_own_ids_in_order(app, sql, path):
    from concurrent.futures import ThreadPoolExecutor

    def batch(first: int) -> list[int]:
        items = [("work", {"n": first + n}) for n in range(2000)]
        if path == "insert":
            items[0] = (*items[0], {"key": f"first:{first}"})
        return app.enqueue_many(items)

    with ThreadPoolExecutor(2) as run:  # the two statements draw from the sequence at once
        results = list(run.map(batch, (0, 10_000)))
    stored = payload_by_id(sql)
    for first, ids in zip((0, 10_000), results, strict=True):
        assert [stored[job_id] for job_id in ids] == [first + n for n in range(2000)]


# -- a batch without keys: COPY -------------------------------------------------------------------


def test_a_copied_batch_stores_every_option_in_its_column(app, sql):
    at = datetime(2031, 5, 6, 7, 8, 9, 123456, tzinfo=UTC)
    ids = app.enqueue_many(
        [
            ("work", {"n": 0}),
            ("work", {"n": 1}, {"delay": 90.5, "priority": 7, "max_attempts": 2}),
            ("sync", {"n": 2}, {"run_at": at, "concurrency_key": "acct:2"}),
        ]
    )
    rows = sql(
        "SELECT id, queue, task, payload_version, priority, max_attempts, concurrency_key,"
        " key, key_scope, state, run_at - created_at, run_at FROM workerpool_jobs"
        " ORDER BY id"
    )
    assert [row[0] for row in rows] == ids
    assert [row[1:10] for row in rows] == [
        ("bulk", "work", 1, 0, 5, None, None, None, "pending"),
        ("bulk", "work", 1, 7, 2, None, None, None, "pending"),
        ("bulk", "sync", 1, 0, 5, "acct:2", None, None, "pending"),
    ]
    assert rows[0][10].total_seconds() == 0  # the transaction's clock, as the default gives
    assert rows[1][10].total_seconds() == 90.5
    assert rows[2][11] == at


#: What COPY's text format reads as syntax (tab, newline, backslash, \\N), and non-ASCII.
AWKWARD = ["tab\there", "line\nbreak", "back\\slash", "\\N", 'quote"s', "é ☃ 𝄞", "\t\n\r"]


def test_a_copied_batch_keeps_text_that_copy_would_otherwise_read_as_syntax(app, sql):
    ids = app.enqueue_many([("sync", {"s": t, t: [t]}, {"concurrency_key": t}) for t in AWKWARD])
    stored = {
        row[0]: row[1:] for row in sql("SELECT id, payload, concurrency_key FROM workerpool_jobs")
    }
    assert [stored[job_id] for job_id in ids] == [({"s": t, t: [t]}, t) for t in AWKWARD]


def test_a_copied_batch_stores_its_callers_trace_context_on_every_row(app, sql, monkeypatch):
    import contextlib
    import json

    from workerpool.client import enqueue as enqueue

    context = {
        "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        "tracestate": "vendor=a\\b\tc",
    }
    monkeypatch.setattr(
        enqueue.tracing,
        "enqueue_span",
        lambda *args: contextlib.nullcontext(json.dumps(context, separators=(",", ":"))),
    )
    ids = app.enqueue_many([("work", {"n": n}) for n in range(3)])
    assert sql("SELECT id, trace_context FROM workerpool_jobs ORDER BY id") == [
        (job_id, context) for job_id in ids
    ]


def test_a_copied_batch_in_the_callers_transaction_goes_with_its_rollback(app, sql):
    with app.engine.connect() as conn:
        trans = conn.begin()
        ids = app.enqueue_many([("work", {"n": n}) for n in range(300)], conn=conn)
        assert conn.execute(text("SELECT count(*) FROM workerpool_jobs")).scalar() == 300
        trans.rollback()
    assert len(ids) == 300
    assert sql("SELECT count(*) FROM workerpool_jobs") == [(0,)]


def test_a_copied_batch_commits_with_the_callers_transaction(app, sql):
    with app.engine.connect() as conn:  # no statement yet: the batch begins the transaction
        ids = app.enqueue_many([("work", {"n": n}) for n in range(3)], conn=conn)
        conn.commit()
    stored = payload_by_id(sql)
    assert [stored[job_id] for job_id in ids] == [0, 1, 2]


@pytest.mark.parametrize("bad_at", [0, 499, 999])
def test_a_bad_item_anywhere_in_a_copied_batch_writes_nothing_and_frees_the_connection(
    app, sql, bad_at
):
    with pytest.raises(PayloadError):
        app.enqueue_many(chunked(1000, bad_at=bad_at))
    assert sql("SELECT count(*) FROM workerpool_jobs") == [(0,)]
    assert sql(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
        " AND state <> 'idle' AND pid <> pg_backend_pid()"
    ) == [(0,)]
    ids = app.enqueue_many(chunked(10))  # the same pooled connection, back to usable
    assert len(ids) == 10


def test_copied_batches_notify_once_per_commit_and_never_for_a_rolled_back_one(app, dsn):
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as listener:
        listener.execute("LISTEN workerpool_jobs")
        with app.engine.connect() as conn:
            trans = conn.begin()
            app.enqueue_many(chunked(5), conn=conn)
            trans.rollback()
        with pytest.raises(PayloadError):
            app.enqueue_many(chunked(5, bad_at=4))
        app.enqueue_many(chunked(5))
        notes = list(listener.notifies(timeout=1.0))
    assert [n.payload for n in notes] == ["bulk"]


# -- batches larger than one chunk ---------------------------------------------------------------


@pytest.mark.parametrize("path", PATHS)
def test_a_bad_item_in_a_late_chunk_writes_nothing(app, sql, path):
    with pytest.raises(PayloadError, match=r"\$\.n: set"):
        app.enqueue_many(chunked(4 * INSERT_CHUNK, bad_at=LATE, path=path))
    assert sql("SELECT count(*) FROM workerpool_jobs") == [(0,)]
    ids = app.enqueue_many(chunked(4 * INSERT_CHUNK, path=path))  # the pool is usable
    assert len(ids) == 4 * INSERT_CHUNK


@pytest.mark.parametrize("path", PATHS)
def test_in_the_callers_transaction_a_bad_late_chunk_rolls_back_only_the_batch(app, sql, path):
    with app.engine.begin() as conn:
        first = app.enqueue("work", {"n": -1}, conn=conn)
        with pytest.raises(PayloadError):
            app.enqueue_many(chunked(4 * INSERT_CHUNK, bad_at=LATE, path=path), conn=conn)
        conn.execute(text("SELECT 1"))  # the caller's transaction is still usable
    assert sql("SELECT id FROM workerpool_jobs") == [(first,)]


@pytest.mark.parametrize("path", PATHS)
def test_on_an_autocommit_connection_the_chunks_are_still_one_transaction(app, sql, path):
    with app.engine.connect() as conn:
        conn = conn.execution_options(isolation_level="AUTOCOMMIT")
        with pytest.raises(PayloadError):
            app.enqueue_many(chunked(4 * INSERT_CHUNK, bad_at=LATE, path=path), conn=conn)
        ids = app.enqueue_many(chunked(2 * INSERT_CHUNK + 1, path=path), conn=conn)
    stored = payload_by_id(sql)
    assert [stored[job_id] for job_id in ids] == list(range(2 * INSERT_CHUNK + 1))
    assert len(stored) == 2 * INSERT_CHUNK + 1


def test_a_key_repeated_across_chunks_is_one_job_and_a_different_job_conflicts(app, sql):
    items = chunked(3 * INSERT_CHUNK)
    items[5] = ("work", {"n": 5}, {"key": "twice"})
    items[2 * INSERT_CHUNK + 5] = ("work", {"n": 5}, {"key": "twice"})
    ids = app.enqueue_many(items)
    assert ids[5] == ids[2 * INSERT_CHUNK + 5]
    assert sql("SELECT count(*) FROM workerpool_jobs") == [(3 * INSERT_CHUNK - 1,)]

    items[INSERT_CHUNK] = ("work", {"n": 98}, {"key": "fresh"})
    items[2 * INSERT_CHUNK + 9] = ("work", {"n": 97}, {"key": "fresh"})  # another job, later
    with pytest.raises(IdempotencyConflict, match="fresh"):
        app.enqueue_many(items)
    assert sql("SELECT count(*) FROM workerpool_jobs") == [(3 * INSERT_CHUNK - 1,)]


def test_a_key_held_by_another_job_in_a_late_chunk_writes_nothing(app, sql):
    app.enqueue("work", {"n": 1}, key="held")
    items = chunked(3 * INSERT_CHUNK)
    items[LATE - INSERT_CHUNK] = ("work", {"n": 9}, {"key": "held"})  # the third chunk
    with pytest.raises(IdempotencyConflict, match="held"):
        app.enqueue_many(items)
    assert sql("SELECT key FROM workerpool_jobs") == [("held",)]


@pytest.mark.parametrize("path", PATHS)
def test_a_chunked_batch_sends_one_notification(app, dsn, path):
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as listener:
        listener.execute("LISTEN workerpool_jobs")
        app.enqueue_many(chunked(3 * INSERT_CHUNK, path=path))
        notes = list(listener.notifies(timeout=1.0))
    assert [n.payload for n in notes] == ["bulk"]


def test_a_callers_connection_on_psycopg2_gets_the_batch_in_one_statement(app, sql, db_url):
    """SQLAlchemy's default PostgreSQL driver is psycopg2, which has no pipeline: an
    application on it can still pass its connection (and its transaction) for a large batch."""
    from sqlalchemy import create_engine

    engine = create_engine(db_url.set(drivername="postgresql+psycopg2"))
    try:
        with engine.begin() as conn:
            ids = app.enqueue_many(chunked(3 * INSERT_CHUNK), conn=conn)
            with pytest.raises(PayloadError):
                app.enqueue_many(chunked(4 * INSERT_CHUNK, bad_at=LATE), conn=conn)
    finally:
        engine.dispose()
    stored = payload_by_id(sql)
    assert [stored[job_id] for job_id in ids] == list(range(3 * INSERT_CHUNK))
    assert len(stored) == 3 * INSERT_CHUNK
