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
"""


@pytest.fixture
def app_dir(tmp_path: Path) -> Path:
    (tmp_path / "myapp.py").write_text(APP)
    return tmp_path


def test_migrate_then_enqueue(empty_db_url, app_dir, tmp_path):
    done = run_cli("migrate", url=empty_db_url, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    out = run_cli("enqueue", "myapp:pool", "send_welcome", "--payload", '{"user_id": 1}',
                  "--key", "welcome:1", url=empty_db_url, cwd=app_dir)
    assert out.returncode == 0, out.stderr
    again = run_cli("enqueue", "myapp:pool", "send_welcome", "--payload", '{"user_id": 1}',
                    "--key", "welcome:1", url=empty_db_url, cwd=app_dir)
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
