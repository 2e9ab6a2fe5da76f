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
