"""User pages say what a user sees and does, not the project's history or where its tests live.

A user page that reads "How the earlier run failed", dates its figures or sends the reader to
``tests/functional/...`` speaks to the people who build pytriton; that belongs in
``docs/design/``. Figures a user needs (what a stop costs, what a metric means) stay, undated.
"""

from __future__ import annotations

import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"

NOT_USER_PAGES = {
    "architecture.md": "the code's layout, for work on pytriton itself",
    "performance.md": "the benchmark's report, written by bench/run.py with the date and commit of each run",
}
USER_PAGES = [ROOT / "README.md"] + sorted(page for page in DOCS.glob("*.md") if page.name not in NOT_USER_PAGES)

HISTORY = {
    "a dated run": re.compile(r"\b20\d\d-[01]\d-[0-3]\d\b"),
    "a path of the tests, the harness or the benchmark": re.compile(r"(?<![\w./-])(?:tests|harness|bench)/[\w./-]*"),
    "an account of earlier runs": re.compile(r"\b(?:earlier|last|previous) run\b|\bthe run before\b", re.IGNORECASE),
}


def findings(text: str) -> list:
    """``(line number, what, the text found)`` for each piece of history or internals in `text`."""
    found = []
    for number, line in enumerate(text.splitlines(), start=1):
        for what, pattern in HISTORY.items():
            found += [(number, what, match.group(0)) for match in pattern.finditer(line)]
    return found


def test_the_pages_are_found():
    names = {page.name for page in USER_PAGES}
    assert {"README.md", "reliability.md", "deploying.md", "observability.md", "getting_started.md"} <= names


@pytest.mark.parametrize("page", USER_PAGES, ids=lambda page: page.name)
def test_a_user_page_carries_no_dated_runs_and_no_test_paths(page):
    assert findings(page.read_text(encoding="utf-8")) == [], f"{page.name}: move these to docs/design/"


def test_the_check_finds_what_it_looks_for():
    text = ("Measured 2026-11-27 (`tests/functional/test_drain.py`).\nHow the earlier run failed: see\n"
            "`python harness/faults.py`; `make bench` is fine, so is docs/design/hop.md and 10-20 ms.")
    assert [(number, what) for number, what, _ in findings(text)] == [
        (1, "a dated run"), (1, "a path of the tests, the harness or the benchmark"),
        (2, "an account of earlier runs"), (3, "a path of the tests, the harness or the benchmark")]


def test_links_from_user_pages_to_the_design_notes_resolve():
    links = [(page, target) for page in USER_PAGES
             for target in re.findall(r"\]\(((?:docs/)?design/[\w.-]+\.md)", page.read_text(encoding="utf-8"))]
    assert len(links) >= 4
    for page, target in links:
        assert (page.parent / target).is_file(), (page.name, target)
