"""The blocking clients are generated from the asyncio ones: fresh here, and by the rules the generator states."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _generator():
    spec = importlib.util.spec_from_file_location("pytriton_unasync", ROOT / "build_backend" / "unasync.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


unasync = _generator()


def test_the_generated_clients_match_their_asyncio_sources():
    stale = [str(path.relative_to(ROOT)) for path in unasync.stale(ROOT)]
    assert not stale, f"regenerate with `make generate` (python build_backend/unasync.py): {stale}"


def test_the_check_command_fails_on_a_stale_client_and_passes_once_written(tmp_path):
    for source in unasync.SOURCES:
        (tmp_path / source).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / source).write_text((ROOT / source).read_text())
    assert {path.name for path in unasync.stale(tmp_path)} == {Path(t).name for t in unasync.SOURCES.values()}
    written = unasync.write(tmp_path)
    assert len(written) == len(unasync.SOURCES) and unasync.stale(tmp_path) == []
    assert unasync.write(tmp_path) == []  # nothing differs: nothing is rewritten
    target = tmp_path / next(iter(unasync.SOURCES.values()))
    target.write_text(target.read_text() + "# edited by hand\n")
    assert unasync.stale(tmp_path) == [target]


def test_the_command_line_check_exits_non_zero_only_when_stale():
    result = subprocess.run([sys.executable, str(ROOT / "build_backend" / "unasync.py"), "--check"],
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr


def test_a_stale_twin_fails_the_check_saying_to_run_make_generate(tmp_path, monkeypatch, capsys):
    for source, target in unasync.SOURCES.items():
        for name in (source, target):
            (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / name).write_text((ROOT / name).read_text())
    target = next(iter(unasync.SOURCES.values()))
    (tmp_path / target).write_text((tmp_path / target).read_text() + "# edited by hand\n")
    monkeypatch.setattr(unasync, "ROOT", tmp_path)
    assert unasync.main(["--check"]) == 1
    assert f"{target} differs from what its asyncio source gives: run `make generate`" in capsys.readouterr().err
    assert unasync.main([]) == 0 and unasync.main(["--check"]) == 0


def test_generated_clients_are_committed_and_lint_and_test_check_them():
    """Visible to `git grep` and editors (httpcore's way), and never rewritten by `make test` or `make lint`."""
    targets = list(unasync.SOURCES.values())
    ignored = subprocess.run(["git", "-C", str(ROOT), "check-ignore", *targets], capture_output=True, text=True,
                             check=False)
    if ignored.returncode == 128:
        pytest.skip("not a git checkout")
    assert ignored.stdout == ""
    tracked = subprocess.run(["git", "-C", str(ROOT), "ls-files", *targets], capture_output=True, text=True,
                             check=True)
    assert tracked.stdout.split() == sorted(targets)
    makefile = (ROOT / "Makefile").read_text()
    for target in ("test", "lint"):
        rule = next(line for line in makefile.splitlines() if line.startswith(f"{target}:"))
        assert "check-generated" in rule.split() and "generate" not in rule.split(), rule
    assert "unasync.py --check" in makefile


SOURCE = '''"""Doc of AsyncioModelClient."""
from pytriton.client.io_aio import AsyncLock, sleep


class AsyncioModelClient:
    def __init__(self):
        self._lock = AsyncLock()

    async def __aenter__(self):
        async with self._lock:
            async for item in self._items:
                await sleep(0)
        return self
'''


def test_the_rewrite_drops_async_and_renames():
    text = unasync.unasync(SOURCE, "pytriton/client/example.py")
    assert text.splitlines()[0].startswith("# Generated from pytriton/client/example.py")
    assert '"""Doc of ModelClient."""' in text  # names are mapped in docstrings too
    assert "from pytriton.client.io_sync import Lock, sleep" in text  # the I/O pair: the blocking side's module
    assert "        self._lock = Lock()" in text
    assert "def __enter__(self):" in text
    assert "        with self._lock:" in text and "            for item in self._items:" in text
    assert "                sleep(0)" in text
    assert "await" not in text and "async " not in text
    compile(text, "example.py", "exec")


@pytest.mark.parametrize("line", ["import asyncio  # unasync: import threading", "# unasync: sync-only",
                                  "    x = 1  # unasync: drop"])
def test_a_directive_is_refused_with_its_line_the_differences_live_in_the_io_pair(line):
    with pytest.raises(ValueError, match=r"bad\.py:2: a directive .*io_aio\.py and io_sync\.py"):
        unasync.unasync(f'"""Doc."""\n{line}\n', "pytriton/client/bad.py")


def test_the_sources_hold_no_directive_and_every_renamed_name_is_used():
    sources = "\n".join((ROOT / source).read_text() for source in unasync.SOURCES)
    assert "# unasync:" not in sources
    unused = [name for name in unasync.NAMES if not re.search(rf"(?<![\w]){re.escape(name)}(?![\w])", sources)]
    assert unused == [], "a renaming no source needs: drop it from NAMES"


def test_the_io_pair_has_the_same_names_on_both_sides():
    """Whatever a source imports from io_aio, renamed, the blocking twin finds in io_sync."""
    from pytriton.client import io_aio, io_sync

    for module in (io_aio, io_sync):
        assert all(hasattr(module, name) for name in module.__all__)
    renamed = {unasync.NAMES.get(name, name) for name in io_aio.__all__}
    assert renamed <= set(io_sync.__all__), renamed - set(io_sync.__all__)
    assert len(renamed) == len(io_aio.__all__)  # no two names of one side become one


def test_imports_are_sorted_as_ruff_sorts_them_without_repeats_or_unused_names():
    source = "\n".join([
        '"""Doc."""',
        "from __future__ import annotations",
        "",
        "import functools",
        "import threading",
        "from typing import Any, Awaitable  # Awaitable: the asyncio side's only",
        "",
        "import tritonclient.grpc",
        "import tritonclient.grpc.aio",
        "",
        "from pytriton.client.waits_aio import wait_until_ready_async",
        "from pytriton.client._args import (",
        "    client_args,",
        "    load_args,",
        ")",
        "from pytriton.client.infer_calls import AsyncOutputs, InferCall, call_priority",
        "from pytriton.client.io_aio import (",
        "    AsyncLock,",
        "    sleep,",
        ")",
        "",
        "X: Any = (threading, functools, tritonclient.grpc, wait_until_ready_async, client_args, load_args)",
        "Y = (AsyncOutputs, InferCall, call_priority, AsyncLock)  # a comment naming Awaitable or sleep keeps neither",
    ])
    text = unasync.unasync(source, "pytriton/client/example.py")
    imports = text.split('"""Doc."""\n')[1].split("\nX: Any")[0]
    assert imports == "\n".join([
        "from __future__ import annotations",
        "",
        "import functools",
        "import threading",
        "from typing import Any",
        "",
        "import tritonclient.grpc",
        "",
        "from pytriton.client._args import (",
        "    client_args,",
        "    load_args,",
        ")",
        # renamed names in ruff's order (classes before functions), a wrapped statement kept wrapped
        "from pytriton.client.infer_calls import InferCall, Outputs, call_priority",
        "from pytriton.client.io_sync import (",
        "    Lock,",
        ")",
        "from pytriton.client.waits import wait_until_ready",
        "",
    ])
