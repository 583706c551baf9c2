"""The public API (``workerpool.__all__``) passes ``mypy --strict``, and so does a user's code
that uses it: the package ships ``py.typed``, so a user's mypy reads these hints."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

import workerpool
from tests.helpers.typecheck import mypy_strict

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
def mypy(tmp_path_factory):
    """``mypy --strict`` with one cache for the module's runs (SQLAlchemy's stubs are read
    once, not per run)."""
    cache = tmp_path_factory.mktemp("mypy-cache")

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return mypy_strict(cache, *args)

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
