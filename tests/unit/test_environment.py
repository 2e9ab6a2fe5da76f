"""pytriton's environment variables are named once, in `pytriton.environment`, and the code reads them from there.

Read as the code is: every ``PYTRITON_*`` name inside a string of the package (a value, a
message, a docstring) or of the build backend must be in the registry, and a bare variable name
as a value may be written only in the registry, so that the next variable cannot be read
somewhere without being listed (and documented: tests/docs/test_environment_table.py).
"""

from __future__ import annotations

import ast
import dataclasses
import pathlib
import re
from typing import Dict, List, Set

import pytest

from pytriton import constants, environment
from pytriton.environment import TRITON_CONFIG_PREFIX, VARIABLES
from pytriton.proxy import metrics, waiting
from pytriton.server.config import TritonConfig

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "pytriton"
NAME = re.compile(r"\bPYTRITON_[A-Z0-9_]*[A-Z0-9]")

SPELLED_ELSEWHERE: dict = {}
"""Modules that still write a registered variable's name as a value of their own, and why."""

NAMES = {variable.name for variable in VARIABLES if not variable.name.startswith(TRITON_CONFIG_PREFIX)}
CONFIG_FIELDS = {field.name.upper() for field in dataclasses.fields(TritonConfig)}
CONFIG_ALIASES = {"LOG_VERBOSITY"}  # of LOG_VERBOSE (pytriton.server.config.reading)


def _sources(folder: pathlib.Path) -> List[pathlib.Path]:
    return sorted(path for path in folder.rglob("*.py") if "tritonserver" not in path.relative_to(ROOT).parts)


def _strings(path: pathlib.Path) -> List[str]:
    return [node.value for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
            if isinstance(node, ast.Constant) and isinstance(node.value, str)]


def _unknown(name: str) -> bool:
    if name in NAMES or name + "_" == TRITON_CONFIG_PREFIX:
        return False
    if name.startswith(TRITON_CONFIG_PREFIX):
        field = re.sub(r"_[0-9]+$", "", name[len(TRITON_CONFIG_PREFIX):])  # a list field's indexed form
        return field not in CONFIG_FIELDS | CONFIG_ALIASES
    return True


def test_every_name_the_package_and_the_build_write_is_registered():
    unknown: Dict[str, Set[str]] = {}
    for path in _sources(PACKAGE) + _sources(ROOT / "build_backend"):
        for text in _strings(path):
            for name in NAME.findall(text):
                if _unknown(name):
                    unknown.setdefault(str(path.relative_to(ROOT)), set()).add(name)
    assert unknown == {}, "add them to pytriton/environment.py (and docs/environment.md)"


def test_only_the_registry_writes_a_variable_name_as_a_value():
    found: Dict[str, Set[str]] = {}
    for path in _sources(PACKAGE):
        where = str(path.relative_to(ROOT))
        if path.name == "environment.py" and path.parent == PACKAGE:
            continue
        names = {text for text in _strings(path) if text in NAMES or text == TRITON_CONFIG_PREFIX}
        if names and where not in SPELLED_ELSEWHERE:
            found[where] = names
    assert found == {}, "import the name from pytriton.environment instead"
    assert set(SPELLED_ELSEWHERE) <= {str(path.relative_to(ROOT)) for path in _sources(PACKAGE)}


def test_the_check_finds_an_unregistered_name():
    assert _unknown("PYTRITON_SOMETHING_NEW")
    assert _unknown("PYTRITON_TRITON_CONFIG_HTTP_PROT")  # a misspelt field
    assert not _unknown("PYTRITON_TRITON_CONFIG_HTTP_PORT")
    assert not _unknown("PYTRITON_TRITON_CONFIG_CACHE_CONFIG_0")
    assert not _unknown("PYTRITON_ACCESS_TOKEN")


def test_each_variable_is_described_once():
    names = [variable.name for variable in VARIABLES]
    assert len(names) == len(set(names))
    for variable in VARIABLES:
        assert variable.name.startswith("PYTRITON_")
        assert variable.meaning and variable.default, variable.name
        assert variable.read_by in ("serving", "import", "build"), variable.name
    constants_named = {value for name, value in vars(environment).items() if name.isupper() and isinstance(value, str)}
    assert constants_named - {TRITON_CONFIG_PREFIX} == NAMES  # every constant is in the table, and back


@pytest.mark.parametrize(("name", "default"), [
    (environment.PROXY_SPIN_US, waiting.DEFAULT_SPIN_US),
    (environment.METRICS_PERIOD_S, metrics.PERIOD_S),
])
def test_the_numeric_defaults_are_the_code_s(name, default):
    described = next(variable.default for variable in VARIABLES if variable.name == name)
    assert float(described) == default


@pytest.mark.parametrize(("name", "macro"), [
    (environment.PROXY_SPIN_US, "DEFAULT_SPIN_US"),
    (environment.BATCH_HOLD_US, "DEFAULT_HOLD_US"),
])
def test_the_backend_s_defaults_are_the_registry_s(name, macro):
    """pytriton's backend (C) applies these defaults itself when the variable is unset."""
    source = (pathlib.Path(environment.__file__).parent / "backend" / "backend.c").read_text()
    value = re.search(rf"#define {macro} ([0-9.]+)", source)
    described = next(variable.default for variable in VARIABLES if variable.name == name)
    assert value is not None and float(value.group(1)) == float(described)


def test_the_published_constant_is_the_registry_s():
    assert constants.METRICS_PERIOD_ENV == environment.METRICS_PERIOD_S


@pytest.mark.parametrize("variable", [environment.PROXY_SPIN_US, environment.BATCH_HOLD_US])
@pytest.mark.parametrize(("value", "passed"), [
    ("250", "250"), ("0", "0"), ("12.5", "12.5"), ("", None), ("abc", None), ("-5", None), ("nan", None), ("inf", None),
])
def test_the_backend_s_microseconds_come_through_only_as_numbers(monkeypatch, caplog, variable, value, passed):
    from pytriton.facade.binding import microseconds_from

    monkeypatch.setenv(variable, value)
    with caplog.at_level("WARNING", logger="pytriton.triton"):
        assert microseconds_from(variable) == passed
    warned = [record.getMessage() for record in caplog.records]
    if value and passed is None:  # named with its value and what is expected
        assert warned == [f"{variable}={value!r} is not a number of microseconds >= 0; the default applies"]
    else:
        assert not warned
