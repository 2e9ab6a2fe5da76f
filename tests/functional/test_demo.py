"""`make demo` on free ports: the example serves, answers every client and exits cleanly."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import tempfile

import psutil
import pytest
from support import free_ports

pytestmark = pytest.mark.functional

DEMO = pathlib.Path(__file__).resolve().parents[2] / "examples" / "demo.py"


def test_demo_follows_the_port_variables_and_leaves_nothing_behind():
    http, grpc, metrics = free_ports(3)
    env = dict(
        os.environ,
        PYTRITON_TRITON_CONFIG_HTTP_PORT=str(http),
        PYTRITON_TRITON_CONFIG_GRPC_PORT=str(grpc),
        PYTRITON_TRITON_CONFIG_METRICS_PORT=str(metrics),
    )
    with subprocess.Popen(
        [sys.executable, str(DEMO)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as demo:
        try:
            stdout, stderr = demo.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            demo.kill()
            stdout, stderr = demo.communicate()
            pytest.fail(f"the demo ran over 120 s\nstdout:\n{stdout}\nstderr:\n{stderr}")

    assert demo.returncode == 0, f"stdout:\n{stdout}\nstderr:\n{stderr}"
    assert stdout.splitlines()[-1].startswith("demo OK: 2 models, 10 requests"), stdout
    assert f"http://127.0.0.1:{http}" in stdout and f"grpc://127.0.0.1:{grpc}" in stdout
    assert "b'HELLO, TRITON'" in stdout

    # Everything a server creates is named pytriton-<owner pid>-...: nothing of the demo's may remain.
    marker = f"pytriton-{demo.pid}-"
    processes = [p.pid for p in psutil.process_iter(["cmdline"]) if marker in " ".join(p.info["cmdline"] or [])]
    segments = [name for name in os.listdir("/dev/shm") if name.startswith(marker)]
    folders = [name for name in os.listdir(tempfile.gettempdir()) if name.startswith(marker)]
    assert (processes, segments, folders) == ([], [], [])
