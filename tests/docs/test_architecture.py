"""docs/architecture.md names real modules: every `pytriton.*` name it mentions can be found."""

from __future__ import annotations

import importlib
import importlib.util
import pathlib
import re

import pytest

PAGE = pathlib.Path(__file__).resolve().parents[2] / "docs" / "architecture.md"
NAMES = sorted(set(re.findall(r"`(pytriton(?:\.[a-z_]+)+)`", PAGE.read_text(encoding="utf-8"))))


def test_the_page_names_modules():
    assert len(NAMES) > 30


@pytest.mark.parametrize("name", NAMES)
def test_every_named_module_exists(name):
    module = name
    while not _found(module):  # a name inside a module: `pytriton.server.control.load_model`
        module = module.rpartition(".")[0]
        assert module != "pytriton", f"{name} names no module of pytriton"
    if module != name:
        assert hasattr(importlib.import_module(module), name[len(module) + 1:].split(".")[0]), name


def _found(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # its parent is a module, not a package
        return False


BACKEND = PAGE.parents[1] / "pytriton" / "backend"


def test_the_page_names_every_unit_of_the_backend():
    """Each C unit by its .c file, or by its header where it is a header alone (model.h, contract.h)."""
    text = PAGE.read_text(encoding="utf-8")
    units = {path.stem: path.name for path in sorted(BACKEND.glob("*.h"))}
    units.update({path.stem: path.name for path in sorted(BACKEND.glob("*.c"))})
    assert len(units) > 10
    assert [name for name in units.values() if not re.search(rf"\b{re.escape(name)}\b", text)] == []


def test_every_backend_file_the_page_names_exists():
    named = set(re.findall(r"\b(\w+\.[ch])\b", PAGE.read_text(encoding="utf-8")))
    assert sorted(name for name in named if not (BACKEND / name).is_file()) == []


PACKAGE = PAGE.parents[1] / "pytriton"


def _modules() -> list:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        if "tritonserver" in parts or parts[-1] == "__main__":
            continue
        found.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return found


def test_the_page_names_every_module():
    """A module the page leaves out is a step nobody can find from here (the page, not the code, is the map)."""
    text = PAGE.read_text(encoding="utf-8")
    named = set(re.findall(r"`(pytriton(?:\.[a-z_0-9]+)+)`", text))
    modules = _modules()
    assert len(modules) > 100
    missing = [module for module in modules if not any(n == module or n.startswith(module + ".") for n in named)]
    assert missing == []
