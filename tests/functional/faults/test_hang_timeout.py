"""A callable that never returns (it blocks on a lock forever) past ``ModelConfig.hang_timeout_s``:
on a thread of the script, readiness falls and `serve()` exits non-zero with the callable's stack
in the log; in a worker process, that process is killed (its stack written first) and a fresh one
serves on. Against the real server."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest
from support import free_ports, http_status, wait_until

from pytriton.client import ModelClient

pytestmark = pytest.mark.functional

SCRIPT = textwrap.dedent("""
    import sys, threading
    import numpy as np
    from pytriton.decorators import batch
    from pytriton.model_config import ModelConfig, Tensor
    from pytriton.triton import Triton, TritonConfig

    http, grpc, metrics, processes = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"
    held = threading.Lock()
    held.acquire()

    def wait_for_a_lock_nobody_releases():
        held.acquire()

    @batch
    def sometimes_stuck(x):
        if x[0, 0] < 0:
            wait_for_a_lock_nobody_releases()
        return {"y": x}

    config = TritonConfig(http_port=http, grpc_port=grpc, metrics_port=metrics, exit_timeout_secs=5)
    with Triton(config=config) as triton:
        triton.bind("Stuck", sometimes_stuck, inputs=[Tensor(name="x", dtype=np.float32, shape=(1,))],
                    outputs=[Tensor(name="y", dtype=np.float32, shape=(1,))],
                    config=ModelConfig(max_batch_size=2, hang_timeout_s=2.0, process_instances=processes))
        print("serving", flush=True)
        triton.serve()
""")


def _status(url: str):
    return http_status(url, timeout_s=1.0)  # an int, or the error's name when nothing answers yet


def _start(tmp_path, processes: bool):
    script = tmp_path / "script.py"
    script.write_text(SCRIPT)
    http, grpc, metrics = free_ports(3)
    process = subprocess.Popen([sys.executable, str(script), str(http), str(grpc), str(metrics),
                                "1" if processes else "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert process.stdout.readline().strip() == "serving", process.stderr.read()[-3000:]
    return process, f"127.0.0.1:{http}"


def _ask_in_background(url: str, value: float) -> dict:
    outcome: dict = {}

    def ask() -> None:
        try:
            with ModelClient(url, "Stuck", inference_timeout_s=60) as client:
                outcome["y"] = client.infer_sample(x=np.array([value], np.float32))["y"]
        except Exception as exc:  # noqa: BLE001 - the test inspects it
            outcome["error"] = exc

    thread = threading.Thread(target=ask, daemon=True)
    thread.start()
    outcome["thread"] = thread
    return outcome


def test_a_callable_stuck_on_a_thread_stops_the_server_and_serve_exits_non_zero(tmp_path):
    process, url = _start(tmp_path, processes=False)
    try:
        assert wait_until(lambda: _status(f"http://{url}/v2/health/ready") == 200, 10.0), "never ready"
        _ask_in_background(url, -1.0)
        asked = time.monotonic()
        assert wait_until(lambda: _status(f"http://{url}/v2/health/ready") != 200, 10.0), "readiness never fell"
        fell = time.monotonic() - asked
        _, err = process.communicate(timeout=30)
        ended = time.monotonic() - asked
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode not in (0, None), err[-3000:]
    assert 2.0 <= fell < 5.0, fell  # hang_timeout_s=2, checked every 0.5 s
    assert ended < 15.0, ended
    assert "PyTritonModelHangError" in err and "hang_timeout_s=2" in err, err[-3000:]
    assert "wait_for_a_lock_nobody_releases" in err and "held.acquire()" in err, err[-3000:]  # the stack


def test_a_callable_stuck_in_a_worker_process_is_killed_and_a_fresh_one_serves(tmp_path):
    process, url = _start(tmp_path, processes=True)
    try:
        stuck = _ask_in_background(url, -1.0)
        stuck["thread"].join(20)
        assert "error" in stuck, stuck  # its worker process was killed
        with ModelClient(url, "Stuck", init_timeout_s=20, inference_timeout_s=20) as client:
            deadline = time.monotonic() + 15
            while True:  # the fresh worker process takes a moment to be greeted
                try:
                    answer = client.infer_sample(x=np.array([3.0], np.float32))["y"]
                    break
                except Exception:  # noqa: BLE001
                    assert time.monotonic() < deadline
                    time.sleep(0.2)
        np.testing.assert_allclose(answer, [3.0])
        assert _status(f"http://{url}/v2/health/ready") == 200
        assert process.poll() is None, "the server stopped although the worker process could be freed"
    finally:
        process.terminate()
        _, err = process.communicate(timeout=30)
    assert "killing its worker process" in err and "hang_timeout_s=2" in err, err[-3000:]
    assert "wait_for_a_lock_nobody_releases" in err, err[-3000:]  # faulthandler's dump of the worker process
