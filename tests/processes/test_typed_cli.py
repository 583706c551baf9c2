"""A typed task from the command line, as a user runs it: `workerpool enqueue` checks the
payload against the handler's signature (one line, exit 1, nothing written), and `workerpool
job show --app` and `workerpool status --job --app` show the payload as the arguments by
name."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.cli import run_cli

APP = """
from dataclasses import dataclass

from workerpool import Job, WorkerPool

pool = WorkerPool()
pool.queue("email")


@dataclass
class Welcome:
    email: str
    user_id: int


@pool.task(queue="email")
def send_welcome(job: Job, welcome: Welcome, template: str = "welcome") -> None:
    pass
"""


@pytest.fixture
def app_dir(tmp_path: Path) -> Path:
    (tmp_path / "typedapp.py").write_text(APP)
    return tmp_path


@pytest.mark.slow  # five command-line processes
def test_enqueue_checks_a_typed_payload_and_job_show_names_the_arguments(db_url, app_dir, sql):
    welcome = {"welcome": {"email": "eve@example.com", "user_id": 3}}
    out = run_cli(
        "enqueue",
        "typedapp:pool",
        "send_welcome",
        "--payload",
        json.dumps(welcome),
        url=db_url,
        cwd=app_dir,
    )
    assert out.returncode == 0, out.stderr
    job_id = int(out.stdout)
    shown = run_cli("job", "show", str(job_id), "--app", "typedapp:pool", url=db_url, cwd=app_dir)
    assert shown.returncode == 0, shown.stderr
    assert (
        "ARGUMENTS send_welcome(welcome: Welcome, template: str = 'welcome')\n"
        '  welcome = {"email": "eve@example.com", "user_id": 3}\n'
        '  template = "welcome"  (default)\n'
    ) in shown.stdout
    as_json = run_cli(
        "job", "show", str(job_id), "--app", "typedapp:pool", "--json", url=db_url, cwd=app_dir
    )
    arguments = json.loads(as_json.stdout)["arguments"]["arguments"]
    assert [(a["name"], a["source"]) for a in arguments] == [
        ("welcome", "given"),
        ("template", "default"),
    ]
    why = run_cli("status", "--job", str(job_id), "--app", "typedapp:pool", url=db_url, cwd=app_dir)
    assert why.returncode == 0, why.stderr
    assert '  welcome = {"email": "eve@example.com", "user_id": 3}\n' in why.stdout
    bare = run_cli("status", "--job", str(job_id), url=db_url, cwd=app_dir)
    assert "ARGUMENTS" not in bare.stdout  # without the app, no signature to read


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (
            '{"welcome": {"email": "eve@example.com", "user_id": "3"}}',
            "task send_welcome: argument 'welcome': Expected `int`, got `str` - at"
            " `welcome.user_id`",
        ),
        ('{"welcome": {"email": "eve@example.com"}}', "Object missing required field `user_id`"),
        ("{}", "missing argument 'welcome'"),
        ('{"welcome": {"email": "e", "user_id": 3}, "to": 1}', "unexpected argument 'to'"),
    ],
)
def test_a_payload_that_does_not_fit_is_one_line_and_nothing_is_written(
    db_url, app_dir, sql, payload, message
):
    out = run_cli(
        "enqueue", "typedapp:pool", "send_welcome", "--payload", payload, url=db_url, cwd=app_dir
    )
    assert out.returncode == 1
    assert message in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert sql("SELECT count(*) FROM workerpool_jobs") == [(0,)]
