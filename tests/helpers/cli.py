"""The ``workerpool`` command as a user runs it: a real process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.helpers.paths import ROOT


def run_cli(*args: str, url, cwd: Path, extra_env: dict | None = None):
    """``python -m workerpool ARGS`` on ``url``, with no other WORKERPOOL_* setting inherited."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WORKERPOOL_")}
    env.update(
        {
            "WORKERPOOL_DATABASE_URL": url.render_as_string(hide_password=False),
            "PYTHONPATH": str(ROOT),
        }
    )
    env.update(extra_env or {})
    return subprocess.run(
        [sys.executable, "-m", "workerpool", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
