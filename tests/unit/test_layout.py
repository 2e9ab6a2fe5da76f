"""The package's shape: modules small enough to read whole, and none importing another in a ring.

Imports inside functions count too: a ring of imports makes a module's meaning depend on which
one is imported first, and hides which one is the foundation of the other.
"""

from __future__ import annotations

import ast
import pathlib
from typing import Dict, List, Set

PACKAGE = pathlib.Path(__file__).resolve().parents[2] / "pytriton"


def _modules() -> Dict[str, pathlib.Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        if "tritonserver" in path.relative_to(PACKAGE).parts:
            continue  # the server tree fetched at install, not our code
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def _imports(modules: Dict[str, pathlib.Path]) -> Dict[str, Set[str]]:
    graph: Dict[str, Set[str]] = {}
    for name, path in modules.items():
        targets = graph.setdefault(name, set())
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("pytriton"):
                for alias in node.names:
                    inner = f"{node.module}.{alias.name}"
                    targets.add(inner if inner in modules else node.module)
            elif isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names if alias.name.startswith("pytriton"))
        targets.discard(name)
        targets.intersection_update(modules)
    return graph


def _rings(graph: Dict[str, Set[str]]) -> List[List[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm, iterative)."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack: Set[str] = set()
    rings = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                ring = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    ring.append(member)
                    if member == node:
                        break
                if len(ring) > 1:
                    rings.append(sorted(ring))
    return rings


def test_no_import_ring():
    modules = _modules()
    assert len(modules) > 50
    assert _rings(_imports(modules)) == []


def test_the_ring_finder_finds_a_ring():
    assert _rings({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


MAX_MODULE_LINES = 500


def test_no_module_is_over_500_lines():
    """A module that grows past this does more than one job: split it along the flow (docs/architecture.md)."""
    sizes = {name: len(path.read_text(encoding="utf-8").splitlines()) for name, path in _modules().items()}
    assert len(sizes) > 50  # the package was found
    over = {name: lines for name, lines in sizes.items() if lines > MAX_MODULE_LINES}
    assert not over, f"modules over {MAX_MODULE_LINES} lines: {over}"
