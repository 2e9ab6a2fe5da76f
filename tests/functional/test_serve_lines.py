"""`python serve.py` says what it serves where, and at Ctrl+C that it drains; bind names a forgotten @batch.

The serving script runs as a user runs it: its own process, no logging configured, stderr read
as a terminal shows it. One server start; the drain is watched with a request in flight.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest
from support import free_ports

from pytriton.client import ModelClient

pytestmark = pytest.mark.functional

SCRIPT = textwrap.dedent("""
    import time
    import numpy as np
    from pytriton.decorators import batch
    from pytriton.model_config import ModelConfig, Tensor
    from pytriton.triton import Triton


    @batch
    def scale(values, factor):
        time.sleep(float(factor[0, 0]) / 10)  # factor 20: a 2 s request, to watch the drain
        return {"scaled": values * factor}


    def forgot(values, factor):
        return {"scaled": values * factor}


    tensors = dict(inputs=[Tensor(name="values", dtype=np.float32, shape=(-1,)),
                           Tensor(name="factor", dtype=np.float32, shape=(1,))],
                   outputs=[Tensor(name="scaled", dtype=np.float32, shape=(-1,))],
                   config=ModelConfig(max_batch_size=8))
    with Triton() as triton:
        triton.bind(model_name="Scale", infer_func=scale, **tensors)
        triton.bind(model_name="Forgot", infer_func=forgot, **tensors)  # bound without @batch
        triton.serve()
""")


def test_the_start_line_the_drain_line_and_the_forgotten_batch_warning(tmp_path):
    http, grpc, metrics = free_ports(3)
    script = tmp_path / "serve.py"
    script.write_text(SCRIPT)
    env = dict(os.environ, PYTHONUNBUFFERED="1", PYTRITON_TRITON_CONFIG_HTTP_PORT=str(http),
               PYTRITON_TRITON_CONFIG_GRPC_PORT=str(grpc), PYTRITON_TRITON_CONFIG_METRICS_PORT=str(metrics))
    process = subprocess.Popen([sys.executable, str(script)], stderr=subprocess.PIPE, text=True, env=env,
                               cwd=tmp_path)
    lines: list = []
    reader = threading.Thread(target=lambda: [lines.append((time.monotonic(), line.rstrip("\n")))
                                              for line in process.stderr], daemon=True)
    reader.start()
    try:
        started = _wait_for(lines, "pytriton: serving ", 120)
        assert started == (
            f"pytriton: serving Scale (version 1), Forgot (version 1) on http://localhost:{http} and "
            f"grpc://localhost:{grpc}; metrics on http://localhost:{metrics}/metrics; Ctrl+C or SIGTERM stops"
        ), lines
        warning = [text for _, text in lines if "UserWarning" in text]
        bind_line = next(n for n, text in enumerate(SCRIPT.splitlines(), 1) if 'model_name="Forgot"' in text)
        assert warning and warning[0].startswith(f"{script}:{bind_line}: UserWarning: model 'Forgot': the inference "
                                                 "callable 'forgot' has no decorator"), lines
        assert "Did you forget @batch" in warning[0]

        results = []
        with ModelClient(f"localhost:{http}", "Scale") as client:
            slow = threading.Thread(target=lambda: results.append(client.infer_sample(
                values=np.ones(2, np.float32), factor=np.array([20.0], np.float32))))
            slow.start()
            time.sleep(0.5)  # the 2 s request is in flight
            signalled = time.monotonic()
            process.send_signal(signal.SIGINT)
            draining = _wait_for(lines, "pytriton: SIGINT received", 5)
            said_at = next(at for at, text in lines if text == draining)
            assert said_at - signalled < 1.0, lines
            assert draining == ("pytriton: SIGINT received: draining (not ready any more; the requests in flight "
                                "finish, for up to 30 s), then stopping; a second Ctrl+C or SIGTERM stops at once")
            slow.join(30)
        np.testing.assert_array_equal(results[0]["scaled"], [20.0, 20.0])  # the drain let it finish
        assert process.wait(timeout=60) == 0
    finally:
        process.kill()
        process.wait()
        reader.join(5)


def _wait_for(lines: list, start: str, timeout_s: float) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = [text for _, text in lines if text.startswith(start)]
        if found:
            return found[0]
        time.sleep(0.05)
    raise AssertionError(f"no line starting with {start!r} within {timeout_s} s: {lines}")
