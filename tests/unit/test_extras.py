"""What the package imports, it declares: each third-party module imported by the shipped code
(workerpool, workerpool_demo, the migrations) comes from a runtime dependency, or from an extra
that is not `dev` (then the import is guarded: inside a function or a try, so that the package
still imports without it). pytest is imported by the pytest plugin only, which pytest loads."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = [ROOT / "workerpool", ROOT / "workerpool_demo", ROOT / "alembic"]
OURS = {"workerpool", "workerpool_demo", "alembic_versions"}
LOADED_BY_PYTEST = {"workerpool/testing/plugin.py"}


def _name(requirement: str) -> str:
    return re.split(r"[\[<>=!~; ]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def declared() -> tuple[set[str], dict[str, set[str]]]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = {extra: {_name(r) for r in reqs}
              for extra, reqs in project["optional-dependencies"].items() if extra != "dev"}
    return {_name(r) for r in project["dependencies"]}, extras


def imports(path: Path) -> list[tuple[str, bool]]:
    """(top-level module, guarded) for each import of a file, TYPE_CHECKING blocks left out."""
    found: list[tuple[str, bool]] = []

    def visit(node: ast.AST, guarded: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue
            if isinstance(child, ast.Import):
                found.extend((a.name.split(".")[0], guarded) for a in child.names)
            elif isinstance(child, ast.ImportFrom) and child.level == 0 and child.module:
                found.append((child.module.split(".")[0], guarded))
            inner = guarded or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Try)
            visit(child, inner)

    visit(ast.parse(path.read_text()), False)
    return found


def test_every_third_party_import_is_declared():
    core, extras = declared()
    optional = set().union(*extras.values())
    dists = packages_distributions()
    problems = []
    for root in SHIPPED:
        for path in sorted(root.rglob("*.py")):
            where = path.relative_to(ROOT).as_posix()
            for module, guarded in imports(path):
                if module in sys.stdlib_module_names or module in OURS or module == "__future__":
                    continue
                if module == "pytest" and where in LOADED_BY_PYTEST:
                    continue
                names = {_name(d) for d in dists.get(module, [module])}
                if names & core:
                    continue
                if names & optional and guarded:
                    continue
                problems.append(f"{where}: {module} ({'guarded' if guarded else 'unguarded'}) "
                                f"is in no runtime dependency{'' if guarded else ' or extra'}")
    assert problems == []


def test_the_extras_other_features_need():
    _, extras = declared()
    assert extras["embedded"] >= {"pgserver"}
    assert extras["metrics"] >= {"prometheus-client"}
    assert extras["otel"] == {"opentelemetry-api"}  # the API only: the app brings the SDK
    assert extras["asyncio"] >= {"sqlalchemy"}
