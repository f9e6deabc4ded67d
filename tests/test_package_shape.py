"""The package's shape: small modules, and an import graph that runs one way.

Read from the source with :mod:`ast` (nothing is imported), so the guard sees
every import a module makes: at the top, inside functions and under
``TYPE_CHECKING``, since each of them is a dependency a reader has to follow.

* No module is over :data:`MAX_MODULE_LINES` lines.
* The import graph among the package's modules has no cycle.
* ``core/`` is the pure domain at the bottom: it imports only ``core/``, never the
  layers built on it (hooks, operators, sensors, triggers, plugins, cli, engines,
  runtime, ...).

Each failure names the offending modules, so the message says what to split or move.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from pathlib import Path

from tests.conftest import TESTS

PACKAGE_NAME = "elasticgrid_provider"
PACKAGE = TESTS.parent / PACKAGE_NAME
CORE = f"{PACKAGE_NAME}.core"
MAX_MODULE_LINES = 500


def package_modules(package: Path) -> dict[str, Path]:
    """Every module of ``package`` by dotted name (a package by its ``__init__.py``)."""
    modules = {}
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def imported_modules(name: str, path: Path, modules: Mapping[str, Path]) -> set[str]:
    """The modules of ``modules`` that module ``name`` imports, anywhere in its source.

    ``from pkg import name`` counts as an import of ``pkg.name`` when that is a
    module, else of ``pkg``; relative imports are resolved against ``name``.
    """
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name in modules)
        elif isinstance(node, ast.ImportFrom):
            source = _import_source(name, path, node)
            for alias in node.names:
                submodule = f"{source}.{alias.name}"
                if submodule in modules:
                    found.add(submodule)
                elif source in modules:
                    found.add(source)
    found.discard(name)
    return found


def _import_source(name: str, path: Path, node: ast.ImportFrom) -> str:
    """The absolute module name a ``from ... import`` reads from."""
    if not node.level:
        return node.module or ""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    base = package[: len(package) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def import_graph(package: Path) -> dict[str, set[str]]:
    """Each module of ``package`` and the modules of ``package`` it imports."""
    modules = package_modules(package)
    return {name: imported_modules(name, path, modules) for name, path in modules.items()}


def import_cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """The groups of modules that import each other, directly or round a loop (sorted).

    Tarjan's strongly connected components, iteratively; a group of one is no cycle.
    """
    order: dict[str, int] = {}
    lowest: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles = []
    for start in sorted(graph):
        if start in order:
            continue
        work: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(graph[start])))]
        order[start] = lowest[start] = len(order)
        stack.append(start)
        on_stack.add(start)
        while work:
            module, targets = work[-1]
            target = next(targets, None)
            if target is None:
                work.pop()
                if work:
                    parent = work[-1][0]
                    lowest[parent] = min(lowest[parent], lowest[module])
                if lowest[module] == order[module]:
                    group = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.append(member)
                        if member == module:
                            break
                    if len(group) > 1:
                        cycles.append(sorted(group))
            elif target not in order:
                order[target] = lowest[target] = len(order)
                stack.append(target)
                on_stack.add(target)
                work.append((target, iter(sorted(graph[target]))))
            elif target in on_stack:
                lowest[module] = min(lowest[module], order[target])
    return sorted(cycles)


def cycle_sentence(group: list[str], graph: Mapping[str, set[str]]) -> str:
    """One line naming a cycle's modules and each import that closes it."""
    members = set(group)
    links = [
        f"{source} -> {target}" for source in group for target in sorted(graph[source] & members)
    ]
    return f"{', '.join(group)} import each other ({'; '.join(links)})"


def test_no_module_in_the_package_is_over_500_lines():
    too_long = {
        name: len(path.read_text().splitlines())
        for name, path in package_modules(PACKAGE).items()
        if len(path.read_text().splitlines()) > MAX_MODULE_LINES
    }
    assert not too_long, (
        f"modules over {MAX_MODULE_LINES} lines (split them by responsibility): "
        + ", ".join(f"{name} ({lines} lines)" for name, lines in sorted(too_long.items()))
    )


def test_the_package_import_graph_has_no_cycle():
    graph = import_graph(PACKAGE)
    cycles = import_cycles(graph)
    assert not cycles, "import cycles in the package:\n" + "\n".join(
        cycle_sentence(group, graph) for group in cycles
    )


def test_no_two_core_modules_import_each_other():
    graph = import_graph(PACKAGE)
    core_graph = {
        name: {target for target in targets if target.startswith(f"{CORE}.")}
        for name, targets in graph.items()
        if name.startswith(f"{CORE}.")
    }
    cycles = import_cycles(core_graph)
    assert not cycles, "core modules that import each other:\n" + "\n".join(
        cycle_sentence(group, core_graph) for group in cycles
    )


def test_core_imports_nothing_built_on_it():
    graph = import_graph(PACKAGE)
    upward = sorted(
        f"{name} imports {target}"
        for name, targets in graph.items()
        if name == CORE or name.startswith(f"{CORE}.")
        for target in targets
        if not (target == CORE or target.startswith(f"{CORE}."))
    )
    assert not upward, (
        "core/ is the pure domain and imports only core/; these imports reach above it: "
        + "; ".join(upward)
    )


# -- the guard itself, on a small package of its own ---------------------------------------

SHAPES = {
    "__init__.py": "",
    "core/__init__.py": "",
    "core/a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from shaped.core.b import B\n",
    "core/b.py": "from . import a\n",
    "core/c.py": "def late():\n    from shaped.hooks import h\n",
    "hooks/__init__.py": "",
    "hooks/h.py": "import shaped.core.c\nfrom shaped.core import a, errors_elsewhere\n",
}


def test_the_guard_sees_relative_lazy_and_type_checking_imports(tmp_path: Path):
    for relative, source in SHAPES.items():
        (tmp_path / "shaped" / relative).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "shaped" / relative).write_text(source)
    graph = import_graph(tmp_path / "shaped")
    assert graph["shaped.core.a"] == {"shaped.core.b"}
    assert graph["shaped.core.b"] == {"shaped.core.a"}
    assert graph["shaped.core.c"] == {"shaped.hooks.h"}
    # ``errors_elsewhere`` is no module: that name counts as an import of the package
    assert graph["shaped.hooks.h"] == {"shaped.core.c", "shaped.core.a", "shaped.core"}
    cycles = import_cycles(graph)
    assert cycles == [["shaped.core.a", "shaped.core.b"], ["shaped.core.c", "shaped.hooks.h"]]
    assert cycle_sentence(cycles[0], graph) == (
        "shaped.core.a, shaped.core.b import each other "
        "(shaped.core.a -> shaped.core.b; shaped.core.b -> shaped.core.a)"
    )
