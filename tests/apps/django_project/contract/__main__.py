"""``python -m tests.apps.django_project.contract [DJANGO_SDIST]``: Django's own tests/tasks
against WorkerpoolBackend, on the database $WORKERPOOL_DATABASE_URL names (Django's runner
makes and drops its test database beside it). Without an sdist, pip downloads the one of the
Django installed. Exits non-zero if a test fails or errs."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import django

BACKENDS = "tests.apps.django_project.contract.backends"
#: The whole adaptation: Django's reference backends are ours (see the package docstring).
SUBSTITUTIONS = {
    "django.tasks.backends.dummy.DummyBackend": f"{BACKENDS}.DummyBackend",
    "django.tasks.backends.immediate.ImmediateBackend": f"{BACKENDS}.ImmediateBackend",
    "from django.tasks.backends.dummy import": f"from {BACKENDS} import",
    "from django.tasks.backends.immediate import": f"from {BACKENDS} import",
}


def download_sdist(directory: Path) -> Path:
    version = django.get_version()
    pip = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:"]
    subprocess.run([*pip, f"Django=={version}", "-d", str(directory)], check=True)
    [sdist] = directory.glob(f"[dD]jango-{version}.tar.gz")
    return sdist


def extract_tests(sdist: Path, directory: Path) -> Path:
    """tests/tasks of ``sdist`` as the package ``tasks`` in ``directory``, adapted."""
    package = directory / "tasks"
    package.mkdir()
    applied = set()
    with tarfile.open(sdist) as archive:
        for member in archive.getmembers():
            parts = Path(member.name).parts
            if parts[1:3] != ("tests", "tasks") or not member.name.endswith(".py"):
                continue
            source = archive.extractfile(member).read().decode()
            for old, new in SUBSTITUTIONS.items():
                if old in source:
                    applied.add(old)
                    source = source.replace(old, new)
            (package / parts[-1]).write_text(source)
    if set(SUBSTITUTIONS) - applied:
        raise SystemExit(f"{sdist.name}: not found in tests/tasks: {set(SUBSTITUTIONS) - applied}")
    return package


def main(argv: list[str]) -> int:
    with tempfile.TemporaryDirectory(prefix="django-tasks-contract-") as tmp:
        sdist = Path(argv[0]) if argv else download_sdist(Path(tmp))
        extract_tests(sdist, Path(tmp))
        print(f"Django {django.get_version()}'s tests/tasks from {sdist.name}", flush=True)
        os.environ["DJANGO_SETTINGS_MODULE"] = "tests.apps.django_project.contract.settings"
        sys.path.insert(0, tmp)
        from django.core.management import execute_from_command_line

        try:
            execute_from_command_line(["django-admin", "test", "tasks", "--noinput", "-v", "2"])
        except SystemExit as exit:
            return int(exit.code or 0) if not isinstance(exit.code, str) else 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
