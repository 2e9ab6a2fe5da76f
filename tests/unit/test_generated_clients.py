"""The blocking clients are generated from the asyncio ones: fresh here, and by the rules the generator states."""

from __future__ import annotations

import importlib.util
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
import asyncio  # unasync: import threading
# unasync: sync-only
# from pytriton.client.core import AsyncTritonCore
# unasync: end


class AsyncioModelClient:
    # unasync: async-only
    def only_async(self):
        return asyncio.Lock()
    # unasync: end

    async def __aenter__(self):
        await self._core.close()  # unasync: drop
        async with self._lock:
            async for item in self._items:
                await asyncio.sleep(0)
        return self


def uses_the_imports():
    # unasync: sync-only
    # return threading, AsyncTritonCore
    # unasync: end
'''


def test_the_rewrite_drops_async_maps_names_and_follows_directives():
    text = unasync.unasync(SOURCE, "pytriton/client/example.py")
    assert text.splitlines()[0].startswith("# Generated from pytriton/client/example.py")
    assert '"""Doc of ModelClient."""' in text  # names are mapped in docstrings too
    assert "import threading" in text and "import asyncio" not in text
    # sync-only lines are uncommented and left as written (no name mapping there)
    assert "from pytriton.client.core import AsyncTritonCore" in text
    assert "only_async" not in text and "unasync" not in text.split("\n", 1)[1]
    assert "def __enter__(self):" in text
    assert "close()" not in text
    assert "        with self._lock:" in text and "            for item in self._items:" in text
    assert "                time.sleep(0)" in text
    assert "await" not in text and "async " not in text
    compile(text, "example.py", "exec")


@pytest.mark.parametrize(
    ("source", "complaint"),
    [
        ("# unasync: async-only\nx = 1\n", "not closed"),
        ("# unasync: end\n", "unexpected directive"),
        ("# unasync: async-only\n# unasync: sync-only\n# unasync: end\n", "unexpected directive"),
        ("# unasync: sync-only\nx = 1\n# unasync: end\n", "must be commented out"),
        ("# unasync: whatever\n", "unexpected directive"),
    ],
)
def test_a_malformed_source_is_refused_with_its_line(source, complaint):
    with pytest.raises(ValueError, match=complaint):
        unasync.unasync(source, "pytriton/client/bad.py")


def test_imports_are_sorted_as_ruff_sorts_them_without_repeats_or_unused_names():
    source = "\n".join([
        '"""Doc."""',
        "from __future__ import annotations",
        "",
        "import asyncio  # unasync: import threading",
        "import functools",
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
        "",
        "# unasync: sync-only",
        "# from pytriton.client.utils import TritonSyncClient",
        "# unasync: end",
        "X: Any = (threading, functools, tritonclient.grpc, wait_until_ready_async, client_args, load_args)",
        "Y = TritonSyncClient  # a comment naming Awaitable does not keep it",
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
        "from pytriton.client.utils import TritonSyncClient",
        "from pytriton.client.waits import wait_until_ready",
        "",
    ])
