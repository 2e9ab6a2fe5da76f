"""Every relative link in the repository's Markdown reaches a file, and every ``#anchor`` a heading.

A page is read on GitHub (or in a checkout): a link written from the wrong folder
(``../harness/README.md`` in ``docs/design/``, which meant ``../../harness/README.md``) is a dead
end that nothing else notices. Links in code blocks are left alone: they are examples.
"""

from __future__ import annotations

import pathlib
import re
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
_FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
_LINK = re.compile(r"\]\(([^)\s]+)\)")
_HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*$", re.MULTILINE)


def pages() -> list[pathlib.Path]:
    listed = subprocess.run(["git", "ls-files", "*.md"], cwd=ROOT, capture_output=True, text=True, check=True)
    return [ROOT / name for name in listed.stdout.split()]


def prose(page: pathlib.Path) -> str:
    return _FENCE.sub("", page.read_text(encoding="utf-8"))


def anchors(page: pathlib.Path) -> set[str]:
    """The ``#anchors`` of a page's headings, as GitHub makes them (lower case, punctuation
    dropped, spaces to hyphens, ``-1``, ``-2`` for repeats)."""
    found: set[str] = set()
    seen: dict[str, int] = {}
    for heading in _HEADING.findall(prose(page)):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        repeat = seen.get(slug, 0)
        seen[slug] = repeat + 1
        found.add(f"{slug}-{repeat}" if repeat else slug)
    return found


def broken_links(page: pathlib.Path) -> list[str]:
    """The relative links of `page` whose file or heading does not exist."""
    broken = []
    for target in _LINK.findall(prose(page)):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):
            continue  # http:, https:, mailto:
        path, _, anchor = target.partition("#")
        destination = (page.parent / path).resolve() if path else page
        if not destination.exists():
            broken.append(target)
        elif anchor and destination.suffix == ".md" and anchor not in anchors(destination):
            broken.append(target)
    return broken


def test_the_pages_are_found():
    names = {page.relative_to(ROOT).as_posix() for page in pages()}
    assert {"README.md", "docs/design/reliability.md", "harness/README.md"} <= names


@pytest.mark.parametrize("page", pages(), ids=lambda page: page.relative_to(ROOT).as_posix())
def test_relative_links_resolve(page):
    assert broken_links(page) == []


def test_the_check_finds_a_wrong_folder_and_a_missing_heading(tmp_path):
    (tmp_path / "docs" / "design").mkdir(parents=True)
    (tmp_path / "harness").mkdir()
    (tmp_path / "harness" / "README.md").write_text("# The harness\n\n## Its options\n")
    page = tmp_path / "docs" / "design" / "note.md"
    page.write_text("See [it](../harness/README.md), [this](../../harness/README.md#its-options), "
                    "[gone](../../harness/README.md#no-such-part), [web](https://example.com/x.md).\n"
                    "```\n[in a block](nowhere.md)\n```\n")
    assert broken_links(page) == ["../harness/README.md", "../../harness/README.md#no-such-part"]
