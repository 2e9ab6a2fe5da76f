"""pytriton's backend keeps the Python's rule in C: its units stand in layers, each uses only the units
below it, and none calls another in a ring.

A unit is one ``x.c`` with its header ``x.h`` (or a header alone: ``model.h``, the generated
``contract.h``, ``triton_api.h``). A unit uses another when it includes its header or names
something the other defines: a ``pyt_*`` function, type or struct, or a ``PYT_*`` macro or enum
constant (comments and string literals are not read). `LAYERS` is the rule, top to bottom; the
same order stands at the top of ``backend.c`` and in docs/architecture.md. A ring among the C
files makes each one's meaning depend on the others', as a ring of imports does in the Python
(tests/unit/test_layout.py), and hides which one is the foundation.
"""

from __future__ import annotations

import pathlib
import re
import shutil
from typing import Dict, List, Set, Tuple

BACKEND = pathlib.Path(__file__).resolve().parents[3] / "pytriton" / "backend"

LAYERS: Tuple[Tuple[str, ...], ...] = (
    ("backend",),  # Triton's entry points, a model's configuration, the readiness gate
    # a plain callable's batch; streams and coroutines; the worker's metrics; a multiplexed model's routing
    ("execute", "relay", "metrics", "route"),
    ("batch",),  # what every batch does around the worker's answer: answers before it goes, statistics after
    ("instance",),  # the connection to the worker handler: greeting, reconnection, a death's cause, idle watcher
    ("requests", "responses"),  # Triton's requests -> an InferBatch (the way in); the answer -> responses (out)
    ("model",),  # what a model's configuration tells the backend
    ("util", "arena"),  # clocks, logging, errors, data types; shared memory
    ("wire", "json"),  # the wire's encoding and framing; the configuration's JSON
    ("contract", "triton_api"),  # the wire's names, generated from protocol.py; Triton's C API as we declare it
)
"""The backend's units, top to bottom: a unit may use only units on a lower line (not its neighbours)."""

_NOISE = re.compile(r"//[^\n]*|/\*.*?\*/|\"(?:\\.|[^\"\\\n])*\"|'(?:\\.|[^'\\\n])*'", re.DOTALL)
_INCLUDE = re.compile(r'^\s*#\s*include\s+"(\w+)\.h"', re.MULTILINE)
_HEAD = r"^[A-Za-z_][\w \t\*]*?\b(pyt_\w+)\s*\([^;{}]*?\)\s*(?:__attribute__\s*\(\([^;{}]*?\)\)\s*)?"
_FUNCTION = re.compile(_HEAD + r"\{", re.MULTILINE)
_PROTOTYPE = re.compile(_HEAD + r";", re.MULTILINE)
_TYPES = (
    re.compile(r"\}\s*(pyt_\w+)\s*;"),  # typedef struct {...} pyt_x;
    re.compile(r"typedef\s[^;{}]*?\b(pyt_\w+)\s*;"),  # typedef struct pyt_x pyt_x;
    re.compile(r"\bstruct\s+(pyt_\w+)\s*\{"),
    re.compile(r"^\s*#\s*define\s+(PYT_\w+)", re.MULTILINE),
)
_ENUM = re.compile(r"\benum\s*\w*\s*\{([^}]*)\}")
_NAME = re.compile(r"\b(?:pyt|PYT)_\w+")


def _plain(text: str) -> str:
    """The C text without its comments and string literals (line breaks kept)."""
    return _NOISE.sub(lambda match: "\n" * match.group(0).count("\n") + " ", text)


def _units(directory: pathlib.Path) -> Dict[str, List[pathlib.Path]]:
    units: Dict[str, List[pathlib.Path]] = {}
    for path in sorted([*directory.glob("*.c"), *directory.glob("*.h")]):
        units.setdefault(path.stem, []).append(path)
    return units


def _definitions(units: Dict[str, List[pathlib.Path]]) -> Dict[str, Set[str]]:
    """The pyt_* and PYT_* names each unit defines (exported functions, inline ones, types, macros, enum constants)."""
    defined: Dict[str, Set[str]] = {}
    for unit, paths in units.items():
        names = defined.setdefault(unit, set())
        for path in paths:
            text = _plain(path.read_text())
            for match in _FUNCTION.finditer(text):
                if not match.group(0).lstrip().startswith("static") or path.suffix == ".h":
                    names.add(match.group(1))
            for pattern in _TYPES:
                names.update(pattern.findall(text))
            for body in _ENUM.findall(text):
                names.update(re.findall(r"\b(PYT_\w+)\s*(?:=|,|$)", body))
    return defined


def _uses(directory: pathlib.Path) -> Dict[str, Dict[str, Set[str]]]:
    """unit -> the units it uses -> what it takes from each (a header's name for an include)."""
    units = _units(directory)
    defined = _definitions(units)
    owner = {name: unit for unit, names in sorted(defined.items()) for name in names}
    graph: Dict[str, Dict[str, Set[str]]] = {}
    for unit, paths in units.items():
        used = graph.setdefault(unit, {})
        for path in paths:
            raw = path.read_text()
            for header in _INCLUDE.findall(raw):
                if header in units and header != unit:
                    used.setdefault(header, set()).add(f'#include "{header}.h"')
            for name in set(_NAME.findall(_plain(raw))) - defined[unit]:
                if name in owner:
                    used.setdefault(owner[name], set()).add(name)
    return graph


def _homeless(directory: pathlib.Path) -> Dict[str, List[str]]:
    """The names that more than one unit defines (a use of one could not tell which unit it takes)."""
    homes: Dict[str, List[str]] = {}
    for unit, names in sorted(_definitions(_units(directory)).items()):
        for name in names:
            homes.setdefault(name, []).append(unit)
    return {name: units for name, units in sorted(homes.items()) if len(units) > 1}


def _rings(graph: Dict[str, Dict[str, Set[str]]]) -> List[List[str]]:
    """The groups of more than one unit that reach each other."""
    def reach(start: str) -> Set[str]:
        seen: Set[str] = set()
        todo = [start]
        while todo:
            for target in graph.get(todo.pop(), {}):
                if target not in seen:
                    seen.add(target)
                    todo.append(target)
        return seen

    reached = {unit: reach(unit) for unit in graph}
    rings = {tuple(sorted({unit} | {other for other in reached[unit] if unit in reached[other]})) for unit in graph}
    return sorted(list(ring) for ring in rings if len(ring) > 1)


def _upward(graph: Dict[str, Dict[str, Set[str]]]) -> List[str]:
    """Every use of a unit on the same layer or above, as `unit -> other: names`."""
    floor = {unit: depth for depth, layer in enumerate(LAYERS) for unit in layer}
    return [
        f"{unit} -> {other}: {', '.join(sorted(names))}"
        for unit, used in sorted(graph.items())
        for other, names in sorted(used.items())
        if floor.get(other, -1) <= floor.get(unit, len(LAYERS))
    ]


def _header_strays(directory: pathlib.Path) -> List[str]:
    """Functions a unit's header declares that its own .c does not define, and exported ones it does not declare."""
    strays = []
    for unit, paths in _units(directory).items():
        by_suffix = {path.suffix: _plain(path.read_text()) for path in paths}
        declared = set(_PROTOTYPE.findall(by_suffix.get(".h", "")))
        inline = set(_FUNCTION.findall(by_suffix.get(".h", "")))
        exported = {
            match.group(1)
            for match in _FUNCTION.finditer(by_suffix.get(".c", ""))
            if not match.group(0).lstrip().startswith("static")
        }
        strays += [f"{unit}.h declares {name}, which {unit}.c does not define" for name in sorted(declared - exported)]
        undeclared = sorted(exported - declared - inline)
        strays += [f"{unit}.c exports {name}, which {unit}.h does not declare" for name in undeclared]
    return strays


def test_every_unit_has_its_layer():
    units = set(_units(BACKEND))
    placed = [unit for layer in LAYERS for unit in layer]
    assert len(placed) == len(set(placed)), "a unit stands on two layers"
    assert units - set(placed) == set(), "place the new unit in LAYERS (and at the top of backend.c)"
    assert set(placed) - units == set(), "remove the unit that no longer exists from LAYERS"


def test_each_name_has_one_unit():
    assert _homeless(BACKEND) == {}


def test_backend_c_lists_the_units_in_their_layers():
    listed = re.findall(r"^ \*   (\w+)\.[ch] ", (BACKEND / "backend.c").read_text(), re.MULTILINE)
    assert listed == [unit for layer in LAYERS for unit in layer]


def test_units_use_only_the_layers_below():
    assert _upward(_uses(BACKEND)) == []


def test_no_ring_of_units():
    assert _rings(_uses(BACKEND)) == []


def test_each_header_declares_only_its_own_units_functions():
    assert _header_strays(BACKEND) == []


def test_the_graph_sees_what_each_unit_takes():
    graph = _uses(BACKEND)
    assert "pyt_execute" in graph["backend"]["execute"]
    assert "pyt_instance" in graph["execute"]["instance"]
    assert "PYT_KIND_BATCH_RESULT" in graph["execute"]["contract"]
    assert '#include "wire.h"' in graph["util"]["wire"]


def _planted(tmp_path: pathlib.Path, file: str, old: str, new: str) -> pathlib.Path:
    """A copy of the backend with `old` replaced by `new` in `file`."""
    planted = tmp_path / "backend"
    shutil.copytree(BACKEND, planted)
    path = planted / file
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))
    return planted


def test_a_planted_ring_is_refused(tmp_path):
    # The shape before issue 44: the connection's close stopped the relay, which uses the connection.
    watcher = "  if (instance->watcher_started) {"
    graph = _uses(_planted(tmp_path, "instance.c", watcher, "  pyt_relay_stop(NULL);\n" + watcher))
    assert _rings(graph) == [["batch", "instance", "relay"]]
    assert _upward(graph) == ["instance -> relay: pyt_relay_stop"]


def test_a_call_between_neighbours_is_refused(tmp_path):
    start = "  uint64_t exec_start = pyt_now_ns();"
    graph = _uses(_planted(tmp_path, "execute.c", start, start + "\n  pyt_metrics_stop(NULL);"))
    assert _rings(graph) == []
    assert _upward(graph) == ["execute -> metrics: pyt_metrics_stop"]


def test_a_stray_declaration_is_refused(tmp_path):
    planted = _planted(tmp_path, "execute.h", "#endif", "void pyt_relay_stop(struct pyt_relay* relay);\n#endif")
    assert _header_strays(planted) == ["execute.h declares pyt_relay_stop, which execute.c does not define"]


def test_the_ring_finder_finds_a_ring():
    graph = {"a": {"b": {"x"}}, "b": {"c": {"y"}}, "c": {"a": {"z"}}, "d": {"a": {"w"}}}
    assert _rings(graph) == [["a", "b", "c"]]
