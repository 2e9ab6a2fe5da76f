"""A server on Docker's default /dev/shm (64 MB): large requests that fit are served, one that
cannot fit gets an error that says why and how to fix it, and the server goes on.

That is the proxy path, where Triton's Python backend copies every tensor into its own pool in
/dev/shm. pytriton's backend keeps Triton's tensors in Triton's memory and sends what its arenas
cannot hold through the socket: on it every request is served.

The test needs root to give a child process its own 64 MB tmpfs on /dev/shm (``unshare -m``);
the child runs small_shm_server.py, which serves and prints a JSON report.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest
from support import served_backend

pytestmark = pytest.mark.functional

SCRIPT = pathlib.Path(__file__).with_name("small_shm_server.py")
MOUNT = "mount -t tmpfs -o size=64m tmpfs /dev/shm"


def _namespace_allowed() -> str:
    """Why a private 64 MB /dev/shm cannot be had here ("" when it can)."""
    if os.geteuid() != 0:
        return "needs root to mount a private tmpfs on /dev/shm"
    if shutil.which("unshare") is None:
        return "the unshare command is missing"
    probe = subprocess.run(["unshare", "-m", "sh", "-c", MOUNT], capture_output=True, text=True, timeout=10)
    if probe.returncode != 0:
        return f"unshare -m with a tmpfs mount is not permitted here: {probe.stderr.strip()}"
    return ""


def _serve_on_small_shm(*sizes_mib: int, backend: str = "python") -> dict:
    reason = _namespace_allowed()
    if reason:
        pytest.skip(reason)
    command = f"{MOUNT} && exec {sys.executable} {SCRIPT} {' '.join(map(str, sizes_mib))}"
    env = dict(os.environ, PYTRITON_TRITON_CONFIG_MODEL_BACKEND=backend)
    run = subprocess.run(["unshare", "-m", "sh", "-c", command], capture_output=True, text=True, timeout=150,
                         env=env)
    lines = [line for line in run.stdout.splitlines() if line.startswith("{")]
    assert run.returncode == 0 and lines, f"the serving script failed ({run.returncode}):\n{run.stderr[-3000:]}"
    return json.loads(lines[-1])


@pytest.fixture(scope="module")
def report():
    """One server on a 64 MB /dev/shm (the proxy path): 24 MiB, then 40 MiB (cannot fit), then 4 and 24 MiB again."""
    return _serve_on_small_shm(24, 40, 4, 24)


def test_64mb_shm_serves_24_mib_refuses_what_cannot_fit_and_goes_on(report):
    assert report["shm_total"] == 64 << 20
    fits, too_big, small, again = report["results"]

    assert fits["error"] is None and fits["equal"], fits
    assert small["error"] is None and small["equal"], small
    # After the refusal Triton's pool may keep what it took for the 40 MiB input (its own
    # allocator; measured: 2 runs in 6), and then refuses the next 24 MiB itself, with its
    # --shm-size advice (docs/deploying.md, "Small /dev/shm"); else it is served.
    if again["error"] is not None:
        assert "Failed to increase the shared memory pool size" in again["error"], again
        assert "--shm-size" in again["error"], again
    else:
        assert again["equal"], again

    error = too_big["error"]
    assert error is not None and not too_big["equal"]
    assert "Model 'identity'" in error
    assert "/dev/shm has only" in error and "free of 64.0 MiB" in error
    assert "40.0 MiB (41943040 bytes) of output tensors" in error
    assert "docker run --shm-size=256m" in error
    assert "emptyDir" in error and "sizeLimit: 256Mi" in error

    # the same server and stub served every request: nothing crashed or was restarted
    assert report["same_processes"] and report["alive"]
    # everything the server and pytriton put in /dev/shm, and every process, is gone after stop
    assert report["left_in_shm"] == []
    assert report["left_children"] == []


@pytest.mark.skipif(served_backend() != "pytriton", reason="needs pytriton's backend (built with a C compiler)")
def test_on_pytritons_backend_64mb_shm_serves_every_size_and_leaves_nothing():
    report = _serve_on_small_shm(24, 40, 4, 24, backend="pytriton")
    assert report["shm_total"] == 64 << 20
    for result in report["results"]:
        assert result["error"] is None and result["equal"], result
    assert report["same_processes"] and report["alive"]
    assert report["left_in_shm"] == []
    assert report["left_children"] == []


def test_64mb_shm_is_warned_about_at_start(report):
    warning = report["warning"]
    assert warning is not None
    assert warning.startswith("/dev/shm is 64.0 MiB")
    assert "model 'fixed' moves 128.0 MiB" in warning
    assert "--shm-size=512m" in warning and "sizeLimit: 512Mi" in warning
