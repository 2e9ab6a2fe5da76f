"""The execution timeout, through the real tritonserver: a hung callable is abandoned, the
instance keeps serving, and `stop()` ends cleanly while the abandoned thread is still stuck."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from support import grpc_url, http_url, our_leftovers, server_config

from pytriton.client import ModelClient
from pytriton.client.exceptions import PyTritonClientInferenceServerError
from pytriton.decorators import batch
from pytriton.model_config import ModelConfig, Tensor
from pytriton.triton import Triton

pytestmark = pytest.mark.functional

HANG_FOREVER = -1.0  # waits until the test's end
HANG_A_WHILE = -2.0  # waits until the test lets it return, after its requester got the timeout


class Sometimes:
    """Doubles its input, but hangs on a marker value (as a deadlocked model would)."""

    def __init__(self) -> None:
        self.forever = threading.Event()
        self.a_while = threading.Event()
        self.returned_late = threading.Event()
        self.threads: list = []

    @batch
    def __call__(self, x):
        self.threads.append(threading.current_thread())
        if HANG_FOREVER in x:
            self.forever.wait(60)
        if HANG_A_WHILE in x:
            self.a_while.wait(60)
            self.returned_late.set()
            return {"y": np.full_like(x, 666.0)}  # must reach nobody
        return {"y": x * 2}


def _infer(url: str, value: float) -> float:
    with ModelClient(url, "Sometimes", inference_timeout_s=20) as client:
        return float(client.infer_sample(x=np.array([value], dtype=np.float32))["y"][0])


def _timed_out(url: str, value: float) -> tuple:
    started = time.monotonic()
    with pytest.raises(PyTritonClientInferenceServerError) as info:
        _infer(url, value)
    return str(info.value), time.monotonic() - started


def test_hung_call_times_out_the_instance_keeps_serving_and_stop_leaves_nothing_behind():
    model = Sometimes()
    config = server_config()
    triton = Triton(config=config)
    try:
        triton.bind("Sometimes", model, inputs=[Tensor(name="x", dtype=np.float32, shape=(1,))],
                    outputs=[Tensor(name="y", dtype=np.float32, shape=(1,))],
                    config=ModelConfig(max_batch_size=4, execution_timeout_s=1))
        triton.run()
        url = grpc_url(config)
        assert _infer(url, 3.0) == 6.0

        message, waited = _timed_out(url, HANG_FOREVER)
        assert "Model 'Sometimes': the inference callable did not return within 1 s" in message
        assert 0.9 <= waited < 3.0, waited
        assert _infer(url, 4.0) == 8.0  # served on a fresh thread while the first one hangs

        message, waited = _timed_out(http_url(config), HANG_A_WHILE)
        assert "did not return within 1 s" in message and 0.9 <= waited < 3.0
        model.a_while.set()  # that call now returns 666: dropped, the next requester gets its own answer
        assert model.returned_late.wait(5)
        assert [_infer(url, v) for v in (5.0, 6.0)] == [10.0, 12.0]
        assert len({id(t) for t in model.threads}) == 3  # first thread, its replacement, the one after

        started = time.monotonic()
        triton.stop()  # with the first abandoned thread still stuck in the callable
        assert time.monotonic() - started < 15
        assert model.threads[0].is_alive()
        assert our_leftovers() == {"processes": [], "segments": [], "folders": []}
    finally:
        model.forever.set()
        triton.stop()
    model.threads[0].join(5)
    assert not model.threads[0].is_alive()
