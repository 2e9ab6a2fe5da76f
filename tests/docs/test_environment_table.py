"""docs/environment.md's table is `pytriton.environment.VARIABLES`, and the pages that name a variable link to it.

The table is written from the registry (`expected_table`); when the registry changes, the failure
prints the table to paste. Every ``PYTRITON_*`` name a page mentions must be one of pytriton's
(or a `TritonConfig` field's variable, or the benchmark's own ``PYTRITON_BENCH_*``).
"""

from __future__ import annotations

import os
import pathlib
import re
from typing import List

import pytest

from pytriton.environment import TRITON_CONFIG_PREFIX, VARIABLES

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
PAGE = DOCS / "environment.md"
PAGES = [ROOT / "README.md"] + sorted(DOCS.rglob("*.md"))
NAME = re.compile(r"\bPYTRITON_[A-Z0-9_]*[A-Z0-9]")
READ_BY = {"serving": "the serving process", "import": "any process that imports pytriton", "build": "the build"}
OWN = {variable.name for variable in VARIABLES if not variable.name.startswith(TRITON_CONFIG_PREFIX)}


def _title(page: str) -> str:
    first = (DOCS / page.partition("#")[0]).read_text(encoding="utf-8").splitlines()[0]
    return first.lstrip("# ").strip()


def expected_table() -> str:
    lines = ["| variable | read by | what it sets | when unset | more |", "| --- | --- | --- | --- | --- |"]
    for variable in VARIABLES:
        more = f"[{_title(variable.see)}]({variable.see})" if variable.see else ""
        lines.append(f"| `{variable.name}` | {READ_BY[variable.read_by]} | {variable.meaning} | {variable.default} "
                     f"| {more} |")
    return "\n".join(lines) + "\n"


def test_the_page_has_the_registry_s_table():
    table = expected_table()
    assert table in PAGE.read_text(encoding="utf-8"), f"paste this table into docs/environment.md:\n\n{table}"


@pytest.mark.parametrize("variable", VARIABLES, ids=lambda variable: variable.name)
def test_each_more_link_resolves(variable):
    if not variable.see:
        return
    page, _, anchor = variable.see.partition("#")
    text = (DOCS / page).read_text(encoding="utf-8")
    if anchor:
        headings = [re.sub(r"[^\w\- ]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
                    for line in text.splitlines() if line.startswith("#")]
        assert anchor in headings, f"{variable.name}: no section #{anchor} in docs/{page}"


def _mentions(text: str) -> List[str]:
    return NAME.findall(text)


def _configs(name: str) -> bool:
    """A `TritonConfig` field's variable, or the prefix itself (``PYTRITON_TRITON_CONFIG_*``)."""
    return (name + "_").startswith(TRITON_CONFIG_PREFIX)


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_a_page_names_only_pytriton_s_variables(page):
    unknown = [name for name in _mentions(page.read_text(encoding="utf-8"))
               if name not in OWN and not _configs(name) and not name.startswith("PYTRITON_BENCH_")]
    assert unknown == [], f"{page.name} names variables pytriton does not read: add them to pytriton/environment.py"


@pytest.mark.parametrize("page", [page for page in PAGES if page != PAGE], ids=lambda page: str(page.relative_to(ROOT)))
def test_a_page_that_names_a_variable_links_to_the_table(page):
    text = page.read_text(encoding="utf-8")
    named = [name for name in _mentions(text) if name in OWN or _configs(name)]
    if named:
        target = os.path.relpath(PAGE, page.parent)
        assert f"]({target}" in text, f"{page.name} names {named[0]}: link it to {target}"
