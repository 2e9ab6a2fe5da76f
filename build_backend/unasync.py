"""Writes the blocking clients from the asyncio ones, so each client's logic is written once.

The asyncio modules are the source (`SOURCES`); their blocking twins are generated next to them,
at install and build time (``build_backend/pytriton_build.py``) and by ``make``, and never
committed (.gitignore): a twin cannot drift from its source, and a change is made in one place.

The rewrite, line by line:

* ``async def``, ``async with`` and ``async for`` lose ``async``; ``await `` goes.
* Names in `NAMES` are replaced wherever they stand as whole words, in code and docstrings
  (``AsyncioModelClient`` -> ``ModelClient``, ``__aenter__`` -> ``__enter__``, ...).
* Directives, for the few places where the two sides differ by design:

  - ``code  # unasync: other code``: the blocking side has ``other code`` on this line instead
    (same indentation); ``# unasync: drop`` leaves the line out.
  - ``# unasync: async-only`` ... ``# unasync: end``: lines only the asyncio side has.
  - ``# unasync: sync-only`` ... ``# unasync: end``: lines only the blocking side has, written
    commented out (``# code``) in the source; the blocking side gets them uncommented, and
    otherwise unchanged.

Run ``python build_backend/unasync.py`` to write the twins, ``--check`` to fail (exit 1) when
one is missing or differs from what its source gives. Standard library only: the build runs it
before any dependency is installed.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Dict, List, Optional, Sequence

ROOT = Path(__file__).resolve().parent.parent

SOURCES: Dict[str, str] = {
    "pytriton/client/asyncio_client.py": "pytriton/client/client.py",
    "pytriton/client/waits_aio.py": "pytriton/client/waits.py",
    "pytriton/client/shm_aio.py": "pytriton/client/shm.py",
}
"""Each asyncio source module (relative to the repository) and the blocking module written from it."""

NAMES: Dict[str, str] = {
    "AsyncioModelClientBase": "ModelClientBase",
    "AsyncioModelClient": "ModelClient",
    "AsyncTritonCore": "TritonCore",
    "AsyncShmTransport": "ShmTransport",
    "shm_aio": "shm",
    "AsyncReadinessCalls": "ReadinessCalls",
    "asyncio_client": "client",
    "core_aio": "core",
    "waits_aio": "waits",
    "create_async_core": "create_core",
    "wait_until_ready_async": "wait_until_ready",
    "wait_until_server_ready_async": "wait_until_server_ready",
    "drive_async": "drive",
    "check_async": "check",
    "__aenter__": "__enter__",
    "__aexit__": "__exit__",
    "asyncio.sleep": "time.sleep",
    "tritonclient.grpc.aio": "tritonclient.grpc",
    "tritonclient.http.aio": "tritonclient.http",
}
"""Whole-word replacements, applied longest first."""

_DIRECTIVE = "# unasync:"
_NAME_PATTERN = re.compile(
    r"(?<![\w])(" + "|".join(re.escape(name) for name in sorted(NAMES, key=len, reverse=True)) + r")(?![\w])"
)
_ASYNC_KEYWORD = re.compile(r"\basync (def|with|for)\b")
_AWAIT = re.compile(r"\bawait ")


def _header(source: str) -> str:
    return f"# Generated from {source} by build_backend/unasync.py: edit that file, not this one.\n"


def _line_directive(line: str) -> Optional[str]:
    """What a line of code marks for the blocking side (after ``# unasync:``), None when unmarked."""
    code, marker, directive = line.partition(_DIRECTIVE)
    return directive.strip() if marker and code.strip() else None


def _indent(line: str) -> str:
    return line[: len(line) - len(line.lstrip())]


def unasync(text: str, source: str) -> str:
    """The blocking module for asyncio module `text` (from file `source`, named in the header)."""
    out: List[str] = [_header(source)]
    mode = "both"
    for number, raw in enumerate(text.splitlines(keepends=False), start=1):
        stripped = raw.strip()
        if stripped.startswith(_DIRECTIVE):
            word = stripped[len(_DIRECTIVE):].strip()
            if word in ("async-only", "sync-only") and mode == "both":
                mode = word
            elif word == "end" and mode != "both":
                mode = "both"
            else:
                raise ValueError(f"{source}:{number}: unexpected directive {stripped!r} (in a {mode} part)")
            continue
        if mode == "async-only":
            continue
        if mode == "sync-only":
            body = raw.lstrip()
            if not body.startswith("#"):
                raise ValueError(f"{source}:{number}: a sync-only line must be commented out: {raw!r}")
            body = body[2:] if body.startswith("# ") else body[1:]
            out.append((_indent(raw) + body).rstrip() + "\n")  # written for the blocking side: kept as it is
            continue
        directive = _line_directive(raw)
        if directive == "drop":
            continue
        line = raw if directive is None else _indent(raw) + directive
        line = _ASYNC_KEYWORD.sub(r"\1", line)
        line = _AWAIT.sub("", line)
        line = _NAME_PATTERN.sub(lambda match: NAMES[match.group(1)], line)
        out.append(line.rstrip() + "\n")
    if mode != "both":
        raise ValueError(f"{source}: a {mode} part is not closed with '{_DIRECTIVE} end'")
    return "".join(out)


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
        paths = stale()
        for path in paths:
            print(f"{path.relative_to(ROOT)} is stale: run python build_backend/unasync.py", file=sys.stderr)
        return 1 if paths else 0
    if argv:
        print("usage: unasync.py [--check]", file=sys.stderr)
        return 2
    for path in write():
        print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
