"""Writes the blocking clients from the asyncio ones, so each client's logic is written once.

The asyncio modules are the source (`SOURCES`); their blocking twins are generated next to them
by ``make generate`` and committed, so that they can be read, searched and jumped to like any
module. ``make lint`` and ``make test`` (CI) fail when one is stale (``--check``), saying to run
``make generate``: a twin cannot drift from its source, and a change is made in one place.

The rewrite only renames, line by line:

* ``async def``, ``async with`` and ``async for`` lose ``async``; ``await `` goes.
* Names in `NAMES` are replaced wherever they stand as whole words, in code and docstrings
  (``AsyncioModelClient`` -> ``ModelClient``, ``__aenter__`` -> ``__enter__``,
  ``io_aio`` -> ``io_sync``, ...).
* The imports are tidied as ruff sorts them (`tidy_imports`): the renaming makes some repeat.

Where the two sides differ by design (a lock, a sleep, how a call is bounded in time, which
``tritonclient`` client is made, when a client that is not lazy waits for its server), the
difference lives in a small pair of hand-written modules with the same names,
``pytriton/client/io_aio.py`` and ``pytriton/client/io_sync.py``, as httpcore keeps it in its
``_synchronization.py`` and ``_backends/``; the sources import it from ``io_aio``, which the
renaming turns into ``io_sync``. So a source holds no directive, and a line that would need one
(a comment ``# unasync:``, the form this generator once read) is refused.

Run ``python build_backend/unasync.py`` (``make generate``) to write the twins, ``--check`` to
fail (exit 1) when one is missing or differs from what its source gives. Standard library only,
so that ``make`` can run it before anything is installed.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

ROOT = Path(__file__).resolve().parent.parent

SOURCES: Dict[str, str] = {
    "pytriton/client/asyncio_client.py": "pytriton/client/client.py",
    "pytriton/client/waits_aio.py": "pytriton/client/waits.py",
    "pytriton/client/shm_aio.py": "pytriton/client/shm.py",
    "pytriton/client/core_aio.py": "pytriton/client/core.py",
}
"""Each asyncio source module (relative to the repository) and the blocking module written from it."""

NAMES: Dict[str, str] = {
    "AsyncioModelClientBase": "ModelClientBase",
    "AsyncioModelClient": "ModelClient",
    "AsyncioDecoupledModelClient": "DecoupledModelClient",
    "streaming_aio": "streaming",
    "AsyncTritonCore": "TritonCore",
    "AsyncShmTransport": "ShmTransport",
    "AsyncStreamOpener": "StreamOpener",
    "AsyncResponseStream": "ResponseStream",
    "AsyncConnection": "Connection",
    "AsyncTritonClient": "TritonClient",
    "AsyncLock": "Lock",
    "AsyncLook": "Look",
    "AsyncCall": "Call",
    "AsyncOutputs": "Outputs",
    "core_stream_aio": "core_stream",
    "io_aio": "io_sync",
    "shm_aio": "shm",
    "AsyncReadinessCalls": "ReadinessCalls",
    "core_aio": "core",
    "waits_aio": "waits",
    "create_async_core": "create_core",
    "wait_until_ready_async": "wait_until_ready",
    "wait_until_server_ready_async": "wait_until_server_ready",
    "drive_async": "drive",
    "check_async": "check",
    "__aenter__": "__enter__",
    "__aexit__": "__exit__",
    "tritonclient.grpc.aio": "tritonclient.grpc",
    "tritonclient.http.aio": "tritonclient.http",
}
"""Whole-word replacements, applied longest first."""

_DIRECTIVE = "# unasync:"
"""The comment of the directives this generator once read; a source that still has one is refused."""
_NAME_PATTERN = re.compile(
    r"(?<![\w])(" + "|".join(re.escape(name) for name in sorted(NAMES, key=len, reverse=True)) + r")(?![\w])"
)
_ASYNC_KEYWORD = re.compile(r"\basync (def|with|for)\b")
_AWAIT = re.compile(r"\bawait ")


def _header(source: str) -> str:
    return f"# Generated from {source} by build_backend/unasync.py: edit that file, not this one.\n"


def unasync(text: str, source: str) -> str:
    """The blocking module for asyncio module `text` (from file `source`, named in the header).

    Raises:
        ValueError: a line of `text` holds a directive (``# unasync:``): the difference it marks
            belongs in the I/O pair (``io_aio``, ``io_sync``).
    """
    out: List[str] = [_header(source)]
    for number, line in enumerate(text.splitlines(keepends=False), start=1):
        if _DIRECTIVE in line:
            raise ValueError(f"{source}:{number}: a directive ({line.strip()!r}): the generator only renames; put "
                             "what differs between the sides in pytriton/client/io_aio.py and io_sync.py")
        line = _ASYNC_KEYWORD.sub(r"\1", line)
        line = _AWAIT.sub("", line)
        line = _NAME_PATTERN.sub(lambda match: NAMES[match.group(1)], line)
        out.append(line.rstrip() + "\n")
    return "".join(tidy_imports([line.rstrip("\n") for line in out]))


LINE_LENGTH = 120
"""The longest line ruff allows (pyproject.toml)."""
THIRD_PARTY = frozenset({"aiohttp", "gevent", "grpc", "numpy", "psutil", "tritonclient", "zmq"})
"""Top-level modules sorted as third-party imports; ``pytriton`` is first-party, anything else stdlib."""
_SECTIONS = ("future", "stdlib", "third-party", "first-party")


def _section(module: str) -> str:
    top = module.split(".")[0]
    if top == "__future__":
        return "future"
    if top == "pytriton":
        return "first-party"
    return "third-party" if top in THIRD_PARTY else "stdlib"


def _bound_names(statement: str) -> List[Tuple[str, str]]:
    """Each name of an import statement: as written, and the name it binds in the module."""
    words = statement.split(" import ", 1)[1] if statement.startswith("from ") else statement[len("import "):]
    names = []
    for item in words.replace("(", " ").replace(")", " ").split(","):
        item = " ".join(item.split("#")[0].split())
        if item:
            name, _, alias = item.partition(" as ")
            names.append((item, alias or name.split(".")[0]))
    return names


def _docstring_end(lines: List[str]) -> int:
    """The index of the first line after the module's leading comments and docstring."""
    index = 0
    while index < len(lines) and (lines[index].startswith("#") or not lines[index].strip()):
        index += 1
    if index == len(lines) or not lines[index].startswith(('"""', "'''")):
        return index
    quote = lines[index][:3]
    if quote in lines[index][3:]:
        return index + 1
    index += 1
    while index < len(lines) and quote not in lines[index]:
        index += 1
    return index + 1


def _member_key(written: str) -> Tuple[int, str, str]:
    """Where ruff's isort puts a name of a ``from`` import: constants, then classes, then the rest,
    each in case-insensitive order."""
    name = written.split(" as ")[0]
    kind = 0 if len(name) > 1 and name.isupper() else 1 if name[:1].isupper() else 2
    return kind, name.lower(), name


def _from_import(module: str, names: List[str], wrapped: bool) -> str:
    """``from module import names``, on one line, or one name a line as ruff writes a long one
    (and keeps one written so, by its trailing comma)."""
    line = f"from {module} import {', '.join(names)}"
    if not wrapped and len(line) <= LINE_LENGTH:
        return line
    return "\n".join([f"from {module} import (", *(f"    {name}," for name in names), ")"])


def tidy_imports(lines: List[str]) -> List[str]:
    """The module's top-level imports as ruff's isort writes them: sections (future, stdlib,
    third-party, first-party) one blank line apart, ``import`` before ``from``, each by module.

    Statements repeated by the name mapping (``tritonclient.grpc`` and ``tritonclient.grpc.aio``
    both become ``tritonclient.grpc``) are written once, and names the module does not use
    (those only the asyncio side needed) are dropped; so the sources need no directive for
    either. Comments between the imports are dropped.
    """
    start = _docstring_end(lines)
    while start < len(lines) and not lines[start].startswith(("import ", "from ")):
        start += 1
    statements: List[str] = []
    end = last = start
    while end < len(lines):
        line = lines[end]
        if line.startswith(("import ", "from ")):
            statement = [line]
            if "(" in line and ")" not in line:  # a parenthesized list: up to its closing line
                while ")" not in line:
                    end += 1
                    line = lines[end]
                    statement.append(line)
            statements.append("\n".join(statement))
            last = end + 1
        elif line.strip() and not line.startswith("#"):
            break
        end += 1
    # The code that may use an imported name: docstrings and comments left out.
    rest = re.sub(r'"""[\s\S]*?"""|#[^\n]*', "", "\n".join(lines[:start] + lines[last:]))
    kept: Dict[str, List[Tuple[int, str, str]]] = {section: [] for section in _SECTIONS}
    for statement in dict.fromkeys(statements):  # in order, without repeats
        module = statement.split()[1]
        names = _bound_names(statement)
        used = [written for written, bound in names
                if module == "__future__" or re.search(rf"(?<![\w.]){re.escape(bound)}(?!\w)", rest)]
        if not used:
            continue
        if statement.startswith("from "):
            ordered = sorted(used, key=_member_key)
            if ordered != [written for written, _ in names]:  # a name dropped, or renamed out of order
                statement = _from_import(module, ordered, wrapped="\n" in statement)
        elif len(used) < len(names):
            statement = f"import {', '.join(used)}"
        kept[_section(module)].append((int(statement.startswith("from ")), module.lower(), statement))
    block: List[str] = []
    for section in _SECTIONS:
        if kept[section]:
            block += [""] if block else []
            block += [statement for _, _, statement in sorted(kept[section], key=lambda item: item[:2])]
    after = lines[last:]
    while after and not after[0].strip():
        after = after[1:]
    gap = 2 if after and after[0].startswith(("class ", "def ", "async def ", "@")) else 1
    return [line + "\n" for line in lines[:start] + block + [""] * gap + after]


def generated(root: Path = ROOT) -> Dict[Path, str]:
    """Each blocking module's path and the text its source gives now."""
    return {root / target: unasync((root / source).read_text(), source) for source, target in SOURCES.items()}


def write(root: Path = ROOT) -> List[Path]:
    """Write the blocking modules that are missing or differ; returns those written."""
    written = []
    for path, text in generated(root).items():
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
            written.append(path)
    return written


def stale(root: Path = ROOT) -> List[Path]:
    """The blocking modules that are missing or differ from what their sources give."""
    return [path for path, text in generated(root).items() if not path.exists() or path.read_text() != text]


def main(argv: Sequence[str]) -> int:
    if list(argv) == ["--check"]:
        paths = stale(ROOT)
        for path in paths:
            state = "is missing" if not path.exists() else "differs from what its asyncio source gives"
            print(f"{path.relative_to(ROOT)} {state}: run `make generate` (python3 build_backend/unasync.py) "
                  "and commit the result; edit the asyncio source, never the generated file", file=sys.stderr)
        return 1 if paths else 0
    if argv:
        print("usage: unasync.py [--check]", file=sys.stderr)
        return 2
    for path in write(ROOT):
        print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
