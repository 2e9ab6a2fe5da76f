"""`pip install /path/to/pytriton` alone, the natural first try, finds the clients in the same tree.

pytriton requires pytriton-client, which is on no package index: a requirement by version alone
failed that install with "No matching distribution found for pytriton-client==0.1.0". The
metadata prepared for a build from a checkout names the checkout's ``pytriton-client/`` folder,
so pip resolves both from the one path, from a checkout and from the git URL alike, and the
README's earlier form (both paths) still resolves. pip resolves here without installing
(``--dry-run``, no index, this environment's setuptools): only the metadata is prepared, nothing
is downloaded or compiled; `test_install_clean` builds and installs the wheels themselves.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.functional

ROOT = Path(__file__).resolve().parents[3]


def _checkout_copy(target: Path) -> Path:
    """The tracked and untracked files of this checkout, as a clone has them (no server tree), committed
    in a git repository of their own (for the git URL)."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        source = ROOT / name
        if source.is_file() and not source.is_symlink():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            (target / name).write_bytes(source.read_bytes())
    git = ["git", "-c", "user.name=test", "-c", "user.email=test@example.com", "-c", "commit.gpgsign=false"]
    subprocess.run([*git, "init", "-q"], cwd=target, check=True)
    subprocess.run([*git, "add", "-A"], cwd=target, check=True)
    subprocess.run([*git, "commit", "-q", "-m", "copy"], cwd=target, check=True)
    return target


@pytest.fixture(scope="module")
def checkout(tmp_path_factory) -> Path:
    return _checkout_copy(tmp_path_factory.mktemp("one-path") / "pytriton")


def resolve(*requirements: str, cwd: Path) -> subprocess.CompletedProcess:
    report = cwd / "report.json"
    report.unlink(missing_ok=True)
    return subprocess.run(
        [sys.executable, "-m", "pip", "install", "--dry-run", "--no-index", "--no-build-isolation",
         "--disable-pip-version-check", "--quiet", "--report", str(report), *requirements],
        cwd=cwd, capture_output=True, text=True, timeout=300, env=dict(os.environ, PIP_NO_INPUT="1"),
    )


def resolved(cwd: Path) -> dict:
    """Distribution name -> where pip would take it from, as its report says."""
    report = json.loads((cwd / "report.json").read_text())
    return {item["metadata"]["name"]: item["download_info"]["url"] for item in report["install"]}


def test_the_checkout_path_alone_brings_the_clients_from_the_same_tree(checkout):
    done = resolve(str(checkout), cwd=checkout.parent)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "No matching distribution" not in done.stderr
    assert resolved(checkout.parent) == {"pytriton": checkout.as_uri(),
                                         "pytriton-client": (checkout / "pytriton-client").as_uri()}
    assert not (checkout / "build").exists() and not list(checkout.glob("*.egg-info"))  # the tree kept


def test_both_paths_as_the_readme_showed_them_still_resolve(checkout):
    for requirements, cwd in (([str(checkout / "pytriton-client"), str(checkout)], checkout.parent),
                              (["./pytriton-client", "."], checkout)):
        done = resolve(*requirements, cwd=cwd)
        assert done.returncode == 0, (requirements, done.stderr[-3000:])
        assert set(resolved(cwd)) == {"pytriton", "pytriton-client"}


def test_the_git_url_alone_brings_the_clients_from_its_clone(checkout):
    done = resolve(f"pytriton @ git+{checkout.as_uri()}", cwd=checkout.parent)
    assert done.returncode == 0, done.stderr[-3000:]
    found = resolved(checkout.parent)
    assert set(found) == {"pytriton", "pytriton-client"}
    # The client comes from pip's clone of the repository, the folder beside the full package.
    assert found["pytriton-client"].startswith("file://") and found["pytriton-client"].endswith("/pytriton-client")
