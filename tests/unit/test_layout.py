"""The package's shape: long modules only where they hold one idea, none importing another in a ring, and
packages importing each other only down the layers of docs/architecture.md.

Imports inside functions count too: a ring of imports makes a module's meaning depend on which
one is imported first, and hides which one is the foundation of the other. The same holds one
level up: two packages that import each other (even through different modules, so that no
module ring forms) are one package in two folders.
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


FOUNDATIONS = (
    "__init__", "access_token", "children", "client_contract", "client_regions", "constants", "environment",
    "exceptions", "exit_status", "install_hints", "notices",
)
"""Modules every package may import; they import nothing of pytriton but each other."""

MAY_IMPORT = {
    # The wire contract; the proxy runs it inside Triton's stub, so it stands alone.
    "ipc": (),
    "metrics": (),
    # What the user declares, and a deployed model's configuration as Triton reports it.
    "model_config": (),
    # The clients: nothing of the server side (what both read is in the foundations' client_contract and
    # client_regions).
    "client": ("model_config",),
    "repository": ("ipc", "model_config"),
    # The user's process side of the hop (its warm-up samples come from the repository's plan).
    "worker": ("ipc", "metrics", "model_config", "repository"),
    # The proxy model (ipc only) and the published `pytriton.proxy.types` names (the worker's requests).
    "proxy": ("ipc", "worker"),
    "decorating": ("worker",),
    "decorators": ("decorating", "worker"),
    # The tritonserver process: nothing of the bindings, nor of the user's process.
    "server": ("ipc", "model_config"),
    # `pytriton check`, a tool beside the serving path (it reads the trace settings as the worker exports them).
    "check": ("ipc", "server", "worker"),
    # The bound versions of each name (what `binding` starts and `versions` swaps).
    "bound": ("ipc", "model_config", "repository", "worker"),
    "binding": ("bound", "decorating", "ipc", "metrics", "model_config", "repository", "server", "worker"),
    "openai": ("decorating", "metrics", "model_config", "server"),
    # The facade's start and stop: they wire the bindings to the server.
    "launch": ("binding", "ipc", "model_config", "server", "worker"),
    "drain": ("binding", "ipc", "launch", "server", "worker"),
    # A version loaded beside a serving one, or unbound.
    "versions": ("binding", "bound", "ipc", "launch", "server"),
    "remote": ("binding", "bound", "launch", "model_config", "openai", "repository", "server", "versions"),
    "triton": ("binding", "bound", "drain", "launch", "model_config", "openai", "remote", "server", "versions",
               "worker"),
    "__main__": ("check", "server"),
}
"""Which package (or top-level module) of pytriton may import which, besides `FOUNDATIONS`: the layering rule."""


def _package(module: str) -> str:
    """``pytriton.server.config`` -> ``server``; the package's own ``__init__`` is ``__init__``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _package_imports(graph: Dict[str, Set[str]]) -> Dict[str, Set[str]]:
    packages: Dict[str, Set[str]] = {}
    for module, targets in graph.items():
        outside = packages.setdefault(_package(module), set())
        outside.update(_package(target) for target in targets)
        outside.discard(_package(module))
    return packages


def test_every_package_has_its_place_in_the_layers():
    packages = set(_package_imports(_imports(_modules())))
    assert packages - set(FOUNDATIONS) - set(MAY_IMPORT) == set(), "place the new package in MAY_IMPORT"
    assert set(MAY_IMPORT) - packages == set(), "remove the package that no longer exists from MAY_IMPORT"


def test_packages_import_only_down_the_layers():
    found = _package_imports(_imports(_modules()))
    below = {name: sorted(found.get(name, set()) - set(FOUNDATIONS)) for name in FOUNDATIONS}
    assert {name: targets for name, targets in below.items() if targets} == {}
    refused = {
        name: sorted(targets - set(FOUNDATIONS) - set(MAY_IMPORT.get(name, ())))
        for name, targets in found.items()
        if name not in FOUNDATIONS
    }
    assert {name: targets for name, targets in refused.items() if targets} == {}


def test_no_package_ring():
    assert _rings(_package_imports(_imports(_modules()))) == []
    # The rule itself allows none either, so widening it cannot let one in.
    assert _rings({name: set(allowed) for name, allowed in MAY_IMPORT.items()}) == []


def test_a_package_ring_is_found_where_no_module_ring_is():
    modules = {
        "pytriton.low.parser": {"pytriton.high.reader"},
        "pytriton.high.reader": {"pytriton.high.errors"},
        "pytriton.high.fetch": {"pytriton.low.common"},
        "pytriton.low.common": set(),
        "pytriton.high.errors": set(),
    }
    assert _rings(modules) == []
    assert _rings(_package_imports(modules)) == [["high", "low"]]


LONG_LINES = 800
"""Size is a hint, not a rule: a module may be long when it holds one idea, and a family of small
modules around one idea belongs in a subpackage named for it, never split by line count. A module
over this many lines must say here why it is one idea; the list is kept current both ways."""

LONG_MODULES: Dict[str, str] = {
    # "pytriton.package.module": "the one idea that makes it long",
}
"""The modules over `LONG_LINES` lines, each with its one-line reason (none today)."""


def _long_modules_out_of_date(sizes: Dict[str, int], listed: Dict[str, str]) -> Dict[str, str]:
    """What differs between the modules over `LONG_LINES` lines and `listed`, each with why."""
    stale = {}
    for name, lines in sizes.items():
        if lines > LONG_LINES and name not in listed:
            stale[name] = f"{lines} lines and not in LONG_MODULES: list it with its reason, or split it by idea"
    for name in listed:
        if name not in sizes:
            stale[name] = "listed in LONG_MODULES but no longer exists"
        elif sizes[name] <= LONG_LINES:
            stale[name] = f"listed in LONG_MODULES but {sizes[name]} lines now: take it off the list"
    return stale


def test_the_list_of_long_modules_is_current():
    sizes = {name: len(path.read_text(encoding="utf-8").splitlines()) for name, path in _modules().items()}
    assert len(sizes) > 50  # the package was found
    assert all(reason.strip() for reason in LONG_MODULES.values()), "each long module says why"
    assert _long_modules_out_of_date(sizes, LONG_MODULES) == {}


def test_the_long_module_check_fails_both_ways():
    sizes = {"pytriton.big": 900, "pytriton.shrunk": 700, "pytriton.small": 100}
    listed = {"pytriton.shrunk": "one idea", "pytriton.gone": "one idea"}
    assert set(_long_modules_out_of_date(sizes, listed)) == {"pytriton.big", "pytriton.shrunk", "pytriton.gone"}
    assert _long_modules_out_of_date(sizes, {"pytriton.big": "one idea"}) == {}
