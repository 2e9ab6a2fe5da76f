"""`pip install ./pytriton-client .` from a checkout installs the server, leaves the checkout as it was, and
serves the README.

The build used to leave the server tree (207 MB) and setuptools' ``build/`` (208 MB) in the
checkout. Here a copy of the checkout as a clone has it (tracked and untracked files, no
server tree) is installed with pip into a target folder, from the wheel
cache (no download: the test is skipped without the cached server wheel), and the copy is
compared file by file before and after. Both distributions are installed, as a checkout installs
them (pytriton requires pytriton-client, which is not on PyPI): each builds and the two together
make the package.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from support import free_ports

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
         "--disable-pip-version-check", "--no-compile", "--target", str(target), str(checkout / "pytriton-client"),
         str(checkout)],
        capture_output=True, text=True, timeout=840, env=dict(os.environ, PYTRITON_CACHE_DIR=str(_cache())),
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    after = _files(checkout)
    assert after == before, {"added": sorted(set(after) - set(before))[:20],
                             "removed": sorted(set(before) - set(after))[:20]}
    installed = target / "pytriton"
    assert (installed / "tritonserver" / "bin" / "tritonserver").is_file()
    assert (installed / "client" / "client.py").is_file()  # the generated clients are in pytriton-client's wheel
    records = {path.parent.name.split("-")[0]: set(path.read_text().splitlines())
               for path in target.glob("*.dist-info/RECORD")}
    assert set(records) == {"pytriton", "pytriton_client"}, sorted(records)
    owned = [{line.split(",")[0] for line in lines if line.startswith("pytriton/")} for lines in records.values()]
    assert owned[0] and owned[1] and not owned[0] & owned[1]  # no file belongs to both
    _readme_first_screen_runs(target, tmp_path)


def _readme_first_screen_runs(site: Path, folder: Path) -> None:
    """The README's serve.py and client.py, copied as a user copies them, against the installed package
    (the dependencies come from this environment; ports moved off 8000-8002 through the environment)."""
    serve, client = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)[:2]
    assert "triton.serve()" in serve and "ModelClient(\"localhost:8000\"" in client
    http, grpc, metrics = free_ports(3)
    (folder / "serve.py").write_text(serve)
    (folder / "client.py").write_text(client.replace("localhost:8000", f"localhost:{http}"))
    env = dict(os.environ, PYTHONPATH=str(site), PYTRITON_TRITON_CONFIG_HTTP_PORT=str(http),
               PYTRITON_TRITON_CONFIG_GRPC_PORT=str(grpc), PYTRITON_TRITON_CONFIG_METRICS_PORT=str(metrics))
    where = subprocess.run([sys.executable, "-c", "import pytriton; print(pytriton.__file__)"], cwd=folder, env=env,
                           capture_output=True, text=True, check=True).stdout
    assert where.startswith(str(site)), where
    server = subprocess.Popen([sys.executable, "serve.py"], cwd=folder, env=env, stderr=subprocess.PIPE, text=True)
    try:
        # The client is started at once, as a user would: it waits for the server (and says so if it must).
        answer = subprocess.run([sys.executable, "client.py"], cwd=folder, env=env, capture_output=True, text=True,
                                timeout=180)
        assert answer.returncode == 0, answer.stderr[-3000:]
        assert answer.stdout.strip() == "[10. 20. 30.]", answer.stdout
        server.send_signal(signal.SIGINT)
        _, errors = server.communicate(timeout=60)
    finally:
        if server.poll() is None:
            server.kill()
            server.communicate()
    assert server.returncode == 0, errors[-3000:]
    assert f"pytriton: serving Scale (version 1) on http://localhost:{http}" in errors, errors[-3000:]
