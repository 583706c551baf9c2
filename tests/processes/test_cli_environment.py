"""A URL variable set but blank is refused with one line: it is not the same as unset (which
means the embedded PostgreSQL, or reading the primary)."""

from __future__ import annotations

import pytest

from tests.helpers.cli import run_cli


@pytest.mark.parametrize("variable", ["WORKERPOOL_DATABASE_URL", "WORKERPOOL_READ_URL"])
@pytest.mark.parametrize("blank", ["", "  "])
def test_a_blank_url_variable_is_refused_before_anything_starts(db_url, tmp_path, variable, blank):
    result = run_cli("status", url=db_url, cwd=tmp_path, extra_env={variable: blank})
    assert result.returncode != 0
    line = result.stderr.strip()
    assert len(line.splitlines()) == 1 and f"{variable} is set but empty" in line, line
    assert not (tmp_path / ".workerpool").exists()  # no embedded server was started


def on_a_terminal(db_url, tmp_path, *args: str) -> bytes:
    """``workerpool ARGS`` with its stdout and stderr on a pseudo-terminal; what it wrote."""
    import os
    import pty
    import subprocess
    import sys

    from tests.helpers.paths import ROOT

    controller, terminal = pty.openpty()
    env = {k: v for k, v in os.environ.items() if not k.startswith("WORKERPOOL_")}
    env.update(
        {
            "WORKERPOOL_DATABASE_URL": db_url.render_as_string(hide_password=False),
            "PYTHONPATH": str(ROOT),
        }
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "workerpool", *args],
        cwd=tmp_path,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=terminal,
        stderr=terminal,
    )
    os.close(terminal)
    output = b""
    while True:
        try:
            chunk = os.read(controller, 65536)
        except OSError:  # the other end closed: the process is done
            break
        if not chunk:
            break
        output += chunk
    os.close(controller)
    assert proc.wait(30) is not None
    return output


def test_control_characters_from_the_database_reach_no_terminal_raw(db_url, tmp_path, sql):
    """An error message that would retitle the window and clear the screen is shown escaped."""
    sql("""INSERT INTO workerpool_jobs (queue, task, state, dead_reason, finished_at, errors)
           VALUES ('q', 'boom', 'dead', 'exhausted', now(),
                   jsonb_build_array(jsonb_build_object('type', 'E', 'message',
                       'x' || chr(27) || ']0;owned' || chr(7) || chr(27) || '[2J' || chr(155))))""")
    listed = on_a_terminal(db_url, tmp_path, "dead", "list")
    assert b"\x1b" not in listed and b"\x07" not in listed and b"\xc2\x9b" not in listed, listed
    assert b"x\\x1b]0;owned\\x07\\x1b[2J\\x9b" in listed, listed
    refused = on_a_terminal(db_url, tmp_path, "pause", "bad\x1b[2Jname")
    assert b"\x1b" not in refused and b"bad" in refused, refused
