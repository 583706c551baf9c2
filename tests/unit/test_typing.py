"""The public API (``workerpool.__all__``) passes ``mypy --strict``, and so does a user's code
that uses it: the package ships ``py.typed``, so a user's mypy reads these hints. And a typed
task's calls are checked: mypy accepts a user module that enqueues with the handler's own
parameters and types the result, and rejects each wrong call."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

import workerpool
from tests.helpers.typecheck import mypy_strict

pytestmark = pytest.mark.slow  # mypy reads SQLAlchemy's hints: tens of seconds on a cold cache

ROOT = Path(workerpool.__file__).resolve().parent

USER_CODE = """
from __future__ import annotations

from workerpool import Backoff, Job, Permanent, WorkerPool

pool = WorkerPool(payload_limit=1024)
pool.queue("email", concurrency=2)


@pool.task(queue="email", max_attempts=3, backoff=Backoff(base=1.0))
def send(job: Job) -> None:
    if not job.payload.get("to"):
        raise Permanent("no address")


def signup(email: str) -> int:
    return pool.enqueue(send, {"to": email}, key=f"welcome:{email}")


async def signup_async(email: str) -> list[int]:
    first = await pool.enqueue_async("send", {"to": email})
    return [first, *await pool.enqueue_many_async([("send", {"to": email})])]
"""


@pytest.fixture(scope="module")
def mypy_cache(tmp_path_factory) -> Path:
    """One cache for the module's mypy runs: SQLAlchemy's stubs are read once, not per run."""
    return tmp_path_factory.mktemp("mypy-cache")


@pytest.fixture(scope="module")
def mypy(mypy_cache):
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return mypy_strict(mypy_cache, *args)

    return run


def _source(module: Path) -> Path:
    """A module's file: ``x.py``, or ``x/__init__.py`` for a package."""
    file = module.with_suffix(".py")
    return file if file.is_file() else module / "__init__.py"


@pytest.mark.timeout(600)
def test_the_modules_of_the_public_names_pass_mypy_strict(mypy):
    modules = {ROOT / "__init__.py"} | {
        _source(ROOT / where.lstrip(".").replace(".", "/")) for where in workerpool._WHERE.values()
    }
    assert (ROOT / "py.typed").is_file()
    result = mypy(*sorted(map(str, modules)))
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.timeout(600)
def test_a_users_code_on_the_public_api_passes_mypy_strict(mypy, tmp_path):
    user = tmp_path / "user_app.py"
    user.write_text(USER_CODE)
    result = mypy(str(user))
    assert result.returncode == 0, result.stdout + result.stderr
    # the control: a wrong type is caught, so the hints are read, not Any
    user.write_text(USER_CODE + "\nwrong: str = pool.enqueue('send', {})\n")
    result = mypy(str(user))
    assert result.returncode == 1 and "incompatible types in assignment" in result.stdout.lower()


# -- typed tasks: a type checker checks their calls ---------------------------------------------

TYPED_USER_CODE = """
from __future__ import annotations

from dataclasses import dataclass

from workerpool import Job, JobHandle, WorkerPool

pool = WorkerPool()


@dataclass
class Welcome:
    email: str
    user_id: int


@dataclass
class Receipt:
    to: str


@pool.task(queue="email", max_attempts=3)
def send_welcome(job: Job, welcome: Welcome, template: str = "welcome") -> Receipt:
    return Receipt(welcome.email)


@pool.task
async def count(job: Job, words: list[str]) -> int:
    return len(words)


@pool.task
def plain(job: Job) -> None:
    return None


def signup(email: str) -> Receipt:
    handle: JobHandle[Receipt] = send_welcome.enqueue(Welcome(email, 1), template="vip")
    keyed = send_welcome.using(key=f"welcome:{email}", priority=5).enqueue(Welcome(email, 2))
    pool.enqueue(plain, {"any": "dict"})
    after = plain.using(after=[handle, keyed]).enqueue()
    assert after.id > 0
    return handle.result(timeout=10)


async def words() -> int:
    handle = await count.enqueue_async(["a", "b"])
    total: int = await handle.result_async(timeout=5)
    return total + await count(Job(1, "q", "count", {}, 1, 1, 1), ["x"])
"""

#: Each wrong line, and what mypy says about it.
WRONG = {
    'send_welcome.enqueue(welcome="x")': 'Argument "welcome" to "enqueue" of "BaseTask" has'
    ' incompatible type "str"; expected "Welcome"',
    'send_welcome.enqueue(Welcome("a", 1), templat="x")': 'Unexpected keyword argument "templat"',
    'wrong: str = send_welcome.enqueue(Welcome("a", 1)).result()': 'expression has type "Receipt",'
    ' variable has type "str"',
    "count.enqueue([1, 2])": 'List item 0 has incompatible type "int"; expected "str"',
    'plain.enqueue({"a": 1})': 'Too many arguments for "enqueue"',
    'send_welcome.using(priority="high")': 'Argument "priority" to "using"',
}


def _mypy(cache: Path, path: Path) -> subprocess.CompletedProcess[str]:
    return mypy_strict(cache, str(path), cwd=path.parent)


@pytest.mark.timeout(600)
def test_mypy_accepts_typed_calls_and_rejects_each_wrong_one(mypy_cache, tmp_path):
    user = tmp_path / "user_tasks.py"
    user.write_text(TYPED_USER_CODE)
    cache = mypy_cache
    accepted = _mypy(cache, user)
    assert accepted.returncode == 0, accepted.stdout + accepted.stderr
    user.write_text(TYPED_USER_CODE + "\n" + "\n".join(WRONG) + "\n")
    refused = _mypy(cache, user)
    assert refused.returncode == 1
    said: dict[int, str] = {}
    for text in refused.stdout.splitlines():
        if text.startswith("user_tasks.py:") and ": error: " in text:
            number = int(text.split(":")[1])
            said[number] = said.get(number, "") + text
    first = TYPED_USER_CODE.count("\n") + 2  # the line after the correct module
    for number, (line, message) in enumerate(WRONG.items(), start=first):
        assert message in said.get(number, ""), (line, refused.stdout)
    assert set(said) == set(range(first, first + len(WRONG))), refused.stdout
