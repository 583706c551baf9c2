"""The project's own tests, run by Django's test runner on its test database, with a real
``workerpool run workerpool.contrib.django.worker:pool`` serving that database.

A ``TransactionTestCase``: the view's atomic block really commits (a ``TestCase`` wraps each
test in a transaction, whose on-commit callbacks never run), so the backend's on-commit
enqueue happens as in production. The settings' ``TEST_RUNNER`` is workerpool's: it migrates
workerpool's tables into the test databases and closes the pools before Django drops them
(nothing here does either).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
from datetime import datetime, timedelta
from pathlib import Path

from asgiref.sync import async_to_sync
from django.contrib.auth.models import User
from django.core.exceptions import ImproperlyConfigured
from django.db import connection, transaction
from django.test import Client, TransactionTestCase
from django.utils import timezone

from tests.helpers.waiting import wait_until
from workerpool import WorkerPool
from workerpool.contrib.django import WorkerpoolBackend, complete_in
from workerpool.contrib.django.compat import (
    InvalidTaskBackend,
    InvalidTaskError,
    TaskResultDoesNotExist,
    TaskResultStatus,
    task_backends,
)
from workerpool.contrib.django.database import url_of
from workerpool.contrib.django.models import Job
from workerpool.contrib.django.results import exception_path
from workerpool.model.errors import CompletionRefused
from workerpool.testing.runner import drain

from . import tasks
from .models import Order

ROOT = Path(__file__).resolve().parents[3]
TARGET = "workerpool.contrib.django.worker:pool"


class Worker:
    """``workerpool run`` on the test database, in a process group of its own."""

    def __init__(self) -> None:
        self.dir = tempfile.TemporaryDirectory(prefix="wp-django-")
        self.log_path = Path(self.dir.name) / "run.log"
        env = {k: v for k, v in os.environ.items() if not k.startswith("WORKER_")}
        env.update(
            DJANGO_PROJECT_DB_NAME=connection.settings_dict["NAME"],
            DJANGO_SETTINGS_MODULE="tests.apps.django_project.settings",
            PYTHONPATH=str(ROOT),
        )
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "workerpool",
                    "run",
                    TARGET,
                    "--heartbeat-dir",
                    self.dir.name,
                ],
                env=env,
                cwd=ROOT,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
            )
        # Ready once it beats: a SIGTERM before its handlers are in would kill it, not stop it.
        wait_until(
            lambda: any(Path(self.dir.name).glob("*.heartbeat")) or self.proc.poll() is not None,
            60,
            message=f"workerpool run started\n{self.log()}",
        )

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(30)
        finally:
            if self.proc.poll() is None:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
            self.dir.cleanup()


def finished(result_id: str, worker: Worker, timeout: float = 60):
    """The result once its task has finished (a real worker runs it)."""

    def read():
        result = tasks.add.get_backend().get_result(result_id)
        return result if result.is_finished else None

    return wait_until(
        read, timeout, interval=0.1, message=f"task result {result_id} finished\n{worker.log()}"
    )


class TasksOnWorkerpool(TransactionTestCase):
    databases = frozenset({"default", "jobs"})

    @classmethod
    def setUpClass(cls) -> None:
        super().setUpClass()
        cls.worker = Worker()

    @classmethod
    def tearDownClass(cls) -> None:
        exit_code = cls.worker.stop()
        super().tearDownClass()
        assert exit_code == 0, f"workerpool run exited {exit_code}"

    def test_a_view_enqueues_in_its_atomic_block_and_the_worker_runs_the_task(self) -> None:
        response = Client().post(
            "/orders", json.dumps({"email": "ada@example.com"}), content_type="application/json"
        )
        self.assertEqual(response.status_code, 201, response.content)
        order_id, result_id = response.json()["order"], response.json()["result_id"]

        result = finished(result_id, self.worker)
        self.assertEqual(result.status, TaskResultStatus.SUCCESSFUL)
        self.assertEqual(result.return_value, {"order": order_id, "updated": 1})
        self.assertTrue(Order.objects.get(pk=order_id).confirmed)
        self.assertEqual(
            (result.task.func, result.task.queue_name, result.attempts),
            (tasks.confirm_order.func, "emails", 1),
        )
        self.assertEqual(result.args, [order_id])
        self.assertLessEqual(result.enqueued_at, result.started_at)
        self.assertLessEqual(result.started_at, result.finished_at)
        self.assertEqual(tasks.confirm_order.get_result(result_id).id, result_id)

    def test_refresh_follows_the_job_until_it_succeeds(self) -> None:
        result = tasks.add.enqueue(2, 3)  # outside a block: written at once
        self.assertTrue(result.id)
        self.assertIn(result.status, {TaskResultStatus.READY})
        wait_until(
            lambda: (result.refresh(), result.is_finished)[1],
            60,
            interval=0.1,
            message=f"refresh() saw the task finish\n{self.worker.log()}",
        )
        self.assertEqual((result.status, result.return_value), (TaskResultStatus.SUCCESSFUL, 5))

    def test_a_task_that_raises_is_failed_with_its_exception_and_traceback(self) -> None:
        result = finished(tasks.refuse.enqueue("no stock").id, self.worker)
        self.assertEqual(result.status, TaskResultStatus.FAILED)
        [error] = result.errors
        self.assertIs(error.exception_class, tasks.Refused)
        self.assertIn("no stock", error.traceback)
        self.assertEqual(result.attempts, 1)
        with self.assertRaises(ValueError):
            result.return_value  # Django raises for a failed task

    def test_async_tasks_and_the_async_api(self) -> None:
        async def flow():
            enqueued = await tasks.add_later.aenqueue(4, 5)
            for _ in range(600):
                result = await tasks.add_later.aget_result(enqueued.id)
                if result.is_finished:
                    return result
                await enqueued.arefresh()
                await asyncio.sleep(0.1)
            raise AssertionError(f"async task unfinished\n{self.worker.log()}")

        result = async_to_sync(flow)()
        self.assertEqual(
            (result.status, result.return_value), (TaskResultStatus.SUCCESSFUL, [4, 5, 9])
        )
        self.assertTrue(Job.objects.get(pk=int(result.id)).task.startswith("django-async:"))

    def test_a_task_that_takes_context_sees_its_attempt(self) -> None:
        result = finished(tasks.which_attempt.enqueue("first").id, self.worker)
        self.assertEqual(result.return_value, {"label": "first", "attempt": 1, "id": result.id})

    def test_django_s_log_lines_come_from_the_worker(self) -> None:
        done = finished(tasks.add.enqueue(20, 22).id, self.worker)
        failed = finished(tasks.refuse.enqueue("out of paper").id, self.worker)
        path = "tests.apps.django_project.tasks"
        wait_until(
            lambda: f"id={failed.id} path={path}.refuse state=FAILED" in self.worker.log(),
            30,
            message=f"Django's task_finished line\n{self.worker.log()}",
        )
        log = self.worker.log()
        for line in (
            f"Task id={done.id} path={path}.add state=RUNNING",
            f"Task id={done.id} path={path}.add state=SUCCESSFUL",
            f"Task id={failed.id} path={path}.refuse state=RUNNING",
        ):
            self.assertIn(line, log)
        self.assertIn("Refused: out of paper", log)  # task_finished is sent with the traceback

    def test_the_exception_path_survives_lines_and_notes(self) -> None:
        result = finished(tasks.refuse_at_length.enqueue("no stock").id, self.worker)
        [error] = result.errors
        self.assertEqual(error.exception_class_path, "tests.apps.django_project.tasks.Refused")
        self.assertIs(error.exception_class, tasks.Refused)
        # an entry from before the class key: read from the traceback's exception line
        entry = {
            "type": "Refused",
            "traceback": "Traceback (most recent call last):\n  File ...\n"
            "tests.apps.django_project.tasks.Refused: no stock\nsecond line\na note\n",
        }
        self.assertEqual(exception_path(entry), "tests.apps.django_project.tasks.Refused")
        builtin = {"type": "KeyError", "traceback": "Traceback ...\nKeyError: 'x'\nnote\n"}
        self.assertEqual(exception_path(builtin), "builtins.KeyError")

    def test_the_running_task_sees_the_enqueued_queue_and_priority(self) -> None:
        result = tasks.where_am_i.using(queue_name="emails", priority=7).enqueue()
        self.assertEqual(
            finished(result.id, self.worker).return_value,
            {"queue": "emails", "priority": 7, "backend": "default"},
        )

    def test_a_task_s_effect_and_its_job_s_done_commit_in_one_atomic_block(self) -> None:
        committed = finished(tasks.charge_once.enqueue("once@example.com").id, self.worker)
        undone = tasks.charge_once.enqueue("undone@example.com", roll_back=True)
        rolled_back = finished(undone.id, self.worker)
        # The block's result, not the task's later return: the worker wrote no outcome.
        self.assertEqual(
            (committed.status, committed.return_value, committed.attempts),
            (TaskResultStatus.SUCCESSFUL, {"charged": "once@example.com"}, 1),
        )
        self.assertEqual(Order.objects.filter(email="once@example.com").count(), 1)
        # Rolled back with its Order: the job was as before, and the task's return decided.
        self.assertEqual(rolled_back.return_value, {"rolled back": "undone@example.com"})
        self.assertFalse(Order.objects.filter(email="undone@example.com").exists())

    def test_an_async_task_completes_in_a_block_it_runs_with_sync_to_async(self) -> None:
        result = finished(tasks.charge_once_async.enqueue("async@example.com").id, self.worker)
        order = Order.objects.get(email="async@example.com")
        self.assertEqual(
            (result.status, result.return_value, result.attempts),
            (
                TaskResultStatus.SUCCESSFUL,
                {
                    "charged": "async@example.com",
                    "order": order.pk,
                    "on the loop": f"CompletionRefused: job {result.id}: complete_in called on"
                    " the event loop of an async task; call it in transaction.atomic() inside a"
                    " sync function run with sync_to_async; nothing written",
                },
                1,
            ),
        )
        job = Job.objects.get(pk=int(result.id))
        self.assertEqual((job.state, job.task), ("done", "django-async:default"))
        with connection.cursor() as cursor:  # the step's record, committed with its Order
            cursor.execute("SELECT steps FROM workerpool_jobs WHERE id = %s", [job.pk])
            self.assertEqual(json.loads(cursor.fetchone()[0])["order"]["value"], order.pk)


class TasksWithoutAWorker(TransactionTestCase):
    """What is written and read back with no worker running. A class of its own: with
    ``--parallel`` it runs in another process, on another clone of the test database, which
    must have workerpool's tables and be the one its pools write to."""

    databases = frozenset({"default", "jobs"})

    def test_a_rolled_back_block_enqueues_nothing(self) -> None:
        jobs = Job.objects.count()  # workerpool's table is not flushed between tests
        response = Client().post(
            "/orders", json.dumps({"email": "bob@example.invalid"}), content_type="application/json"
        )
        self.assertEqual(response.status_code, 422, response.content)
        self.assertEqual(response.json()["result_id"], "")  # never written: no id
        self.assertFalse(Order.objects.exists())
        self.assertEqual(Job.objects.count(), jobs)

    def test_priority_queue_and_run_after_become_the_job_s(self) -> None:
        later = timezone.now() + timedelta(hours=1)
        result = tasks.add.using(priority=-42, queue_name="emails", run_after=later).enqueue(1, 1)
        job = Job.objects.get(pk=int(result.id))
        self.assertEqual(
            (job.priority, job.queue, job.run_at, job.state), (-42, "emails", later, "pending")
        )
        read = tasks.add.get_result(result.id)
        self.assertEqual(
            (read.status, read.task.priority, read.task.queue_name, read.task.run_after),
            (TaskResultStatus.READY, -42, "emails", later),
        )
        self.assertEqual(read.enqueued_at, result.enqueued_at)  # the row's, both

    def test_bad_input_is_refused_by_name_and_nothing_is_written(self) -> None:
        jobs = Job.objects.count()
        refusals = {
            "unknown queue": lambda: tasks.add.using(queue_name="nope"),
            "priority above 100": lambda: tasks.add.using(priority=101),
            "priority below -100": lambda: tasks.add.using(priority=-101),
            "naive run_after": lambda: tasks.add.using(run_after=datetime(2030, 1, 1)),
            "an argument missing": lambda: tasks.add.enqueue(1),
            "an argument too many": lambda: tasks.add.enqueue(1, 2, 3),
            "an unknown keyword": lambda: tasks.add.enqueue(1, 2, c=3),
            "the context is not the caller's": lambda: tasks.which_attempt.enqueue(),
            "a queue name workerpool cannot take": lambda: tasks.add.using(
                backend="anyqueue", queue_name="two words"
            ),
        }
        for what, call in refusals.items():
            with self.subTest(what), transaction.atomic():
                with self.assertRaises(InvalidTaskError):
                    call()
        # Django's own contract: what its normalize_json cannot take is its TypeError.
        for what, call in {
            "arguments not JSON": lambda: tasks.add.enqueue(object(), 1),
            "kwargs not JSON": lambda: tasks.add.enqueue(a={1, 2}, b=1),
        }.items():
            with self.subTest(what), transaction.atomic():
                with self.assertRaisesMessage(TypeError, "Unsupported type"):
                    call()
        for bad_id in ("abc", "-1", "0", "", "99999999", "1" * 30):
            with self.subTest(result_id=bad_id), self.assertRaises(TaskResultDoesNotExist):
                tasks.add.get_result(bad_id)
        bad_settings = {
            "unknown option": {"OPTIONS": {"URLS": "postgresql://x/y"}},
            "no attempt": {"OPTIONS": {"MAX_ATTEMPTS": 0}},
            "on-commit not a bool": {"OPTIONS": {"ENQUEUE_ON_COMMIT": "yes"}},
            "queue name with a space": {"QUEUES": ["default", "two words"]},
        }
        for what, params in bad_settings.items():
            with self.subTest(what), self.assertRaises(InvalidTaskBackend) as raised:
                WorkerpoolBackend("bad", params)
            self.assertIn("TASKS['bad']", str(raised.exception))
            self.assertIsInstance(raised.exception, ImproperlyConfigured)
        self.assertEqual(Job.objects.count(), jobs)

    def test_a_job_of_another_task_is_no_task_result(self) -> None:
        other = WorkerPool(url_of("default"))
        other.task(queue="elsewhere", name="plain")(lambda job: None)
        try:
            job_id = other.enqueue(
                "plain",
                {"task": "tests.apps.django_project.tasks.add", "args": [1, 2], "kwargs": {}},
            )
        finally:
            other.dispose()
        with self.assertRaises(TaskResultDoesNotExist):
            tasks.add.get_result(str(job_id))

    def test_the_admin_lists_jobs_read_only(self) -> None:
        result = tasks.add.using(run_after=timezone.now() + timedelta(hours=1)).enqueue(7, 8)
        User.objects.create_superuser("admin", "admin@example.com", "pw")
        client = Client()
        client.force_login(User.objects.get(username="admin"))
        page = client.get("/admin/workerpool/job/")
        self.assertEqual(page.status_code, 200)
        self.assertContains(page, "tests.apps.django_project.tasks.add")
        self.assertContains(page, "django:default")
        link = f"/admin/workerpool/job/{result.id}/change/"
        self.assertContains(page, link)
        self.assertNotContains(client.get("/admin/workerpool/job/?state__exact=done"), link)
        self.assertContains(client.get("/admin/workerpool/job/?state__exact=pending"), link)
        self.assertEqual(client.get(f"/admin/workerpool/job/{result.id}/change/").status_code, 200)
        self.assertEqual(client.get("/admin/workerpool/job/add/").status_code, 403)
        self.assertEqual(
            client.post(f"/admin/workerpool/job/{result.id}/delete/", {"post": "yes"}).status_code,
            403,
        )
        self.assertTrue(Job.objects.filter(pk=int(result.id)).exists())
        self.assertEqual(Client().get("/admin/workerpool/job/").status_code, 302)  # log in first

    def test_a_result_read_through_another_alias_stays_on_that_backend(self) -> None:
        other = task_backends["other"]
        enqueued = tasks.add.using(backend="other", queue_name="reports").enqueue(300, 33)
        self.assertEqual(enqueued.task.backend, "other")
        read = other.get_result(enqueued.id)
        self.assertEqual(
            (read.task.backend, read.task.queue_name, read.args), ("other", "reports", [300, 33])
        )
        # The default backend's database has jobs of its own, under their own ids.
        for _ in range(int(enqueued.id)):
            tasks.add.enqueue(1, 1)
        self.assertNotEqual(task_backends["default"].get_result(enqueued.id).args, [300, 33])
        read.refresh()
        self.assertEqual((read.args, read.task.backend), ([300, 33], "other"))
        # a result built by one backend for a task that names another still names its reader
        direct = other.enqueue(tasks.add.using(queue_name="default"), [1, 2], {})
        self.assertEqual(direct.task.backend, "other")

    def test_an_empty_queues_list_takes_any_queue(self) -> None:
        backend = task_backends["anyqueue"]
        result = tasks.add.using(backend="anyqueue", queue_name="adhoc").enqueue(5, 6)
        job = Job.objects.get(pk=int(result.id))
        self.assertEqual((job.queue, job.task), ("adhoc", "django:adhoc"))
        drain(backend.pool, "adhoc")  # no worker serves it: run it here, as a worker would
        read = backend.get_result(result.id)
        self.assertEqual((read.status, read.return_value), (TaskResultStatus.SUCCESSFUL, 11))

    def test_a_payload_workerpool_refuses_is_refused_inside_the_block(self) -> None:
        jobs = Job.objects.count()
        refusals = {
            "a key that is no string": ({1: "one"},),
            "NaN": (float("nan"),),
            "NUL": ("a\x00b",),
            "over the size limit": ("x" * (64 * 1024 + 1),),
        }
        for what, args in refusals.items():
            with self.subTest(what), self.assertRaises(InvalidTaskError):
                with transaction.atomic():
                    Order.objects.create(email=f"{what}@example.com")
                    tasks.add.enqueue(*args, 1)  # ENQUEUE_ON_COMMIT: refused before the commit
        self.assertFalse(Order.objects.exists())
        self.assertEqual(Job.objects.count(), jobs)

    def test_a_job_cancelled_before_it_ran_made_no_attempt(self) -> None:
        result = tasks.add.using(run_after=timezone.now() + timedelta(hours=1)).enqueue(1, 2)
        pool = tasks.add.get_backend().pool
        pool.cancel([int(result.id)])
        read = tasks.add.get_result(result.id)
        self.assertEqual(
            (read.status, read.attempts, read.worker_ids), (TaskResultStatus.FAILED, 0, [])
        )

    def test_complete_in_is_refused_by_name_and_writes_nothing(self) -> None:
        with (
            transaction.atomic(),
            self.assertRaisesMessage(
                CompletionRefused, "complete_in called outside a running workerpool task"
            ),
        ):
            complete_in()
        tasks.CAUGHT.clear()
        backend = task_backends["anyqueue"]
        cases = ["outside a block", "on another database", "twice", "after its lease was lost"]
        ids = {
            how: int(tasks.misuse.using(backend="anyqueue", queue_name="once").enqueue(how).id)
            for how in cases
        }
        drain(backend.pool, "once")  # in this process, as a worker would run them
        self.assertEqual(
            tasks.CAUGHT,
            {
                "outside a block": f"CompletionRefused: job {ids['outside a block']}: not inside"
                " transaction.atomic(using='default'); nothing written",
                "on another database": f"CompletionRefused: job {ids['on another database']}:"
                " conn is on another database than the pool's",
                "twice": f"CompletionRefused: job {ids['twice']}: complete_in was already called",
                "after its lease was lost": "CompletionLeaseLost: job"
                f" {ids['after its lease was lost']}: lease lost, not completed (now processing);"
                " roll back the effect",
            },
        )
        self.assertFalse(Order.objects.exists())  # the lost lease's Order rolled back
        refused = Job.objects.filter(pk__in=[ids[how] for how in cases[:3]]).order_by("pk")
        self.assertEqual([(job.state, job.result) for job in refused], [("done", None)] * 3)
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT state, claimed_by FROM workerpool_jobs WHERE id = %s",
                [ids["after its lease was lost"]],
            )
            self.assertEqual(cursor.fetchone(), ("processing", "thief"))

    def test_a_step_s_effect_and_its_record_commit_in_one_atomic_block(self) -> None:
        backend = task_backends["anyqueue"]
        job_id = int(tasks.two_steps.using(backend="anyqueue", queue_name="steps").enqueue().id)
        drain(backend.pool, "steps")
        kept = Order.objects.get()  # the rolled-back step's Order is gone with its record
        self.assertEqual(kept.email, "kept@example.com")
        with connection.cursor() as cursor:
            cursor.execute("SELECT steps FROM workerpool_jobs WHERE id = %s", [job_id])
            steps = json.loads(cursor.fetchone()[0])
        self.assertEqual((sorted(steps), steps["kept"]["value"]), (["kept"], kept.pk))
