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
    http, grpc, metrics, openai = free_ports(4)
    env = dict(
        os.environ,
        PYTRITON_TRITON_CONFIG_HTTP_PORT=str(http),
        PYTRITON_TRITON_CONFIG_GRPC_PORT=str(grpc),
        PYTRITON_TRITON_CONFIG_METRICS_PORT=str(metrics),
        PYTRITON_TRITON_CONFIG_OPENAI_PORT=str(openai),
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
    assert stdout.splitlines()[-1].startswith("demo OK: 3 models, 11 requests"), stdout
    assert f"http://127.0.0.1:{openai}/v1" in stdout and "assistant: You said: hello, triton" in stdout
    assert f"http://127.0.0.1:{http}" in stdout and f"grpc://127.0.0.1:{grpc}" in stdout
    assert "b'HELLO, TRITON'" in stdout

    # Everything a server creates is named pytriton-<owner pid>-...: nothing of the demo's may remain.
    marker = f"pytriton-{demo.pid}-"
    processes = [p.pid for p in psutil.process_iter(["cmdline"]) if marker in " ".join(p.info["cmdline"] or [])]
    segments = [name for name in os.listdir("/dev/shm") if name.startswith(marker)]
    folders = [name for name in os.listdir(tempfile.gettempdir()) if name.startswith(marker)]
    assert (processes, segments, folders) == ([], [], [])


STREAMING = DEMO.with_name("streaming.py")


def test_streaming_example_prints_the_same_generated_text_over_grpc_and_http():
    http, grpc, metrics = free_ports(3)
    env = dict(
        os.environ,
        PYTRITON_TRITON_CONFIG_HTTP_PORT=str(http),
        PYTRITON_TRITON_CONFIG_GRPC_PORT=str(grpc),
        PYTRITON_TRITON_CONFIG_METRICS_PORT=str(metrics),
    )
    result = subprocess.run(
        [sys.executable, str(STREAMING), "--max-tokens", "30"], env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    lines = result.stdout.splitlines()
    assert lines[-1] == "streaming OK: 30 tokens over gRPC and over HTTP"
    grpc_line, http_line = lines[-3], lines[-2]
    assert grpc_line.split("| ")[1] == http_line.split("| ")[1]
    assert len(grpc_line.split("| ")[1]) == len("the model ") + 30
