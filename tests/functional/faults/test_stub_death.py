"""A model's Python-backend stub dies (kill -9, as the OOM killer does): honest health, healing, crash loops.

On the proxy path (``model_backend="python"``): pytriton's own backend runs no stub.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import signal
import threading
import time

import numpy as np
import psutil
import pytest
from support import http_status, http_url, our_leftovers, running_triton, stub_processes, wait_until

from pytriton.client import ModelClient
from pytriton.client.exceptions import PyTritonClientInferenceServerError
from pytriton.decorators import batch
from pytriton.exceptions import PyTritonModelRestartLimitError, PyTritonServerCrashedError
from pytriton.model_config import ModelConfig, Tensor

pytestmark = pytest.mark.functional


@batch
def _sleep(seconds):
    time.sleep(float(seconds.max()))
    return {"seconds": seconds * 2}


def _bind_sleep(triton, **config):
    triton.bind(
        "Sleep", _sleep,
        inputs=[Tensor(name="seconds", dtype=np.float32, shape=(1,))],
        outputs=[Tensor(name="seconds", dtype=np.float32, shape=(1,))],
        config=ModelConfig(max_batch_size=4, **config),
    )


def _readiness(base: str):
    return http_status(f"{base}/v2/health/ready"), http_status(f"{base}/v2/models/Sleep/ready")


def _kill_stub(model: str = "Sleep", signum: int = signal.SIGKILL) -> set:
    """Kill the stub of the model's one instance, which holds the request in flight; its pid (in a set)."""
    stubs = stub_processes(model)
    assert len(stubs) == 1, f"expected the stub of the one instance of {model}, found {stubs}"
    for stub in stubs:
        os.kill(stub.pid, signum)
    return {stub.pid for stub in stubs}


def _ask_in_background(base: str, model: str, seconds: float, timeout_s: float):
    """Send one request from a thread; the thread and a dict that gets its result or its error."""
    outcome: dict = {}

    def ask():
        try:
            with ModelClient(base, model, inference_timeout_s=timeout_s) as client:
                outcome["result"] = client.infer_sample(seconds=np.array([seconds], dtype=np.float32))
        except Exception as exc:  # noqa: BLE001 - the test inspects it
            outcome["error"] = exc

    thread = threading.Thread(target=ask)
    thread.start()
    return thread, outcome


def test_killed_stub_turns_readiness_false_fails_in_flight_request_and_is_healed(caplog):
    caplog.set_level(logging.WARNING, logger="pytriton")
    with running_triton(model_backend="python") as triton:
        _bind_sleep(triton)
        triton.run()
        base = http_url(triton._config)
        assert _readiness(base) == (200, 200)
        thread, outcome = _ask_in_background(base, "Sleep", seconds=3.0, timeout_s=30)
        time.sleep(0.5)  # the request is inside the callable now
        dead_pids = _kill_stub()
        killed_at = time.monotonic()

        down = wait_until(lambda: all(code != 200 for code in _readiness(base)), timeout_s=2.0, interval_s=0.02)
        assert down, f"readiness still {_readiness(base)} 2 s after the stub died"
        thread.join(10)
        assert not thread.is_alive(), "the in-flight request hung"
        assert "result" not in outcome
        assert isinstance(outcome["error"], PyTritonClientInferenceServerError)
        assert re.search(r"Sleep_0_\d died", str(outcome["error"])), outcome["error"]
        assert time.monotonic() - killed_at < 8

        healed = wait_until(lambda: _readiness(base) == (200, 200), timeout_s=10 - (time.monotonic() - killed_at))
        assert healed, f"not ready again 10 s after the death: {_readiness(base)}"
        with ModelClient(base, "Sleep", inference_timeout_s=10) as client:
            result = client.infer_sample(seconds=np.array([0.01], dtype=np.float32))
        np.testing.assert_allclose(result["seconds"], [0.02])
        assert stub_processes("Sleep") and not {stub.pid for stub in stub_processes("Sleep")} & dead_pids
        assert triton.is_alive()

    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("Sleep_0_" in m and "SIGKILL" in m and "restart 1" in m for m in warnings), warnings
    assert our_leftovers() == {"processes": [], "segments": [], "folders": []}


TRITON_ABORT = "boost::interprocess::lock_exception"
"""Triton 2.51's own abort when a stub dies holding a lock of its message queue (docs/reliability.md)."""


def _spend_the_restart_budget() -> dict:
    """Serve a model allowed one restart, kill its stub twice; what `serve()` raised, and the server's health."""
    with running_triton(model_backend="python") as triton:
        _bind_sleep(triton, max_restarts=1, restart_window_s=60)
        triton.run()
        base = http_url(triton._config)
        raised = {}

        def serve():
            try:
                triton.serve(monitoring_period_s=0.1)
            except Exception as exc:  # noqa: BLE001 - the test inspects it
                raised["error"] = exc

        thread = threading.Thread(target=serve)
        thread.start()
        _kill_stub()
        assert wait_until(lambda: _readiness(base) == (200, 200) and stub_processes("Sleep"), timeout_s=10)
        _kill_stub()  # the second death within the window spends the budget of one restart
        thread.join(15)
        assert not thread.is_alive(), "serve() did not return after the restart budget was spent"
        raised["alive"] = triton.is_alive()
        raised["live"] = http_status(f"{base}/v2/health/live")
    assert our_leftovers() == {"processes": [], "segments": [], "folders": []}
    return raised


def test_a_model_whose_stubs_keep_dying_is_given_up_and_serve_raises():
    # A stub killed while it holds a lock of the queue it shares with tritonserver makes the server
    # abort (Triton's fault, a few percent of kills): serve() then raises the crash, naming it, and
    # the scenario is run again; the restart limit must be seen in one of three runs.
    aborts = []
    for _ in range(3):
        raised = _spend_the_restart_budget()
        error = raised.get("error")
        if isinstance(error, PyTritonServerCrashedError) and TRITON_ABORT in str(error):
            aborts.append(str(error)[:200])
            continue
        assert isinstance(error, PyTritonModelRestartLimitError), raised
        assert "Sleep" in str(error) and "max_restarts=1" in str(error)
        assert not raised["alive"]
        assert raised["live"] != 200  # the server is gone, not half-serving
        return
    pytest.fail(f"tritonserver aborted in each of three runs: {aborts}")


def test_a_segfaulted_stub_is_named_by_its_signal_and_leaves_no_zombie(caplog):
    # tritonserver runs with SIGCHLD ignored: a dead stub is reaped at once (Triton 2.51 never waits
    # for one that died mid-request), and the proxy's fault trace tells the supervisor the signal.
    caplog.set_level(logging.WARNING, logger="pytriton")
    with running_triton(model_backend="python") as triton:
        _bind_sleep(triton)
        triton.run()
        base = http_url(triton._config)
        dead = _kill_stub(signum=signal.SIGSEGV)

        def named() -> bool:
            return any("Sleep_0_" in r.getMessage() and "SIGSEGV" in r.getMessage() for r in caplog.records)

        assert wait_until(named, timeout_s=10), [r.getMessage() for r in caplog.records]
        assert not any(psutil.pid_exists(pid) for pid in dead)  # a zombie would still exist
        assert wait_until(lambda: _readiness(base) == (200, 200), timeout_s=15), _readiness(base)


async def _async_sleep(requests):
    await asyncio.sleep(float(requests[0]["seconds"][0]))
    return [{"seconds": request["seconds"] * 2} for request in requests]


def test_a_relayed_request_on_a_dying_stub_leaves_a_raw_tritonclient_waiting_and_the_model_heals():
    """A known limit of Triton 2.51 (docs/reliability.md): the proxy of an `async` callable (and of a
    decoupled model) answers through response senders after its `execute` returned, and Triton
    answers such requests neither when the stub dies nor later. pytriton's clients end them
    (tests/functional/faults/test_lost_requests.py); a raw ``tritonclient`` user gets its own
    timeout error, never a hang past it, and a model that serves again."""
    import tritonclient.http

    with running_triton(model_backend="python", exit_timeout_secs=4) as triton:
        triton.bind(
            "AsyncSleep", _async_sleep,
            inputs=[Tensor(name="seconds", dtype=np.float32, shape=(1,))],
            outputs=[Tensor(name="seconds", dtype=np.float32, shape=(1,))],
            config=ModelConfig(batching=False),
        )
        triton.run()
        base = http_url(triton._config)
        outcome: dict = {}

        def ask() -> None:
            raw = tritonclient.http.InferenceServerClient(base[len("http://"):], network_timeout=4.0)
            request = tritonclient.http.InferInput("seconds", [1], "FP32")
            request.set_data_from_numpy(np.array([3.0], dtype=np.float32))
            try:
                outcome["result"] = raw.infer("AsyncSleep", [request])
            except Exception as exc:  # noqa: BLE001 - the test inspects it
                outcome["error"] = exc
            finally:
                raw.close()

        thread = threading.Thread(target=ask)
        thread.start()
        time.sleep(0.5)  # the request is in the callable now
        _kill_stub("AsyncSleep")
        thread.join(10)
        assert not thread.is_alive(), "the relayed request outlived its client's timeout"
        assert "result" not in outcome
        assert "timed out" in str(outcome["error"]).lower(), outcome
        assert wait_until(lambda: http_status(f"{base}/v2/models/AsyncSleep/ready") == 200, timeout_s=10)
        with ModelClient(base, "AsyncSleep", inference_timeout_s=10) as client:
            result = client.infer_sample(seconds=np.array([0.01], dtype=np.float32))
        np.testing.assert_allclose(result["seconds"], [0.02])
    assert our_leftovers() == {"processes": [], "segments": [], "folders": []}
