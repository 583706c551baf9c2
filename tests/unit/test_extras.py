"""What the package imports, it declares: each third-party module imported by the shipped code
(workerpool, workerpool_demo, the migrations) comes from a runtime dependency or from an extra
that is not `dev`. pytest is imported by the pytest plugin only, which pytest loads. (That the
CLI runs with no extra installed is test_wheel.py's: it runs it from a venv without them.)"""

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
    extras = {
        extra: {_name(r) for r in reqs}
        for extra, reqs in project["optional-dependencies"].items()
        if extra != "dev"
    }
    return {_name(r) for r in project["dependencies"]}, extras


def imports(path: Path) -> list[str]:
    """The top-level module of each import of a file (TYPE_CHECKING blocks left out)."""
    found: list[str] = []
    stack: list[ast.AST] = [ast.parse(path.read_text())]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            stack.extend(node.orelse)
            continue
        if isinstance(node, ast.Import):
            found.extend(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append(node.module.split(".")[0])
        stack.extend(ast.iter_child_nodes(node))
    return found


def test_every_third_party_import_is_declared():
    core, extras = declared()
    optional = set().union(*extras.values())
    dists = packages_distributions()
    problems = []
    for root in SHIPPED:
        for path in sorted(root.rglob("*.py")):
            where = path.relative_to(ROOT).as_posix()
            for module in imports(path):
                if module in sys.stdlib_module_names or module in OURS or module == "__future__":
                    continue
                if module == "pytest" and where in LOADED_BY_PYTEST:
                    continue
                names = {_name(d) for d in dists.get(module, [module])}
                if names & core:
                    continue
                if names & optional:
                    continue
                problems.append(f"{where}: {module} is in no runtime dependency or extra")
    assert problems == []


def test_the_extras_other_features_need():
    _, extras = declared()
    assert extras["embedded"] >= {"pgserver"}
    assert extras["metrics"] >= {"prometheus-client"}
    assert extras["otel"] == {"opentelemetry-api"}  # the API only: the app brings the SDK
    assert extras["asyncio"] >= {"sqlalchemy"}
    assert extras["web"] >= {"starlette", "jinja2", "uvicorn"}
