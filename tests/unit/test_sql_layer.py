"""``workerpool/sql/`` holds statements and what builds them: no service of the client's.

A function there takes a connection, never the pool; no module there starts a thread or opens a
tracing span (those are the client's and the runtime's). Read from the source with ``ast``, as
the layers test reads imports.
"""

from __future__ import annotations

import ast
from pathlib import Path

SQL = Path(__file__).resolve().parents[2] / "workerpool" / "sql"
SERVICES = {"pool"}


def _modules() -> list[tuple[str, ast.Module]]:
    return [(path.name, ast.parse(path.read_text())) for path in sorted(SQL.glob("*.py"))]


def _parameters(node: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    args = node.args
    return [a.arg for a in args.posonlyargs + args.args + args.kwonlyargs]


def test_no_function_in_sql_takes_the_pool() -> None:
    offenders = [
        f"{name}:{node.lineno} {node.name}({parameter})"
        for name, tree in _modules()
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        for parameter in _parameters(node)
        if parameter in SERVICES
    ]
    assert not offenders, f"sql/ functions that take the client's pool: {offenders}"


def test_no_module_in_sql_starts_a_thread_or_opens_a_span() -> None:
    offenders = []
    for name, tree in _modules():
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr in {"Thread", "Timer"}:
                offenders.append(f"{name}:{node.lineno} a thread")
            if isinstance(node, ast.ImportFrom) and node.module and "tracing" in node.module:
                offenders.append(f"{name}:{node.lineno} imports tracing")
            if isinstance(node, ast.ImportFrom) and any(a.name == "tracing" for a in node.names):
                offenders.append(f"{name}:{node.lineno} imports tracing")
            if isinstance(node, ast.Import | ast.ImportFrom) and "opentelemetry" in ast.dump(node):
                offenders.append(f"{name}:{node.lineno} imports opentelemetry")
    assert not offenders, f"sql/ modules that run a service: {offenders}"
