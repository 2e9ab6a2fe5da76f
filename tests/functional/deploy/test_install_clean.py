"""`pip install .` from a checkout installs the server and leaves the checkout as it was.

The build used to leave the server tree (207 MB) and setuptools' ``build/`` (208 MB) in the
checkout. Here a copy of the checkout as a clone has it (tracked and untracked files, no
server tree, no generated clients) is installed with pip into a target folder, from the wheel
cache (no download: the test is skipped without the cached server wheel), and the copy is
compared file by file before and after.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.functional

ROOT = Path(__file__).resolve().parents[3]
WHEEL = "nvidia_pytriton-0.7.0-py3-none-manylinux_2_35_x86_64.whl"


def _cache() -> Path:
    root = os.environ.get("PYTRITON_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "pytriton")
    return Path(root).expanduser()


def _checkout_copy(target: Path) -> None:
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        source = ROOT / name
        if source.is_file() and not source.is_symlink():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)


def _files(root: Path) -> dict:
    return {str(path.relative_to(root)): path.stat().st_size for path in root.rglob("*")
            if path.is_file() and "__pycache__" not in path.parts}


@pytest.mark.skipif(not (_cache() / "wheels" / WHEEL).is_file(), reason="the server wheel is not in the cache")
@pytest.mark.timeout(900)
def test_a_regular_install_leaves_the_checkout_as_it_was(tmp_path):
    checkout, target = tmp_path / "checkout", tmp_path / "site"
    _checkout_copy(checkout)
    before = _files(checkout)
    assert "pyproject.toml" in before and not any(name.startswith("pytriton/tritonserver/") for name in before)
    result = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-index",
         "--disable-pip-version-check", "--no-compile", "--target", str(target), str(checkout)],
        capture_output=True, text=True, timeout=840, env=dict(os.environ, PYTRITON_CACHE_DIR=str(_cache())),
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    after = _files(checkout)
    assert after == before, {"added": sorted(set(after) - set(before))[:20],
                             "removed": sorted(set(before) - set(after))[:20]}
    installed = target / "pytriton"
    assert (installed / "tritonserver" / "bin" / "tritonserver").is_file()
    assert (installed / "client" / "client.py").is_file()  # the generated clients are in the wheel
