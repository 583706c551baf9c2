"""The code map of docs/internals.md names only modules that exist.

Every backquoted path under ``workerpool/`` must be a file or folder of the checkout, every
backquoted ``something.py`` a file somewhere in the package, the demo or the tests, and every
backquoted dotted ``workerpool.x.y`` name must start with a module of the package.
"""

from __future__ import annotations

import re

from tests.helpers.paths import ROOT

PAGE = ROOT / "docs" / "internals.md"
SEARCHED = ("workerpool", "workerpool_demo", "tests", "bench", "alembic")


def _quoted(text: str) -> list[str]:
    return re.findall(r"`([^`\n]+)`", text)


def _modules() -> set[str]:
    names = set()
    for path in (ROOT / "workerpool").rglob("*.py"):
        parts = ["workerpool", *path.relative_to(ROOT / "workerpool").with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        names.add(".".join(parts))
    return names | {"workerpool._alembic"}  # alembic/, packaged under that name (pyproject)


def test_every_path_the_code_map_names_exists():
    paths = [q for q in _quoted(PAGE.read_text()) if q.startswith("workerpool/")]
    assert len(paths) > 10  # the map names the layers' folders and modules
    missing = [p for p in paths if not (ROOT / p.rstrip("/")).exists()]
    assert not missing, f"docs/internals.md names paths that do not exist: {missing}"


def test_every_module_file_it_names_exists_somewhere():
    files = {q.split("/")[-1] for q in _quoted(PAGE.read_text()) if re.fullmatch(r"[\w/]+\.py", q)}
    present = {path.name for folder in SEARCHED for path in (ROOT / folder).rglob("*.py")}
    assert not files - present, (
        f"docs/internals.md names files that do not exist: {sorted(files - present)}"
    )


def test_every_dotted_name_it_gives_starts_with_a_module():
    modules = _modules()
    dotted = [
        q.split("(")[0]
        for q in _quoted(PAGE.read_text())
        if re.fullmatch(r"workerpool(\.\w+)+(\(\))?", q)
    ]
    known = modules - {"workerpool"}
    unknown = [
        name for name in dotted if not any(name == m or name.startswith(m + ".") for m in known)
    ]
    assert not unknown, f"docs/internals.md names modules that do not exist: {unknown}"


def test_every_module_a_docstring_links_exists():
    """``:mod:`workerpool.x``` in the package's own docstrings links a module of today's
    layout (a module that moved leaves its old name behind in the texts that cite it)."""
    modules = _modules()
    cited = {
        (path.relative_to(ROOT).as_posix(), name)
        for path in (ROOT / "workerpool").rglob("*.py")
        for name in re.findall(r":mod:`(workerpool(?:\.\w+)+)`", path.read_text())
    }
    stale = sorted((path, name) for path, name in cited if name not in modules)
    assert len(cited) > 5 and not stale, f"docstrings link modules that do not exist: {stale}"
