"""Every ``pip install`` line a page or a message gives works from where the user installed pytriton.

pytriton and pytriton-client are on no package index yet: ``pip install 'pytriton[openai]'`` and
``pip install pytriton==0.1.0`` fail in a fresh environment with "No matching distribution". So a
line may name the project's own distributions only by a path or a URL (a checkout, the git URL),
or in a passage that says plainly what an index has to do with it; every other package it names
by name must be one that pip installs from PyPI for this project, i.e. one the lock
(``constraints.txt``) pins, since the lock is resolved from the index.

Scanned: the code spans and code blocks of every Markdown file in the repository, the string
literals (messages and docstrings) of the package, its build backends and the client project,
and the Dockerfile and the chart's files line by line.
"""

from __future__ import annotations

import ast
import pathlib
import re
import shlex
import subprocess
from typing import Iterator, List, NamedTuple

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
OWN = {"pytriton", "pytriton-client"}
"""The distributions this repository builds: on no index."""

_PIP_INSTALL = re.compile(r"\bpip(?:3)?\s+install\b(?P<args>[^\n`]*)")
# Where a pip line in prose ends: the words and signs that start the sentence's next part.
_LINE_END = re.compile(r"\s(?:from|or|and|in|into|with|then|to|for|which|beside|where|before|after|as|is)\s|"
                       r"\s\(|\)|,\s|;\s|:\s|\s--\s|\s#|\"\)|\.\s|\.$")
_OPTIONS_WITH_VALUE = {"-c", "--constraint", "-r", "--requirement", "-t", "--target", "-w", "--wheel-dir",
                       "--python", "-i", "--index-url", "--extra-index-url", "-f", "--find-links",
                       "--root-user-action", "--build-constraint", "--prefix", "--root", "--platform"}
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
_SPAN = re.compile(r"``?([^`\n]+?)``?")


class Finding(NamedTuple):
    where: str
    line: str
    why: str


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def locked() -> set:
    """The names the lock pins: what pip installs from the index for this project."""
    text = (ROOT / "constraints.txt").read_text()
    return {canonical(line.split("==")[0]) for line in text.splitlines() if "==" in line and not line.startswith("#")}


def requirements(args: str) -> List[str]:
    """The requirements named by name in one pip line's arguments (paths, URLs, options and their
    values, placeholders and direct references left out)."""
    args = _LINE_END.split(args, maxsplit=1)[0].replace("\\", " ")
    for closing in ("", '"', "'"):  # an f-string's part may end inside a quote that a later part closes
        try:
            tokens = shlex.split(args + closing)
            break
        except ValueError:
            continue
    else:
        tokens = args.split()
    named, skip = [], False
    for token in tokens:
        token = token.strip("'\"")
        if skip:
            skip = False
            continue
        if token.startswith("-"):
            skip = token in _OPTIONS_WITH_VALUE
            continue
        if not token or "/" in token or " @ " in token or token.startswith((".", "~", "$", "<", "{")) or \
                token.endswith((".whl", ".tar.gz", ".zip")) or "://" in token:
            continue
        match = _NAME.match(token)
        if match:
            named.append(canonical(match.group(0)))
    return named


def judge(where: str, text: str, context: str, lock: set) -> Iterator[Finding]:
    """The findings of the pip lines in `text`; `context` is the passage around them (a page's paragraph,
    the whole message), which may say that a name is for an index of the reader's own."""
    for match in _PIP_INSTALL.finditer(text):
        for name in requirements(match.group("args")):
            line = match.group(0).strip()
            if name in OWN and "index" not in context:
                yield Finding(where, line, f"{name} is on no package index: give a path or the git URL")
            elif name not in OWN and name not in lock:
                yield Finding(where, line, f"{name} is not a package pip installs from the index for pytriton "
                                           "(not in constraints.txt)")


def markdown_findings(page: pathlib.Path, lock: set) -> Iterator[Finding]:
    text = page.read_text(encoding="utf-8")
    where = page.relative_to(ROOT).as_posix()
    paragraphs = re.split(r"\n\s*\n", _FENCE.sub(lambda block: block.group(0).replace("\n\n", "\n"), text))
    for index, paragraph in enumerate(paragraphs):
        # A block is read with the paragraphs around it: the sentence that introduces or follows it.
        around = " ".join(paragraphs[max(0, index - 1): index + 2])
        for block in _FENCE.findall(paragraph + "\n"):
            for line in block.replace("\\\n", " ").splitlines():
                yield from judge(where, line.split(" #")[0], around, lock)
        for span in _SPAN.findall(_FENCE.sub("", paragraph)):
            yield from judge(where, span, paragraph, lock)


def python_findings(source: pathlib.Path, lock: set) -> Iterator[Finding]:
    tree = ast.parse(source.read_text(encoding="utf-8"))
    where = source.relative_to(ROOT).as_posix()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield from judge(f"{where}:{node.lineno}", node.value, node.value, lock)


def text_findings(source: pathlib.Path, lock: set) -> Iterator[Finding]:
    text = source.read_text(encoding="utf-8")
    for number, line in enumerate(text.replace("\\\n", " ").splitlines(), start=1):
        yield from judge(f"{source.relative_to(ROOT).as_posix()}:{number}", line, line, lock)


def tracked(*patterns: str) -> List[pathlib.Path]:
    listed = subprocess.run(["git", "ls-files", *patterns], cwd=ROOT, capture_output=True, text=True, check=True)
    return [ROOT / name for name in listed.stdout.split() if not name.startswith("tests/")]


PAGES = tracked("*.md")
SOURCES = tracked("pytriton/*.py", "build_backend/*.py", "pytriton-client/*.py")
OTHERS = tracked("Dockerfile", "Makefile", "deploy/*")


def test_the_files_are_found():
    names = {path.relative_to(ROOT).as_posix() for path in PAGES + SOURCES + OTHERS}
    assert {"README.md", "docs/openai.md", "docs/installation.md", "pytriton/__init__.py",
            "pytriton/install_hints.py", "Dockerfile", "deploy/helm/pytriton/values.yaml"} <= names


@pytest.mark.parametrize("page", PAGES, ids=lambda path: path.relative_to(ROOT).as_posix())
def test_the_pages_give_install_lines_that_work(page):
    assert list(markdown_findings(page, locked())) == []


def test_the_messages_give_install_lines_that_work():
    lock = locked()
    found = [finding for source in SOURCES for finding in python_findings(source, lock)]
    found += [finding for source in OTHERS if source.is_file() for finding in text_findings(source, lock)]
    assert found == []


def test_the_scan_finds_the_lines_that_failed():
    lock = {"numpy", "torch", "aiohttp"}
    message = ("No module named 'pytriton.triton': ... comes with the full package, which runs on Linux: "
               "pip install pytriton==0.1.0")
    assert [f.why.split(" ")[0] for f in judge("m", message, message, lock)] == ["pytriton"]
    extra = "TritonConfig.openai_port needs the 'openai' extra, which is not installed: pip install 'pytriton[openai]'"
    assert len(list(judge("m", extra, extra, lock))) == 1
    page = "The clients alone: `pip install pytriton-client`, or from a checkout.\n"
    assert [f.line for f in judge("p", page, page, lock)] == ["pip install pytriton-client"]
    # What works: paths, URLs, direct references, the extra's own packages, and a name for an index of one's own.
    fine = ("pip install /path/to/pytriton; pip install '/path/to/pytriton[openai]' from a checkout; "
            'pip install "pytriton @ git+<URL>" and pip install \'aiohttp>=3.9\' (the extra); '
            "pip install --no-cache-dir --constraint constraints.txt torch==2.5.1 numpy; pip install -v shows it")
    assert list(judge("m", fine, fine, lock)) == []
    assert list(judge("p", page, page + " Uploaded to an index of your own, it installs.", lock)) == []
    assert [f.why.split(" ")[0] for f in judge("m", "pip install numpyy", "", lock)] == ["numpyy"]
