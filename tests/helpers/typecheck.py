"""``mypy --strict`` on files of a test's own, as a user's CI runs it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.helpers.paths import ROOT


def mypy_strict(
    cache: Path, *args: str, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """Run mypy on ``args`` with its cache in ``cache`` (SQLAlchemy's stubs read once)."""
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--cache-dir",
            str(cache),
            "--follow-imports=silent",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=500,
        cwd=cwd,
        # an editable install is an import hook mypy does not follow: the checkout is the path
        env={**os.environ, "MYPYPATH": str(ROOT)},
    )
