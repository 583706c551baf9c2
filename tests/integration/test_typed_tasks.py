"""Typed tasks against real PostgreSQL: arguments checked and converted at enqueue, rebuilt for
the handler when it runs (a Worker on a thread, or ``testing.drain``), results rebuilt into the
return type; bad arguments refused with nothing written; a stale payload dead at claim."""

from __future__ import annotations

import asyncio
import sys
from datetime import date, datetime
from decimal import Decimal
from uuid import UUID

import pytest

from tests.apps import typed
from tests.helpers.workers import running
from workerpool import (
    ArgumentsRefused,
    ConfigError,
    InvalidArguments,
    InvalidJob,
    Job,
    JobFailed,
    JobHandle,
    Permanent,
    Task,
    WorkerPool,
    testing,
)
from workerpool.model.errors import InvalidDependency


class Opaque:
    """A class neither msgspec nor pydantic can build from JSON."""


WELCOME = typed.Welcome(
    "ada@example.com", 1, typed.Plan.PRO, [typed.Address("Paris"), typed.Address("Lyon", "69001")]
)


@pytest.fixture
def app(db_url):
    pool = typed.build(db_url)
    yield pool
    pool.dispose()


def _payloads(sql):
    return [row[0] for row in sql("SELECT payload FROM workerpool_jobs ORDER BY id")]


def test_a_dataclass_argument_is_stored_by_name_and_rebuilt_with_its_result(app, sql):
    handle = typed_task(app, "send_welcome").enqueue(WELCOME, template="vip")
    assert isinstance(handle, JobHandle) and isinstance(handle.id, int)
    assert _payloads(sql) == [
        {
            "welcome": {
                "email": "ada@example.com",
                "user_id": 1,
                "plan": "pro",
                "addresses": [{"city": "Paris", "zip": None}, {"city": "Lyon", "zip": "69001"}],
            },
            "template": "vip",
        }
    ]
    with running(app, "typed"):
        receipt = handle.result(timeout=30)
    assert receipt == typed.Receipt(
        "ada@example.com", datetime.fromisoformat("2026-01-02T03:04:05+00:00"), "vip"
    )
    assert handle.info().state == "done" and handle.info().task == "send_welcome"


def typed_task(pool: WorkerPool, name: str) -> Task:
    """The Task object ``@pool.task`` returned, rebuilt from the registry (the app's module
    keeps its tasks in a function)."""
    from workerpool.client.tasks import wrap

    return wrap(pool, pool.registry.task_spec(name))  # type: ignore[return-value]


def test_pydantic_models_dates_uuids_and_optionals_convert_both_ways(app, sql):
    bill = typed_task(app, "bill")
    invoice = typed.Invoice(number=7, total=Decimal("12.50"), lines=["a", "b"])
    account = UUID("12345678-1234-5678-1234-567812345678")
    with_account = bill.enqueue(invoice, date(2026, 12, 31), account=account)
    without = bill.enqueue(invoice, due=date(2027, 1, 1))
    assert _payloads(sql) == [
        {
            "invoice": {"number": 7, "total": "12.50", "lines": ["a", "b"]},
            "due": "2026-12-31",
            "account": str(account),
        },
        {"invoice": {"number": 7, "total": "12.50", "lines": ["a", "b"]}, "due": "2027-01-01"},
    ]
    ran = testing.drain(app, "typed")
    assert [r.state for r in ran] == ["done", "done"], [r.outcome for r in ran]
    assert with_account.result(timeout=5) == {"count": 2, "amount": "12.50"}
    assert without.result(timeout=5) == {"count": 2, "amount": "12.50"}


def test_an_async_handler_gets_its_arguments_and_its_result_comes_back_typed(app):
    double = typed_task(app, "double")
    assert asyncio.iscoroutinefunction(double.fn)
    handle = double.enqueue([1, 2, 3], factor=Decimal("1.5"))
    with running(app, "typed"):
        assert handle.result(timeout=30) == [Decimal("1.5"), Decimal("3.0"), Decimal("4.5")]
    assert handle.info().result == ["1.5", "3.0", "4.5"]  # stored as JSON


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda t: t.enqueue(typed.Welcome("a@b", "1")),  # type: ignore[arg-type]
            "task send_welcome: argument 'welcome': Expected `int`, got `str` - at"
            " `welcome.user_id`",
        ),
        (lambda t: t.enqueue(welcome="a@b"), "argument 'welcome': Expected `object`, got `str`"),
        (lambda t: t.enqueue(), "missing a required argument: 'welcome'"),
        (lambda t: t.enqueue(WELCOME, templat="x"), "unexpected keyword argument 'templat'"),
        (lambda t: t.enqueue(WELCOME, template=3), "argument 'template': Expected `str`"),
        (
            lambda t: t.enqueue({"email": "a@b", "user_id": 1, "plan": "gold"}),
            "argument 'welcome': Invalid enum value 'gold' - at `welcome.plan`",
        ),
    ],
)
def test_bad_arguments_are_refused_naming_the_argument_and_nothing_is_written(
    app, sql, call, message
):
    with pytest.raises(InvalidArguments) as caught:
        call(typed_task(app, "send_welcome"))
    assert message in str(caught.value)
    assert len(str(caught.value).splitlines()) == 1
    assert isinstance(caught.value, InvalidJob)
    assert sql("SELECT count(*) FROM workerpool_jobs") == [(0,)]


def test_a_pydantic_argument_that_does_not_validate_is_refused(app, sql):
    with pytest.raises(InvalidArguments, match=r"argument 'invoice': .* at `invoice.number`"):
        app.enqueue("bill", {"invoice": {"number": "seven", "total": "1", "lines": []}, "due": "x"})
    assert sql("SELECT count(*) FROM workerpool_jobs") == [(0,)]


def test_pool_enqueue_with_a_dict_is_checked_against_the_signature(app, sql):
    good = app.enqueue("send_welcome", {"welcome": {"email": "b@c", "user_id": 2}})
    objects = app.enqueue(typed_task(app, "send_welcome"), {"welcome": WELCOME})
    for payload, message in [
        ({"welcome": {"email": "b@c"}}, "Object missing required field `user_id`"),
        ({"welcome": {"email": "b@c", "user_id": 2}, "extra": 1}, "unexpected argument 'extra'"),
        ({}, "missing argument 'welcome'"),
    ]:
        with pytest.raises(InvalidArguments, match=message):
            app.enqueue("send_welcome", payload)
        with pytest.raises(InvalidArguments, match=message):  # a batch, whole
            app.enqueue_many([("legacy", {}), ("send_welcome", payload)])
    assert [row[0] for row in sql("SELECT id FROM workerpool_jobs ORDER BY id")] == [good, objects]
    assert _payloads(sql)[1]["welcome"]["plan"] == "pro"


def test_a_payload_that_no_longer_fits_goes_dead_at_claim_with_the_reason(app, db_url, sql):
    old = typed.build_v1(db_url)  # the deploy before wrote this payload
    try:
        job_id = old.enqueue("send_welcome", {"email": "ada@example.com", "user_id": 1})
    finally:
        old.dispose()
    with running(app, "typed"):
        with pytest.raises(JobFailed) as failed:
            app.result(job_id, timeout=30)
    assert failed.value.reason == "permanent"
    [error] = failed.value.errors
    assert error["type"] == "ArgumentsRefused"
    assert "the payload has argument 'email', which the handler no longer takes" in error["message"]
    assert sql("SELECT state, attempts FROM workerpool_jobs") == [("dead", 1)]


def test_a_payload_of_the_wrong_type_goes_dead_in_the_inline_drain_too(app, db_url, sql):
    old = WorkerPool(db_url)
    old.queue("typed")

    @old.task(queue="typed")
    def send_welcome(job: Job) -> None: ...

    try:  # an older dict task of that name, or a payload written by SQL
        job_id = old.enqueue("send_welcome", {"welcome": {"email": "a@b", "user_id": "one"}})
    finally:
        old.dispose()
    [ran] = testing.drain(app, "typed", retries="now")
    assert ran.state == "dead"
    assert ran.outcome.error["type"] == "ArgumentsRefused"
    assert ran.outcome.error["message"] == (
        "task send_welcome: argument 'welcome': Expected `int`, got `str` - at `welcome.user_id`"
    )
    assert issubclass(ArgumentsRefused, Permanent)
    assert app.job(job_id).attempts == 1


def test_an_upcaster_reshapes_an_old_payload_before_the_typed_handler_gets_it(app, db_url):
    old = WorkerPool(db_url)
    old.queue("typed")

    @old.task(queue="typed", version=1)
    def notify(job: Job) -> None: ...

    try:
        job_id = old.enqueue("notify", {"user": 7, "email": True})
    finally:
        old.dispose()
    [ran] = testing.drain(app, "typed")
    assert ran.state == "done", ran.outcome
    assert app.result(job_id, timeout=5) == {"user_id": 7, "on": ["email"]}


def test_inline_mode_runs_a_typed_call_at_once(app):
    with app.testing_mode("inline"):
        handle = typed_task(app, "send_welcome").enqueue(WELCOME)
        assert handle.info().state == "done"
    assert handle.result(timeout=5).template == "welcome"


def test_using_sets_options_per_call_and_after_takes_handles(app, sql):
    send_welcome = typed_task(app, "send_welcome")
    first = send_welcome.using(key="welcome:1", priority=5).enqueue(WELCOME)
    again = send_welcome.using(key="welcome:1", priority=5).enqueue(WELCOME)
    later = typed_task(app, "legacy").using(after=[first], tags=["t"]).enqueue()
    assert again.id == first.id
    assert sql("SELECT task, priority, key, state FROM workerpool_jobs ORDER BY id") == [
        ("send_welcome", 5, "welcome:1", "pending"),
        ("legacy", 0, None, "waiting"),
    ]
    with app.engine.begin() as conn:
        in_tx = send_welcome.using(conn=conn).enqueue(WELCOME, template="tx")
        conn.rollback()
    assert [r[0] for r in sql("SELECT id FROM workerpool_jobs ORDER BY id")] == [first.id, later.id]
    assert in_tx.id not in (first.id, later.id)


def test_enqueue_batches_chains_and_workflows_take_handles_after(app, sql):
    first = typed_task(app, "send_welcome").enqueue(WELCOME)
    alone = app.enqueue("legacy", {}, after=[first])
    [many] = app.enqueue_many([("legacy", {}, {"after": [first]})])
    chained = app.chain([("legacy", {}, {"after": (h for h in [first])}), ("legacy", {})])
    workflow = app.workflow()
    workflow.step("a", "legacy", after=[first])
    workflow.step("b", "legacy", after=["a", first])
    steps = workflow.run()
    with app.batch() as batch:
        member = batch.enqueue("legacy", {}, after=[first])
    waiting = [alone, many, chained[0], steps["a"], steps["b"], member]
    assert sql(
        "SELECT job_id, array_agg(parent_id ORDER BY parent_id) FROM workerpool_job_dependencies"
        " WHERE kind = 'after' GROUP BY job_id ORDER BY job_id"
    ) == sorted(
        [(i, [first.id]) for i in waiting if i != steps["b"]]
        + [(chained[1], [chained[0]]), (steps["b"], sorted([first.id, steps["a"]]))]
    )


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ([7.0], "after must hold job ids (positive ints), got 7.0"),
        ([True], "after must hold job ids (positive ints), got True"),
        ([b"7"], "after must hold job ids (positive ints), got b'7'"),
        (7, "after must be a list of job ids, got int"),
    ],
)
def test_after_of_neither_id_nor_handle_is_refused_with_nothing_written(app, sql, bad, message):
    refusals = [
        lambda: app.enqueue("legacy", {}, after=bad),
        lambda: typed_task(app, "legacy").using(after=bad).enqueue(),
        lambda: app.workflow().step("a", "legacy", after=bad),  # a string there names a step
    ]
    for refused in refusals:
        with pytest.raises(InvalidDependency) as caught:
            refused()
        assert str(caught.value) == message
    assert sql("SELECT count(*) FROM workerpool_jobs") == [(0,)]


def test_a_batch_a_chain_and_enqueue_many_take_typed_payloads(app):
    send_welcome = typed_task(app, "send_welcome")
    ids = app.chain(
        [("send_welcome", send_welcome.payload(WELCOME)), ("legacy", {"after": "welcome"})]
    )
    many = app.enqueue_many(
        [("send_welcome", send_welcome.payload(WELCOME, template=t)) for t in "ab"]
    )
    with app.batch() as batch:
        batch.enqueue("send_welcome", send_welcome.payload(WELCOME, template="batch"))
    testing.drain(app, "typed")
    assert [app.job(i).state for i in [*ids, *many]] == ["done"] * 4
    assert [app.job(i).result["template"] for i in many] == ["a", "b"]
    assert app.batch_status(batch.id).done == 1


def test_calling_the_task_calls_the_function_and_a_dict_task_is_unchanged(app, sql):
    send_welcome = typed_task(app, "send_welcome")
    job = Job(1, "typed", "send_welcome", {}, 1, 1, 3)
    assert send_welcome(job, WELCOME).to == "ada@example.com"
    legacy = app.enqueue("legacy", {"anything": [1, {"goes": None}]})
    with pytest.raises(InvalidArguments, match="takes only the job"):
        typed_task(app, "legacy").enqueue(1)  # type: ignore[call-arg]
    testing.drain(app, "typed")
    assert app.result(legacy, timeout=5) == {"got": {"anything": [1, {"goes": None}]}}


def test_a_parameter_no_library_can_convert_is_refused_when_declared(db_url):
    pool = WorkerPool(db_url)
    with pytest.raises(ConfigError, match=r"parameter 'thing': type .*Opaque cannot be converted"):

        @pool.task
        def handler(job: Job, thing: Opaque) -> None: ...

    with pytest.raises(ConfigError, match=r"parameter 'rest' must be named"):

        @pool.task
        def star(job: Job, *rest: int) -> None: ...

    assert "handler" not in pool.tasks and "star" not in pool.tasks


def test_enqueue_async_and_the_handle_s_async_result_info_and_cancel(app):
    send_welcome = typed_task(app, "send_welcome")

    async def scenario():
        try:
            first = await send_welcome.enqueue_async(WELCOME, template="async")
            later = await send_welcome.using(delay=600).enqueue_async(WELCOME)
            testing.drain(app, "typed")
            return first, await first.result_async(timeout=5), later
        finally:
            await app.dispose_async()

    first, receipt, later = asyncio.run(scenario())
    assert receipt.template == "async" and first.info().state == "done"
    assert later.cancel(reason="not needed").cancelled == [later.id]
    assert later.info().state == "cancelled"


LATE_MODULE = """
from __future__ import annotations

from dataclasses import dataclass

from workerpool import Job, WorkerPool

pool = WorkerPool()
pool.queue("late")


@pool.task(queue="late")
def late(job: Job, item: Item) -> Item:
    return Item(item.n + 1)


@pool.task(queue="late")
def broken(job: Job, thing: Undefined) -> None: ...


@dataclass
class Item:
    n: int
"""


def test_an_annotation_naming_a_later_class_resolves_on_first_use(db_url, tmp_path, monkeypatch):
    import importlib.util

    path = tmp_path / "late_tasks.py"
    path.write_text(LATE_MODULE)
    monkeypatch.setenv("WORKERPOOL_DATABASE_URL", db_url.render_as_string(hide_password=False))
    spec = importlib.util.spec_from_file_location("late_tasks", path)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "late_tasks", module)
    spec.loader.exec_module(module)
    try:
        handle = module.late.enqueue(module.Item(1))
        testing.drain(module.pool, "late")
        assert handle.result(timeout=5) == module.Item(2)
        with pytest.raises(ConfigError, match="task broken: cannot read its annotations"):
            module.broken.enqueue(thing=1)
    finally:
        module.pool.dispose()


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"priority": "high"}, InvalidJob, "priority"),
        ({"after": "7"}, InvalidDependency, "after must be a list of job ids, got str"),
        ({"after": [10**9]}, InvalidDependency, "does not exist"),
        ({"run_at": datetime(2030, 1, 1)}, InvalidJob, "run_at"),
        ({"conn": "a connection"}, InvalidJob, "conn must be a SQLAlchemy Connection"),
        ({"key": ""}, InvalidJob, "key must be a non-empty string"),
    ],
)
def test_bad_options_of_using_are_refused_with_nothing_written(app, sql, options, error, message):
    with pytest.raises(error, match=message):
        typed_task(app, "send_welcome").using(**options).enqueue(WELCOME)
    assert sql("SELECT count(*) FROM workerpool_jobs") == [(0,)]
