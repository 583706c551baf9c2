"""The code map of docs/internals.md names only modules that exist, and every dotted name the
package, the tests, the bench and the docs cite resolves.

Every backquoted path under ``workerpool/`` must be a file or folder of the checkout, every
backquoted ``something.py`` a file somewhere in the package, the demo or the tests, and every
backquoted dotted ``workerpool.<module>...`` name must start with a module of the package.
Beyond the map: a ``:mod:``, ``:class:``, ``:func:``, ``:meth:``, ``:data:``, ``:attr:`` or
``:exc:`` role in the package's docstrings and comments (absolute, relative with leading dots, or
relative to its module), and a backquoted ``workerpool.<module>...`` anywhere, names an object
that imports (a string the package emits, a span's or a logger's name, counts too).
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import re
from pathlib import Path

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


ROLE = re.compile(r":(?:mod|class|func|meth|data|attr|exc|obj):`~?([\w.]+)(?:\(\))?`")
QUOTED = re.compile(r"(?<![`\w])``?(workerpool(?:\.\w+)+)(?:\(\))?``?(?!`)")
EMITTED = re.compile(r"[\"'](workerpool(?:\.\w+)+)[\"']")
CITING = ("workerpool/**/*.py", "tests/**/*.py", "bench/**/*.py", "docs/**/*.md", "README.md")


def _module_of(path: Path) -> tuple[str, bool]:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    package = parts[-1] == "__init__"
    return ".".join(parts[:-1] if package else parts), package


def _absolute(name: str, path: Path) -> str | None:
    """A role's target as a full dotted name, or None for a bare name (a local one)."""
    here, package = _module_of(path)
    if name.startswith("workerpool"):
        return name
    if name.startswith("."):
        dots = len(name) - len(name.lstrip("."))
        base = here.split(".") if package else here.split(".")[:-1]
        return ".".join([*base[: len(base) - dots + 1], name.lstrip(".")])
    if "." not in name:
        return None
    if importlib.util.find_spec(name.split(".")[0]) is not None:
        return name  # the standard library's or a dependency's
    return f"{here}.{name}"


def _cited(path: Path) -> set[str]:
    text = path.read_text()
    names = {match[1] for match in QUOTED.finditer(text)}
    if path.suffix == ".py" and path.is_relative_to(ROOT / "workerpool"):
        names |= {n for match in ROLE.finditer(text) if (n := _absolute(match[1], path))}
    return names


def _resolves(name: str) -> bool:
    if importlib.util.find_spec(name.split(".")[0]) is None:
        return False
    parts = name.split(".")
    for split in range(len(parts), 0, -1):
        module = ".".join(parts[:split])
        try:
            if split == len(parts) and importlib.util.find_spec(module) is not None:
                return True  # a module: found without running it (Django's need settings)
            found: object = importlib.import_module(module)
        except ModuleNotFoundError:
            continue
        for attr in parts[split:]:
            if not hasattr(found, attr):
                return _an_attribute_it_sets(found, attr)
            found = getattr(found, attr)
        return True
    return False


def _an_attribute_it_sets(owner: object, attr: str) -> bool:
    """An instance attribute (set in a method), a dataclass field or a named tuple's field."""
    if not isinstance(owner, type):
        return False
    fields = {*getattr(owner, "__annotations__", {}), *getattr(owner, "_fields", ())}
    return attr in fields or re.search(rf"self\.{attr}\b", inspect.getsource(owner)) is not None


def test_every_dotted_name_cited_resolves():
    emitted = {
        name
        for path in (ROOT / "workerpool").rglob("*.py")
        for name in EMITTED.findall(path.read_text())
    }
    known = emitted | {"workerpool._alembic"}  # alembic/, packaged under that name (pyproject)
    cited = {
        (path.relative_to(ROOT).as_posix(), name)
        for pattern in CITING
        for path in ROOT.glob(pattern)
        for name in _cited(path)
    }
    unresolved = sorted(
        (path, name) for path, name in cited if name not in known and not _resolves(name)
    )
    assert len(cited) > 100 and not unresolved, f"names that resolve to nothing: {unresolved}"
