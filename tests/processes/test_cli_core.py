"""`workerpool migrate` and `workerpool enqueue` as a user runs them: real processes."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.cli import run_cli

APP = """
from workerpool import WorkerPool
pool = WorkerPool()
pool.queue("email")

@pool.task(queue="email")
def send_welcome(job):
    pass

@pool.task(queue="email", concurrency_limit=1)
def sync(job):
    pass
"""


@pytest.fixture
def app_dir(tmp_path: Path) -> Path:
    (tmp_path / "myapp.py").write_text(APP)
    return tmp_path


def test_migrate_then_enqueue(empty_db_url, app_dir, tmp_path):
    done = run_cli("migrate", url=empty_db_url, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    out = run_cli(
        "enqueue",
        "myapp:pool",
        "send_welcome",
        "--payload",
        '{"user_id": 1}',
        "--key",
        "welcome:1",
        url=empty_db_url,
        cwd=app_dir,
    )
    assert out.returncode == 0, out.stderr
    again = run_cli(
        "enqueue",
        "myapp:pool",
        "send_welcome",
        "--payload",
        '{"user_id": 1}',
        "--key",
        "welcome:1",
        url=empty_db_url,
        cwd=app_dir,
    )
    assert again.stdout.strip() == out.stdout.strip() != ""


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["myapp:pool", "send_welcome", "--payload", "[1]"], "JSON object"),
        (["myapp:pool", "send_welcome", "--payload", "{nope"], "not valid JSON"),
        (["myapp:pool", "send_welcome", "--payload", '{"x": NaN}'], "NaN is not valid JSON"),
        (["myapp:pool", "nope"], "unknown task 'nope'"),
        (["myapp:nothing", "send_welcome"], "is not a WorkerPool"),
        (["missing_module:pool", "send_welcome"], "cannot import 'missing_module'"),
        (["no-colon", "send_welcome"], "APP:POOL must look like"),
        (["myapp:pool", "send_welcome", "--max-attempts", "0"], "max_attempts"),
        (
            ["myapp:pool", "send_welcome", "--key", "k", "--unique", "always"],
            "--unique must be one of forever, live, got 'always'",
        ),
        (
            ["myapp:pool", "send_welcome", "--key", "k", "--on-conflict", "merge"],
            "--on-conflict must be one of keep, replace, error, got 'merge'",
        ),
        (
            ["myapp:pool", "send_welcome", "--key", "k", "--unique-for", "soon"],
            "--unique-for must be a number of seconds above 0, got 'soon'",
        ),
        (
            ["myapp:pool", "send_welcome", "--key", "k", "--unique-for", "-5"],
            "--unique-for must be a number of seconds above 0",
        ),
        (["myapp:pool", "send_welcome", "--unique", "live"], "need a key"),
        (
            ["myapp:pool", "send_welcome", "--key", "k", "--unique", "live", "--unique-for", "5"],
            "not both",
        ),
        (["myapp:pool", "send_welcome", "--concurrency-key", "a:1"], "it would limit nothing"),
        (["myapp:pool", "send_welcome", "--tag", " "], "--tag: a tag is a non-empty string"),
        (
            ["myapp:pool", "send_welcome", *[f"--tag=t{i}" for i in range(21)]],
            "--tag: at most 20 tags per job, got 21",
        ),
    ],
)
def test_enqueue_bad_input_is_one_line_and_nonzero(db_url, app_dir, sql, args, message):
    out = run_cli("enqueue", *args, url=db_url, cwd=app_dir)
    assert out.returncode == 1
    assert message in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert sql("SELECT count(*) FROM workerpool_jobs") == [(0,)]


def test_unreachable_database_is_one_line_without_the_password(app_dir):
    from sqlalchemy.engine import make_url

    url = make_url("postgresql://bob:S3cretSentinel@127.0.0.1:1/nowhere")
    out = run_cli("enqueue", "myapp:pool", "send_welcome", url=url, cwd=app_dir)
    assert out.returncode == 1
    assert "S3cretSentinel" not in out.stderr + out.stdout
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr


def test_enqueue_with_a_concurrency_key_and_a_live_key_that_debounces(db_url, app_dir, sql):
    def enqueue(payload: str, *options: str) -> str:
        out = run_cli(
            "enqueue", "myapp:pool", "sync", "--payload", payload, *options, url=db_url, cwd=app_dir
        )
        assert out.returncode == 0, out.stderr
        return out.stdout.strip()

    live = ("--key", "sync:42", "--unique", "live", "--concurrency-key", "account:42")
    first = enqueue('{"rev": 1}', *live, "--on-conflict", "replace")
    again = enqueue('{"rev": 2}', *live, "--on-conflict", "replace", "--delay", "30")
    assert again == first
    assert sql(
        "SELECT concurrency_key, key_scope, payload->>'rev', run_at > now() FROM workerpool_jobs"
    ) == [("account:42", "live", "2", True)]
    held = run_cli(
        "enqueue", "myapp:pool", "sync", *live, "--on-conflict", "error", url=db_url, cwd=app_dir
    )
    assert held.returncode == 1 and f"is held by job {first}" in held.stderr
    assert enqueue("{}", "--key", "once", "--unique-for", "60") != first
    assert sql("SELECT key_scope FROM workerpool_jobs WHERE key = 'once'") == [("for",)]
    tagged = enqueue("{}", "--tag", "tenant:7", "--tag", "import", "--tag", "tenant:7")
    assert sql("SELECT tags FROM workerpool_jobs WHERE id = %s", int(tagged)) == [
        (["tenant:7", "import"],)
    ]
