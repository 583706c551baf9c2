"""Enqueue from SQL: ``workerpool_enqueue`` from psql and from a trigger (a transactional
outbox) makes jobs the workers run; bad input is refused with one line and nothing written."""

from __future__ import annotations

import psycopg
import pytest

from tests.helpers.doors import error_line, psql
from tests.helpers.waiting import wait_until
from tests.helpers.workers import running
from workerpool import WorkerPool

OUTBOX = """
CREATE TABLE orders (id int PRIMARY KEY, email text NOT NULL);
CREATE FUNCTION orders_outbox() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM workerpool_enqueue('send_receipt', jsonb_build_object('order', NEW.id),
                             queue => 'email', key => 'receipt:' || NEW.id);
  RETURN NEW;
END $$;
CREATE TRIGGER orders_outbox AFTER INSERT ON orders FOR EACH ROW EXECUTE FUNCTION orders_outbox();
"""


@pytest.fixture
def app(pool: WorkerPool) -> WorkerPool:
    pool.queue("email", poll_interval=0.1)

    @pool.task(queue="email", max_attempts=3, priority=2)
    def send_receipt(job):
        return {"sent": job.payload}

    @pool.task(queue="email")
    def greet(job, email, name="friend"):  # a typed handler: its arguments are the payload
        return None

    return pool


def jobs(sql) -> list[tuple]:
    return sql("SELECT task, payload, queue, priority, max_attempts, state FROM workerpool_jobs")


def test_a_running_worker_registers_its_tasks_for_sql(app, sql):
    with running(app, "email"):
        wait_until(lambda: sql("SELECT count(*) FROM workerpool_tasks")[0][0] == 2)
    assert sql(
        "SELECT task, queue, max_attempts, priority, params FROM workerpool_tasks ORDER BY task"
    ) == [
        ("greet", "email", 5, 0, {"required": ["email"], "accepted": ["email", "name"]}),
        ("send_receipt", "email", 3, 2, None),
    ]


def test_a_job_enqueued_from_psql_runs(app, dsn, sql):
    app.register_tasks()
    run = psql(dsn, "SELECT workerpool_enqueue('send_receipt', '{\"order\": 7}', queue => 'email')")
    assert run.code == 0, run.err
    job_id = int(run.out)
    assert jobs(sql) == [("send_receipt", {"order": 7}, "email", 2, 3, "pending")]
    with running(app, "email"):
        wait_until(lambda: sql("SELECT state FROM workerpool_jobs")[0][0] == "done")
    assert app.result(job_id, timeout=5) == {"sent": {"order": 7}}


def test_the_outbox_trigger_enqueues_iff_the_row_change_commits(app, dsn, sql):
    app.register_tasks()
    assert psql(dsn, OUTBOX).code == 0
    rolled_back = psql(dsn, "BEGIN; INSERT INTO orders VALUES (1, 'a@x'); ROLLBACK;")
    assert rolled_back.code == 0, rolled_back.err
    assert jobs(sql) == []
    committed = psql(dsn, "INSERT INTO orders VALUES (2, 'b@x')")
    assert committed.code == 0, committed.err
    assert [row[:2] for row in jobs(sql)] == [("send_receipt", {"order": 2})]
    with running(app, "email"):
        wait_until(lambda: sql("SELECT state FROM workerpool_jobs")[0][0] == "done")


def test_a_refused_outbox_job_refuses_the_row_change(app, dsn, sql):
    """No registered task: the trigger raises, so the row is not kept without its job."""
    assert psql(dsn, OUTBOX).code == 0
    run = psql(dsn, "INSERT INTO orders VALUES (3, 'c@x')")
    assert run.code != 0
    assert error_line(run).startswith("unknown task 'send_receipt'")
    assert sql("SELECT count(*) FROM orders") == [(0,)]
    assert jobs(sql) == []


@pytest.mark.parametrize(
    ("call", "line"),
    [
        ("'nope', '{}'", "unknown task 'nope'"),
        ("'send_receipt', '{}', queue => 'sms'", "task send_receipt runs on queue 'email'"),
        ("'send_receipt', '[1, 2]'", "payload must be a JSON object, got array"),
        ("'send_receipt', '{\"a\": \"\\u0000\"}'", "unsupported Unicode escape sequence"),
        ("'send_receipt', jsonb_build_object('a', repeat('x', 70000))", "payload is 70009 bytes"),
        ("'send_receipt', '{}', key => '  '", "key must be a non-empty string"),
        ("'send_receipt', '{}', priority => 40000", "priority must be within -32768..32767"),
        ("'send_receipt', '{}', max_attempts => 0", "max_attempts must be within 1..1000"),
        ("'send_receipt', '{}', tags => ARRAY['']", "tags must hold 1..20 non-empty"),
        ("'greet', '{\"name\": \"Ada\"}'", "task greet needs argument(s) email"),
        ('\'greet\', \'{"email": "a@x", "age": 3}\'', "task greet takes no argument(s) age"),
    ],
)
def test_bad_sql_input_is_refused_with_one_line_and_nothing_written(app, dsn, sql, call, line):
    app.register_tasks()
    run = psql(dsn, f"SELECT workerpool_enqueue({call})")
    assert run.code != 0
    assert error_line(run).startswith(line), run.err
    assert jobs(sql) == []


def test_a_key_returns_its_job_and_refuses_another_payload(app, dsn, sql):
    app.register_tasks()
    first = psql(dsn, "SELECT workerpool_enqueue('send_receipt', '{\"o\": 1}', key => 'k')")
    again = psql(dsn, "SELECT workerpool_enqueue('send_receipt', '{\"o\": 1}', key => 'k')")
    assert first.code == again.code == 0
    assert first.out == again.out
    other = psql(dsn, "SELECT workerpool_enqueue('send_receipt', '{\"o\": 2}', key => 'k')")
    assert other.code != 0
    assert error_line(other) == (
        f"key 'k' already belongs to job {first.out} (send_receipt) with a different payload"
    )
    assert len(jobs(sql)) == 1


def test_sql_enqueue_wakes_listening_workers(app, dsn):
    app.register_tasks()
    with psycopg.connect(dsn, autocommit=True) as listener:
        listener.execute("LISTEN workerpool_jobs")
        assert psql(dsn, "SELECT workerpool_enqueue('send_receipt', '{}')").code == 0
        notices = list(listener.notifies(timeout=5, stop_after=1))
    assert [(n.channel, n.payload) for n in notices] == [("workerpool_jobs", "email")]
