"""The ``workerpool`` package is layered (DESIGN §13), and its import graph has no cycle.

Every ``import`` and ``from ... import`` of every module counts, absolute or relative, at module
level or inside a function: a lazy import placed to dodge a cycle still leaves the two modules
depending on each other, and a lazy import of a higher layer is still a dependency on it.

- **Layers.** A module imports only from its own layer and the layers before it in
  :data:`LAYERS`; the process layer, which the cheap probe and the database-free parent import,
  only from the model. Imports under ``if TYPE_CHECKING:`` count here too: naming a type of
  another layer is depending on it.
- **Cycles.** Imports under ``if TYPE_CHECKING:`` are left out: they never run.

:func:`check` is the whole verdict; the last tests run it on planted trees to show it fails.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

PACKAGE = "workerpool"
ROOT = Path(__file__).resolve().parents[2] / PACKAGE

#: The layers in order, each with the module prefixes (relative to the package) it holds.
#: ``migrate`` and ``schema`` are documented public paths (DESIGN §11, docs/deployment.md: an
#: application's Alembic ``env.py`` imports them): Alembic over ``sql/schema.py``, SQL's layer.
#: ``dead`` is the dead-letter queue at the path docs/operations.md gives it; ``maintenance``
#: and ``__main__`` are ``python -m`` entry points; ``chaos`` the fault-injection run
#: (``python -m workerpool.chaos``), a tool on top like the command line. ``contrib`` (framework
#: integrations) is outermost: it may use any layer, and nothing of the package imports it.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("model", ("model",)),
    ("sql", ("sql", "migrate", "schema")),
    ("runtime", ("runtime",)),
    ("process", ("process",)),
    ("client", ("client",)),
    ("ops", ("ops", "dead")),
    ("top", ("cli", "web", "testing", "chaos", "maintenance", "__main__", "")),
    ("contrib", ("contrib",)),
)
#: Layers that may import fewer than every layer before them.
NARROW = {"process": {"model"}}


def module_files(root: Path = ROOT, package: str = PACKAGE) -> dict[str, Path]:
    """Dotted module name -> file, for every module of the package (packages by __init__)."""
    modules = {}
    for path in sorted(root.rglob("*.py")):
        parts = [package, *path.relative_to(root).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _import_nodes(tree: ast.AST, typing: bool) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement, at any depth; under ``if TYPE_CHECKING:`` only if ``typing``."""
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _is_type_checking(node) and not typing:
            stack.extend(node.orelse)
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def _owning_module(name: str, modules: Mapping[str, Path]) -> str | None:
    """The longest prefix of ``name`` that is a module of the package (``a.b.attr`` -> ``a.b``)."""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in modules:
            return candidate
        parts.pop()
    return None


def imports_of(
    module: str, path: Path, modules: Mapping[str, Path], *, typing: bool = False
) -> set[str]:
    """The package's modules that ``module`` imports."""
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in _import_nodes(ast.parse(path.read_text(), str(path)), typing):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            if node.level:
                base = module.split(".")
                drop = node.level - 1 if is_package else node.level
                base = base[: len(base) - drop] if drop else base
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            # `from a import b`: the submodule a.b when there is one, else the module a
            targets = [
                f"{source}.{alias.name}" if f"{source}.{alias.name}" in modules else source
                for alias in node.names
            ]
        for target in targets:
            owner = _owning_module(target, modules)
            if owner is not None and owner != module:
                found.add(owner)
    return found


def import_graph(
    root: Path = ROOT, package: str = PACKAGE, *, typing: bool = False
) -> dict[str, set[str]]:
    modules = module_files(root, package)
    return {name: imports_of(name, path, modules, typing=typing) for name, path in modules.items()}


def cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """One cycle through each strongly connected component that has one (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(component)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return [_cycle_within(sorted(c), graph) for c in components]


def _cycle_within(component: list[str], graph: Mapping[str, set[str]]) -> list[str]:
    """A shortest cycle through the component's first module, as a path back to it."""
    members, start = set(component), component[0]
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for nxt in sorted(graph[node] & members):
                if nxt == start:
                    return paths[node] + [start]
                if nxt not in paths:
                    paths[nxt] = paths[node] + [nxt]
                    following.append(nxt)
        frontier = following
    raise AssertionError(f"no cycle through {start}")  # pragma: no cover - Tarjan found one


def layer_of(
    module: str, package: str = PACKAGE, layers: Sequence[tuple[str, tuple[str, ...]]] = LAYERS
) -> str:
    """The layer holding ``module``: the one with the longest matching prefix."""
    rest = module[len(package) + 1 :] if module != package else ""
    best, length = None, -1
    for name, prefixes in layers:
        for prefix in prefixes:
            if (rest == prefix or rest.startswith(prefix + ".") or prefix == "") and len(
                prefix
            ) > length:
                best, length = name, len(prefix)
    assert best is not None, f"{module} is in no layer"
    return best


def allowed(
    layer: str,
    layers: Sequence[tuple[str, tuple[str, ...]]] = LAYERS,
    narrow: Mapping[str, set[str]] = NARROW,
) -> set[str]:
    """The layers ``layer`` may import: itself and those before it (or fewer: NARROW)."""
    names = [name for name, _ in layers]
    before = set(names[: names.index(layer)])
    return {layer} | (narrow[layer] & before if layer in narrow else before)


def layer_violations(
    graph: Mapping[str, set[str]],
    package: str = PACKAGE,
    layers: Sequence[tuple[str, tuple[str, ...]]] = LAYERS,
    narrow: Mapping[str, set[str]] = NARROW,
) -> list[str]:
    """``a (layer) -> b (layer)`` for each import that goes against the layer order."""
    found = []
    for module in sorted(graph):
        mine = layer_of(module, package, layers)
        for target in sorted(graph[module]):
            theirs = layer_of(target, package, layers)
            if theirs not in allowed(mine, layers, narrow):
                found.append(f"{module} ({mine}) -> {target} ({theirs})")
    return found


def check(
    root: Path = ROOT,
    package: str = PACKAGE,
    layers: Sequence[tuple[str, tuple[str, ...]]] = LAYERS,
    narrow: Mapping[str, set[str]] = NARROW,
) -> list[str]:
    """Every problem of the package at ``root``: import cycles, then imports against the
    layers. Empty when it is sound."""
    problems = [" -> ".join(cycle) for cycle in cycles(import_graph(root, package))]
    problems += layer_violations(import_graph(root, package, typing=True), package, layers, narrow)
    return problems


# -- the package --------------------------------------------------------------------------------


def test_the_package_is_found():
    modules = module_files()
    assert f"{PACKAGE}.client" in modules and f"{PACKAGE}.model.errors" in modules
    assert len(modules) > 50


def test_every_module_is_in_a_layer_folder_or_a_named_entry_point():
    """Nothing new lands at the top of the package by default: the top-level layer takes only
    the entry points and folders it names."""
    tops = {name.split(".")[1] for name in module_files() if name.count(".") >= 1}
    named = {prefix for _, prefixes in LAYERS for prefix in prefixes}
    assert tops <= named, f"modules outside the layers: {sorted(tops - named)}"


def test_the_package_has_no_import_cycle_and_keeps_its_layers():
    problems = check()
    assert not problems, "\n".join(problems)


# -- the checker --------------------------------------------------------------------------------


def _plant(root: Path, files: Mapping[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_the_walk_sees_every_kind_of_import(tmp_path):
    pkg = _plant(
        tmp_path / "pkg",
        {
            "__init__.py": "from typing import TYPE_CHECKING\n"
            "if TYPE_CHECKING:\n    from .a import A\n",
            "a.py": "import os\nfrom . import b\n",
            "b.py": "from .sub.c import name\n",
            "sub/__init__.py": "from .c import name\nfrom .. import d\n",
            "sub/c.py": "def f():\n    import pkg.e.attr\n    from ..a import x\n",
            "d.py": "",
            "e.py": "",
        },
    )
    assert import_graph(pkg, "pkg") == {
        "pkg": set(),  # TYPE_CHECKING imports never run
        "pkg.a": {"pkg.b"},  # `from . import b`: the submodule, not the package
        "pkg.b": {"pkg.sub.c"},
        "pkg.sub": {"pkg.sub.c", "pkg.d"},  # relative to the package itself
        "pkg.sub.c": {"pkg.e", "pkg.a"},  # inside a function; absolute; `..`
        "pkg.d": set(),
        "pkg.e": set(),
    }
    assert import_graph(pkg, "pkg", typing=True)["pkg"] == {"pkg.a"}


def test_a_cycle_is_found_and_named():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c", "a"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_checker_reports_a_planted_cycle_and_upward_imports(tmp_path):
    pkg = _plant(
        tmp_path / "pkg",
        {
            "__init__.py": "",
            "model/__init__.py": "",
            "model/spec.py": "def late():\n    from ..sql import reads\n",  # upward, in a function
            "sql/__init__.py": "",
            "sql/reads.py": "from . import writes\n",
            "sql/writes.py": "from .reads import x\n",  # a cycle with reads
            "process/__init__.py": "",
            "process/parent.py": "from ..sql import writes\n",  # the process layer: model only
            "runtime/__init__.py": "",
            "runtime/loop.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
            "    from ..client import Pool\n",  # upward, in annotations only
            "client.py": "from .sql import reads\nfrom .model import spec\n",  # downward: fine
        },
    )
    problems = check(pkg, "pkg")
    assert problems == [
        "pkg.sql.reads -> pkg.sql.writes -> pkg.sql.reads",
        "pkg.model.spec (model) -> pkg.sql.reads (sql)",
        "pkg.process.parent (process) -> pkg.sql.writes (sql)",
        "pkg.runtime.loop (runtime) -> pkg.client (client)",
    ]


def test_a_sound_planted_tree_passes(tmp_path):
    pkg = _plant(
        tmp_path / "pkg",
        {
            "__init__.py": "",
            "model/__init__.py": "",
            "model/spec.py": "import json\n",
            "sql/__init__.py": "from ..model import spec\n",
            "process/__init__.py": "from ..model.spec import x\n",
            "ops/__init__.py": "from ..client import Pool\nfrom ..sql import y\n",
            "client.py": "from .process import z\nfrom .sql import y\n",
        },
    )
    assert check(pkg, "pkg") == []
