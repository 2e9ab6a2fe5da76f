"""Every Python block of the README, of docs/ and of the contract pages runs here.

Markers, written as HTML comments on the line(s) before a block:

* ``<!--pytest.mark.skip-->`` (or ``<!--pytest-codeblocks:skip-->``): the block is not run; the
  text around it must say why (it needs a GPU, a download, or shows an error on purpose).
* ``<!--pytest-codeblocks:cont-->``: the block continues the previous one (same namespace).
* ``<!--pytest-codeblocks:sh-->``: a ``sh`` block that runs, in bash, as a step of its group (with
  ``cont``, after the blocks before it): its standard output is left in the variable ``sh_output``
  for the (usually hidden) Python blocks after it to check, and a non-zero exit fails the test.
  Other ``sh`` blocks are shown only.
* ``<!--pytest-codeblocks:serve port=N-->``: the block is a serving script (it ends in
  ``serve()``); it runs as a process of its own while the next block group runs, which may
  call it on HTTP port ``N``, and must then stop on SIGINT with exit status 0.

Blocks hidden in an HTML comment (``<!-- ```python ... ``` -->``) run too: pages use them for
setup and assertions a reader need not see. A block group that moves a model to ``"cuda"`` needs
a GPU and is skipped, saying so, where torch sees none.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import re
import signal
import subprocess
import sys
import time
import urllib.request
from typing import List, Optional, Tuple

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
SEEDS = REPO.parent / "shared" / "seeds"
# Contract pages whose Python blocks must run unchanged against this library.
SEED_PAGES = ("000", "003", "004")

_FENCE = re.compile(r"^\s*```\s*(\w*)")
_SKIP = re.compile(r"<!--\s*pytest(\.mark\.skip|-codeblocks:skip)\s*-->")
_CONT = re.compile(r"<!--\s*pytest-codeblocks:cont\s*-->")
_SH = re.compile(r"<!--\s*pytest-codeblocks:sh\s*-->")
_SERVE = re.compile(r"<!--\s*pytest-codeblocks:serve\s+port=(\d+)\s*-->")


@dataclasses.dataclass
class BlockGroup:
    source: str
    line: int
    code: List[str]
    skip: bool
    server: Optional[str] = None
    """A serving script that runs as its own process while this group runs."""
    server_port: int = 0


def parse_blocks(text: str, source: str) -> List[BlockGroup]:
    """The groups of Python blocks of one markdown text, with the markers applied."""
    groups: List[BlockGroup] = []
    lines = text.splitlines()
    skip = cont = shell = False
    serve_port = 0
    server: Optional[Tuple[str, int]] = None
    index = 0
    while index < len(lines):
        line = lines[index]
        if _SKIP.search(line):
            skip = True
        if _CONT.search(line):
            cont = True
        if _SH.search(line):
            shell = True
        serve = _SERVE.search(line)
        if serve:
            serve_port = int(serve.group(1))
        fence = _FENCE.match(line)
        if fence:
            language = fence.group(1).lower()
            start = index + 1
            index += 1
            while index < len(lines) and not _FENCE.match(lines[index]):
                index += 1
            block = "\n".join(lines[start:index])
            if language in ("sh", "bash") and shell:
                language, block = "python", shell_step(block)
            if language in ("python", "py"):
                if serve_port:
                    server = (block, serve_port)
                elif cont and groups:
                    groups[-1].code.append(block)
                    groups[-1].skip = groups[-1].skip or skip
                else:
                    groups.append(BlockGroup(source, start, [block], skip))
                    if server is not None:
                        groups[-1].server, groups[-1].server_port = server
                        server = None
            skip = cont = shell = False
            serve_port = 0
        index += 1
    return groups


def shell_step(script: str) -> str:
    """The Python that runs a marked ``sh`` block in bash and keeps its standard output in ``sh_output``."""
    return ("import subprocess as _subprocess\n"
            f"sh_output = _subprocess.run(['bash', '-ec', {script!r}], capture_output=True, text=True, check=True, "
            "timeout=120).stdout")


def _collect() -> list:
    params = []
    pages = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
    if SEEDS.is_dir():
        pages += [p for p in sorted(SEEDS.glob("*.txt")) if p.name[:3] in SEED_PAGES]
    elif os.environ.get("CI"):
        raise RuntimeError(f"the contract pages are missing from {SEEDS}; CI must test them")
    for page in pages:
        if not page.is_file():
            continue
        for group in parse_blocks(page.read_text(), page.name):
            if not group.skip:
                params.append(pytest.param(group, id=f"{page.name}:{group.line}"))
    return params


def _needs_gpu(code: str) -> bool:
    return '"cuda"' in code or "'cuda'" in code


@pytest.mark.functional
@pytest.mark.parametrize("group", _collect())
def test_markdown_block_runs(group: BlockGroup, tmp_path, monkeypatch):
    code = "\n\n".join(group.code)
    if _needs_gpu(code):
        torch = pytest.importorskip("torch")
        if not torch.cuda.is_available():
            pytest.skip("this block moves a model to a CUDA device; this machine has no GPU")
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "__docs__"}
    server = _start_server(group, tmp_path) if group.server else None
    try:
        exec(compile(code, f"{group.source}:{group.line}", "exec"), namespace)
    finally:
        from pytriton.triton import Triton

        for value in list(namespace.values()):
            if isinstance(value, Triton):
                value.stop()
        if server is not None:
            server.send_signal(signal.SIGINT)
            output, _ = server.communicate(timeout=60)
    if server is not None:
        assert server.returncode == 0, f"the serving script exited with {server.returncode}:\n{output}"
        # As a user runs it: it said what it serves where, and that Ctrl+C drains.
        assert "pytriton: serving " in output and "pytriton: SIGINT received: draining" in output, output


def _start_server(group: BlockGroup, folder: pathlib.Path) -> subprocess.Popen:
    """Run a group's serving script as its own process until its HTTP port answers ready."""
    script = folder / "serve.py"
    script.write_text(group.server or "")
    process = subprocess.Popen([sys.executable, str(script)], cwd=folder, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"the serving script exited with {process.returncode}:\n{process.stdout.read()}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{group.server_port}/v2/health/ready", timeout=1) as answer:
                if answer.status == 200:
                    return process
        except OSError:
            pass
        time.sleep(0.1)
    process.kill()
    pytest.fail(f"the serving script was not ready on port {group.server_port} within 120 s")


def test_parser_applies_markers():
    text = "\n".join(
        [
            "```python", "a = 1", "```",
            "<!--pytest-codeblocks:cont-->", "```python", "b = a", "```",
            "<!--pytest.mark.skip-->", "```python", "raise SystemExit", "```",
            "```sh", "echo no", "```",
            "<!--", "```python", "hidden = True", "```", "-->",
        ]
    )  # fmt: skip
    groups = parse_blocks(text, "t.md")
    assert [g.code for g in groups] == [["a = 1", "b = a"], ["raise SystemExit"], ["hidden = True"]]
    assert [g.skip for g in groups] == [False, True, False]
    served = parse_blocks("<!--pytest-codeblocks:serve port=8000-->\n```python\nserve()\n```\n```python\ncall()\n```",
                          "t.md")
    assert [(g.code, g.server, g.server_port) for g in served] == [(["call()"], "serve()", 8000)]
    shell = parse_blocks("```python\na = 1\n```\n<!--pytest-codeblocks:cont-->\n<!--pytest-codeblocks:sh-->\n"
                         "```sh\necho $((1 + 1))\n```\n```sh\nnot run\n```", "t.md")
    assert len(shell) == 1 and len(shell[0].code) == 2
    namespace: dict = {}
    exec("\n".join(shell[0].code), namespace)
    assert namespace["sh_output"] == "2\n"
