"""What the Python backend tells each request, reaching the callable: the outputs its client
asked for (`request.requested_output_names`) and whether its client cancelled it while the
callable runs (`request.is_cancelled()`), against the real server."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Iterator, List

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from support import server_config, wait_until

from pytriton.client import AsyncioModelClient, ModelClient
from pytriton.client.exceptions import PyTritonClientTimeoutError
from pytriton.decorators import batch
from pytriton.model_config import ModelConfig, Tensor
from pytriton.triton import Triton

pytestmark = pytest.mark.functional

TWO_OUTPUTS = {
    "inputs": [Tensor(name="x", dtype=np.float32, shape=(2,))],
    "outputs": [
        Tensor(name="double", dtype=np.float32, shape=(2,)),
        Tensor(name="costly", dtype=np.float32, shape=(2,)),
    ],
}


class Selective:
    """Computes only the outputs each request asked for; records what it was told."""

    def __init__(self) -> None:
        self.asked: List[List[str]] = []
        self.lock = threading.Lock()

    def __call__(self, requests):
        answers = []
        for request in requests:
            names = request.requested_output_names
            with self.lock:
                self.asked.append(names)
            answer = {}
            if "double" in names:
                answer["double"] = request["x"] * 2
            if "costly" in names:
                answer["costly"] = request["x"] + 100
            answers.append(answer)
        return answers


@pytest.fixture(scope="module")
def served() -> Iterator[dict]:
    config = server_config()
    selective = Selective()
    whole = batch(lambda x: {"double": x * 2, "costly": x + 100})
    with Triton(config=config) as triton:
        triton.bind("Selective", selective, config=ModelConfig(max_batch_size=4), **TWO_OUTPUTS)
        triton.bind("Whole", whole, config=ModelConfig(max_batch_size=4), **TWO_OUTPUTS)
        yield {"selective": selective, "http": f"127.0.0.1:{config.http_port}",
               "grpc": f"127.0.0.1:{config.grpc_port}"}


def _ask_for(served, protocol: str, model: str, outputs: List[str]):
    module = httpclient if protocol == "http" else grpcclient
    client = module.InferenceServerClient(served[protocol])
    try:
        data = module.InferInput("x", [1, 2], "FP32")
        data.set_data_from_numpy(np.array([[1.0, 2.0]], np.float32))
        result = client.infer(model, [data], outputs=[module.InferRequestedOutput(name) for name in outputs])
        return {name: result.as_numpy(name) for name in ("double", "costly")}
    finally:
        client.close()


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_the_callable_learns_the_requested_outputs_and_only_those_are_sent(served, protocol):
    selective = served["selective"]
    before = len(selective.asked)
    got = _ask_for(served, protocol, "Selective", ["double"])
    assert selective.asked[before:] == [["double"]]
    np.testing.assert_array_equal(got["double"], [[2.0, 4.0]])
    assert got["costly"] is None  # not asked, not computed, not sent

    with ModelClient(f"{protocol}://{served[protocol]}", "Selective") as client:  # asks for nothing in particular
        both = client.infer_sample(np.array([1.0, 2.0], np.float32))
    assert selective.asked[-1] == ["double", "costly"]
    np.testing.assert_array_equal(both["costly"], [101.0, 102.0])


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_batch_callable_answering_every_output_sends_only_those_asked_for(served, protocol):
    got = _ask_for(served, protocol, "Whole", ["costly"])
    np.testing.assert_array_equal(got["costly"], [[101.0, 102.0]])
    assert got["double"] is None


async def _ask_then_cancel(url: str, model: str, started: threading.Event, batch_of: np.ndarray) -> float:
    """Send a batch from an asyncio task, cancel the task once the callable started; when."""
    async with AsyncioModelClient(url, model) as client:
        await client.model_config
        task = asyncio.create_task(client.infer_batch(batch_of))
        while not started.is_set():
            await asyncio.sleep(0.01)
        cancelled_at = time.monotonic()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return cancelled_at


class Patient:
    """Works up to 10 s on a request unless it is cancelled (x[0] < 0: answers at once);
    records what `is_cancelled()` said and when it first said True."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.learnt: List[float] = []
        self.quick_said: List[bool] = []

    def __call__(self, requests):
        if all(float(request["x"][0, 0]) < 0 for request in requests):
            self.quick_said.extend(request.is_cancelled() for request in requests)
        else:
            self.started.set()
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                if all(request.is_cancelled() for request in requests):
                    self.learnt.append(time.monotonic())
                    time.sleep(0.3)  # answer well after the client gave up: its timeout must win the race
                    break
                time.sleep(0.01)
        return [{"double": request["x"] * 2, "costly": request["x"]} for request in requests]


def test_a_request_cancelled_by_its_grpc_client_is_seen_by_the_running_callable():
    patient = Patient()
    config = server_config()
    url = f"grpc://127.0.0.1:{config.grpc_port}"
    with Triton(config=config) as triton:
        triton.bind("Patient", patient, config=ModelConfig(max_batch_size=4), **TWO_OUTPUTS)

        one_row = np.array([[1.0, 2.0]], np.float32)
        cancelled_at = asyncio.run(_ask_then_cancel(url, "Patient", patient.started, one_row))
        assert wait_until(lambda: bool(patient.learnt), timeout_s=5), "the callable never learnt the cancellation"
        assert patient.learnt[0] - cancelled_at < 0.5
        with ModelClient(url, "Patient", inference_timeout_s=5) as client:  # the model goes on at once
            answer = client.infer_sample(np.array([-1.0, 2.0], np.float32))
        assert answer["double"].tolist() == [-2.0, 4.0]
        assert patient.quick_said == [False]  # a request nobody cancelled


def test_a_request_whose_pytriton_client_timed_out_is_cancelled_over_http_too():
    # Triton reports no cancellation for HTTP; the deadline our clients send says it instead.
    patient = Patient()
    config = server_config()
    url = f"http://127.0.0.1:{config.http_port}"
    with Triton(config=config) as triton:
        triton.bind("Patient", patient, config=ModelConfig(max_batch_size=4), **TWO_OUTPUTS)
        with ModelClient(url, "Patient", inference_timeout_s=0.5) as client:
            assert client.model_config.max_batch_size == 4  # readiness out of the measured time
            started = time.monotonic()
            with pytest.raises(PyTritonClientTimeoutError):
                client.infer_sample(np.array([1.0, 2.0], np.float32))
        assert wait_until(lambda: bool(patient.learnt), timeout_s=5), "the callable never learnt it"
        assert patient.learnt[0] - started < 1.0


def test_a_batch_callable_that_names_is_cancelled_sees_its_rows_cancelled():
    learnt: List[float] = []
    started = threading.Event()

    @batch
    def patient(x, is_cancelled):
        started.set()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            cancelled = is_cancelled()
            assert cancelled.shape == (len(x), 1)
            if cancelled.all():
                learnt.append(time.monotonic())
                break
            time.sleep(0.01)
        return {"double": x * 2, "costly": x}

    config = server_config()
    url = f"grpc://127.0.0.1:{config.grpc_port}"
    with Triton(config=config) as triton:
        triton.bind("BatchPatient", patient, config=ModelConfig(max_batch_size=4), **TWO_OUTPUTS)

        cancelled_at = asyncio.run(_ask_then_cancel(url, "BatchPatient", started, np.ones((2, 2), np.float32)))
        assert wait_until(lambda: bool(learnt), timeout_s=5), "the @batch callable never learnt the cancellation"
        assert learnt[0] - cancelled_at < 0.5


def test_a_request_cancelled_while_queued_behind_a_slow_batch_never_reaches_the_callable():
    # Triton 2.51 hands over requests cancelled in its queue; the proxy of a slow model drops them.
    seen: List[float] = []

    def slow(requests):
        seen.extend(float(request["x"][0, 0]) for request in requests)
        time.sleep(1.0)
        return [{"double": request["x"] * 2, "costly": request["x"]} for request in requests]

    config = server_config()
    url = f"grpc://127.0.0.1:{config.grpc_port}"
    with Triton(config=config) as triton:
        triton.bind("Slow", slow, config=ModelConfig(max_batch_size=1), **TWO_OUTPUTS)

        async def run() -> None:
            async with AsyncioModelClient(url, "Slow") as client:
                await client.model_config
                first = asyncio.create_task(client.infer_sample(np.array([1.0, 1.0], np.float32)))
                await asyncio.sleep(0.3)  # the first runs; the second waits in Triton's queue
                second = asyncio.create_task(client.infer_sample(np.array([2.0, 2.0], np.float32)))
                await asyncio.sleep(0.2)
                second.cancel()
                await first

        asyncio.run(run())
        with ModelClient(url, "Slow", inference_timeout_s=10) as client:  # and the model goes on
            assert client.infer_sample(np.array([3.0, 3.0], np.float32))["double"].tolist() == [6.0, 6.0]
    assert seen == [1.0, 3.0]
