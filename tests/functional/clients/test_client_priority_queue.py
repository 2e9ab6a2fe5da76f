"""A request of a higher priority level overtakes the queue, from every client kind, on both paths.

The model has one instance, ``max_batch_size=1`` and two priority levels (default 2). A first
request holds the instance (its callable waits for the test's signal); three requests of the
default level queue up behind it in Triton's dynamic batcher (the server's own
``nv_inference_pending_request_count`` says so); then one of level 1 is sent. Released, the
callable sees the level-1 request right after the first one, before the three that waited
longer. Triton orders the queue, so this holds on pytriton's backend and on the proxy path alike,
over HTTP and gRPC; the clients only have to carry the level (``priority=``, per client or per
call). HTTP streaming cannot carry one (measured: Triton's generate endpoint queues such a
request at the default level), so the streaming clients refuse it there.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import urllib.request
from typing import Callable, Iterator, List

import numpy as np
import pytest
from support import grpc_url, http_url, server_config, wait_until

from pytriton.client import (
    AsyncioDecoupledModelClient,
    AsyncioModelClient,
    DecoupledModelClient,
    FuturesModelClient,
    ModelClient,
    PyTritonClientValueError,
)
from pytriton.decorators import batch
from pytriton.model_config import DynamicBatcher, ModelConfig, Tensor
from pytriton.triton import Triton

pytestmark = pytest.mark.functional

HOLD_S = 60.0  # the longest the first request holds the instance (the test releases it much sooner)
LEVELS = DynamicBatcher(priority_levels=2, default_priority_level=2)
TENSORS = {"inputs": [Tensor(name="x", dtype=np.int64, shape=(1,))],
           "outputs": [Tensor(name="y", dtype=np.int64, shape=(1,))]}


class Gate:
    """Records the order the callable sees the requests in; holds the first (value 0) until released."""

    def __init__(self) -> None:
        self.order: List[int] = []
        self.started = threading.Event()
        self.release = threading.Event()

    def reset(self) -> None:
        self.order.clear()
        self.started.clear()
        self.release.clear()

    def see(self, value: int) -> None:
        self.order.append(value)
        if value == 0:
            self.started.set()
            self.release.wait(HOLD_S)


@pytest.fixture(scope="module", params=["pytriton", "python"], ids=["pytritons-backend", "proxy-path"])
def server(request) -> Iterator[dict]:
    gate = Gate()

    @batch
    def queued(x):
        gate.see(int(x[0, 0]))
        return {"y": x}

    @batch
    def streamed(x):
        gate.see(int(x[0, 0]))
        yield {"y": x}

    config = server_config(model_backend=request.param)
    with Triton(config=config) as triton:
        triton.bind("Queue", queued, config=ModelConfig(max_batch_size=1, batcher=LEVELS), **TENSORS)
        triton.bind("Stream", streamed, config=ModelConfig(max_batch_size=1, batcher=LEVELS, decoupled=True),
                    **TENSORS)
        triton.bind("Flat", queued, config=ModelConfig(max_batch_size=1), **TENSORS)
        triton.bind("Named", batch(lambda priority: {"y": priority * 2}), config=ModelConfig(max_batch_size=4),
                    inputs=[Tensor(name="priority", dtype=np.int64, shape=(1,))], outputs=TENSORS["outputs"])
        triton.run()
        yield {"config": config, "gate": gate}


def pending(config, model: str) -> int:
    """Requests waiting in the model's queue, as the server's metrics say."""
    with urllib.request.urlopen(f"http://127.0.0.1:{config.metrics_port}/metrics", timeout=5) as answer:
        text = answer.read().decode()
    for line in text.splitlines():
        if line.startswith("nv_inference_pending_request_count{") and f'model="{model}"' in line:
            return int(float(line.rsplit(" ", 1)[1]))
    return 0


def one(url: str, model: str, value: int) -> int:
    with ModelClient(url, model) as client:
        return int(client.infer_sample(x=np.array([value], np.int64))["y"][0])


def overtakes(server: dict, url: str, model: str, send_urgent: Callable[[], int]) -> List[int]:
    """The order the callable saw: a held request, three of the default level queued, then `send_urgent`."""
    config, gate = server["config"], server["gate"]
    gate.reset()
    with concurrent.futures.ThreadPoolExecutor(5) as pool:
        try:
            held = pool.submit(one, url, model, 0)
            assert gate.started.wait(30), "the first request never reached the callable"
            waiting = [pool.submit(one, url, model, value) for value in (1, 2, 3)]
            assert wait_until(lambda: pending(config, model) == 3, 30), pending(config, model)
            urgent = pool.submit(send_urgent)
            assert wait_until(lambda: pending(config, model) == 4, 30), pending(config, model)
        finally:
            gate.release.set()
        assert urgent.result(60) == 9
        assert held.result(60) == 0 and [future.result(60) for future in waiting] == [1, 2, 3]
    return list(gate.order)


def _sync(url: str) -> int:
    with ModelClient(url, "Queue") as client:
        return int(client.infer_sample(x=np.array([9], np.int64), priority=1)["y"][0])


def _futures(url: str) -> int:
    with FuturesModelClient(url, "Queue", priority=1) as client:  # the client's level, for every call
        return int(client.infer_sample(x=np.array([9], np.int64)).result(60)["y"][0])


def _asyncio(url: str) -> int:
    async def call() -> int:
        async with AsyncioModelClient(url, "Queue") as client:
            return int((await client.infer_batch(x=np.array([[9]], np.int64), priority=1))["y"][0, 0])

    return asyncio.run(call())


@pytest.mark.parametrize("send", [_sync, _futures, _asyncio], ids=["ModelClient", "FuturesModelClient",
                                                                  "AsyncioModelClient"])
@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_high_priority_request_overtakes_the_queue(server, protocol, send):
    url = http_url(server["config"]) if protocol == "http" else grpc_url(server["config"])
    order = overtakes(server, url, "Queue", lambda: send(url))
    assert order[:2] == [0, 9], order  # served next, before the three that waited longer
    assert sorted(order[2:]) == [1, 2, 3], order


def test_without_a_priority_the_queue_keeps_its_order(server):
    url = grpc_url(server["config"])
    order = overtakes(server, url, "Queue", lambda: one(url, "Queue", 9))
    assert order[:1] == [0] and order[-1] == 9, order


def test_a_grpc_stream_carries_its_priority(server):
    """A decoupled model's instance may take one batch besides the one it streams (pytriton's backend
    keeps the next batch in the instance until the stream before it ends; the proxy's stub takes
    one at times): the urgent request overtakes the requests still in Triton's queue."""
    url = grpc_url(server["config"])

    async def stream() -> int:
        async with AsyncioDecoupledModelClient(url, "Stream") as client:
            answers = [int(item["y"][0]) async for item in client.infer_sample(x=np.array([9], np.int64),
                                                                               priority=1)]
        return answers[0]

    def held(value: int) -> int:
        with DecoupledModelClient(url, "Stream") as client:
            return [int(item["y"][0]) for item in client.infer_sample(x=np.array([value], np.int64))][0]

    config, gate = server["config"], server["gate"]
    gate.reset()
    with concurrent.futures.ThreadPoolExecutor(5) as pool:
        try:
            first = pool.submit(held, 0)
            assert gate.started.wait(30)
            waiting = [pool.submit(held, value) for value in (1, 2, 3)]
            assert wait_until(lambda: pending(config, "Stream") >= 2, 30), pending(config, "Stream")
            urgent = pool.submit(asyncio.run, stream())
            assert wait_until(lambda: pending(config, "Stream") >= 3 or urgent.done(), 30), pending(config, "Stream")
        finally:
            gate.release.set()
        assert urgent.result(60) == 9 and first.result(60) == 0
        assert [future.result(60) for future in waiting] == [1, 2, 3]
    order = gate.order
    assert order[0] == 0 and sorted(order[1:]) == [1, 2, 3, 9], order
    assert order.index(9) <= 2, order  # at most the one batch the instance held goes first


def test_http_streaming_refuses_a_priority_it_cannot_carry(server):
    with DecoupledModelClient(http_url(server["config"]), "Stream") as client:
        with pytest.raises(PyTritonClientValueError) as info:
            list(client.infer_sample(x=np.array([5], np.int64), priority=1))
        assert "cannot go over HTTP streaming" in str(info.value) and "grpc://" in str(info.value)
        assert [int(item["y"][0]) for item in client.infer_sample(x=np.array([5], np.int64))] == [5]


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_level_the_model_does_not_have_is_refused_naming_the_levels(server, protocol):
    url = http_url(server["config"]) if protocol == "http" else grpc_url(server["config"])
    with ModelClient(url, "Queue") as client:
        with pytest.raises(PyTritonClientValueError) as info:
            client.infer_sample(x=np.array([5], np.int64), priority=3)
        assert str(info.value).startswith("Model 'Queue' has priority levels 1..2 (1 the highest; 0 for its default, "
                                          "2), got priority=3")
        assert int(client.infer_sample(x=np.array([5], np.int64), priority=2)["y"][0]) == 5
    with ModelClient(url, "Flat", priority=1) as client:
        with pytest.raises(PyTritonClientValueError, match=r"Model 'Flat' has no priority levels, so priority=1"):
            client.infer_sample(x=np.array([5], np.int64))
        assert int(client.infer_sample(x=np.array([5], np.int64), priority=0)["y"][0]) == 5


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_models_input_named_priority_is_still_given_by_name(server, protocol):
    url = http_url(server["config"]) if protocol == "http" else grpc_url(server["config"])
    with ModelClient(url, "Named") as client:  # as code written for the published clients does
        assert client.infer_sample(priority=np.array([21], np.int64))["y"].tolist() == [42]
        assert client.infer_batch(priority=np.array([[1], [2]], np.int64))["y"].tolist() == [[2], [4]]
    with FuturesModelClient(url, "Named") as client:
        chunked = client.infer_batch_chunked(priority=np.arange(6, dtype=np.int64).reshape(6, 1)).result(60)
        assert chunked["y"].ravel().tolist() == [0, 2, 4, 6, 8, 10]
