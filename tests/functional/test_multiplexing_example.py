"""examples/multiplexing.py on free ports: every customer's requests answered by its own adapter."""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest
from support import free_ports

pytestmark = pytest.mark.functional

EXAMPLE = pathlib.Path(__file__).resolve().parents[2] / "examples" / "multiplexing.py"


def test_the_example_serves_each_customer_with_its_own_adapter():
    http, grpc, metrics = free_ports(3)
    env = dict(os.environ, PYTRITON_TRITON_CONFIG_HTTP_PORT=str(http), PYTRITON_TRITON_CONFIG_GRPC_PORT=str(grpc),
               PYTRITON_TRITON_CONFIG_METRICS_PORT=str(metrics))
    done = subprocess.run([sys.executable, str(EXAMPLE), "--requests", "120"], env=env, capture_output=True,
                          text=True, timeout=180, check=False)
    assert done.returncode == 0, f"stdout:\n{done.stdout}\nstderr:\n{done.stderr[-3000:]}"
    lines = done.stdout.splitlines()
    assert lines[-2].startswith("120 requests for ") and "each by its own adapter" in lines[-2], done.stdout
    assert lines[-1].startswith("loads ") and "hit rate" in lines[-1], done.stdout


def test_its_start_line_names_the_multiplexed_model():
    http, grpc, metrics = free_ports(3)
    env = dict(os.environ, PYTRITON_TRITON_CONFIG_HTTP_PORT=str(http), PYTRITON_TRITON_CONFIG_GRPC_PORT=str(grpc),
               PYTRITON_TRITON_CONFIG_METRICS_PORT=str(metrics))
    with subprocess.Popen([sys.executable, str(EXAMPLE), "--serve"], env=env, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True) as serving:
        deadline = time.monotonic() + 120
        line = ""
        while time.monotonic() < deadline and "serving " not in line:
            line = serving.stderr.readline()
            if not line and serving.poll() is not None:
                break
        serving.send_signal(signal.SIGINT)
        serving.communicate(timeout=60)
    assert "Adapt (version 1; multiplexed by request parameter 'variant', 3 per instance) on http" in line, line
    assert serving.returncode == 0
