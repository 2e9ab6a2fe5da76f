"""The Python proxy model (`pytriton.proxy.model.TritonPythonModel`) against a real worker handler,
without tritonserver.

Triton's Python backend is stood in for by `pb_utils_standin` (its requests, responses and
errors); the model is loaded with the ``config.pbtxt`` pytriton writes (as the JSON Triton gives
``initialize``), greets a handler running in this process over real ZeroMQ and shared memory, and
answers `execute` the way it does inside a stub: plain batches in its return value, relayed
ones (async callables, streams) through each request's response sender.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import time

import numpy as np
import pb_utils_standin
import pytest
import zmq
from google.protobuf import json_format
from support import shm_entries

pb_utils_standin.install()

from pytriton.decorators import batch  # noqa: E402
from pytriton.ipc import protocol  # noqa: E402
from pytriton.model_config import ModelConfig, Tensor  # noqa: E402
from pytriton.proxy import model as proxy_model  # noqa: E402
from pytriton.repository.pbtxt import parse_pbtxt  # noqa: E402
from pytriton.repository.served import served_config_text  # noqa: E402
from pytriton.worker.context import TritonContext  # noqa: E402
from pytriton.worker.handler import InstanceHandler  # noqa: E402
from pytriton.worker.instance import InstanceSpec  # noqa: E402

pytestmark = pytest.mark.integration

X = (Tensor(name="x", dtype=np.float32, shape=(-1,)),)
Y = (Tensor(name="y", dtype=np.float32, shape=(-1,)),)
Request = pb_utils_standin.InferenceRequest


@batch
def double(x):
    if (x < 0).any():
        raise ValueError("x must not be negative")
    return {"y": x * 2}


@batch
async def triple(x):
    await asyncio.sleep(0.01)
    return {"y": x * 3}


@batch
def countdown(x):
    for step in range(3, 0, -1):
        yield {"y": x * step}


@pytest.fixture
def serve(tmp_path, monkeypatch):
    """Start a handler for `func` and load the proxy model of it; both end with the test."""
    monkeypatch.setattr(proxy_model, "_exit_with_parent", lambda pid: None)  # the stub's watch of tritonserver
    monkeypatch.setattr(proxy_model, "_record_fatal_signals", lambda path: None)  # pytest keeps its faulthandler
    started = []
    zmq_context = zmq.Context()

    def start(func, config, asynchronous=False):
        context = TritonContext("Proxied", 1, X, Y, config)
        name_endpoint = protocol.name_endpoint(tmp_path, "Proxied")  # what the configuration names, as `bind` writes it
        endpoint = protocol.version_endpoint(name_endpoint, 1)  # the proxy of version 1 finds its handlers here
        shm_prefix = f"pytriton-{os.getpid()}-proxy{secrets.token_hex(3)}"
        spec = InstanceSpec(context=context, infer_func=func, endpoint=protocol.instance_endpoint(endpoint, 0),
                            instance=0, shm_prefix=protocol.model_shm_prefix(shm_prefix, "Proxied", 1),
                            asynchronous=asynchronous, pipelined=not (asynchronous or config.decoupled))
        handler = InstanceHandler(spec, zmq_context=zmq_context, on_unrecoverable=lambda name: None)
        handler.start()
        text = served_config_text("Proxied", X, Y, config, 1, coroutines=asynchronous, endpoint=name_endpoint,
                                  shm_prefix=shm_prefix, backend="python", parameters={protocol.PARAM_METRICS: "0"})
        model_config = json_format.MessageToDict(parse_pbtxt(text), preserving_proto_field_name=True)
        model = proxy_model.TritonPythonModel()
        model.initialize({"model_config": json.dumps(model_config), "model_name": "Proxied",
                          "model_instance_name": "Proxied_0_0", "model_version": "1"})
        started.append((model, handler))
        return model

    yield start
    for model, handler in started:
        model.finalize()
        assert handler.stop(5.0)
    zmq_context.term()
    assert shm_entries(f"pytriton-{os.getpid()}-proxy") == []  # the arenas of both sides are gone


def _wait_complete(requests, timeout_s=5.0):
    deadline = time.monotonic() + timeout_s
    while not all(request.sender.complete for request in requests):
        assert time.monotonic() < deadline, "the relay did not answer every request"
        time.sleep(0.01)


def test_a_batch_is_answered_in_executes_return_value_one_response_per_request(serve):
    model = serve(double, ModelConfig(max_batch_size=4))
    requests = [Request({"x": np.array([[1.0, 2.0]], np.float32)}, all_outputs=["y"]),
                Request({"x": np.array([[3.0, 4.0], [5.0, 6.0]], np.float32)}, {"note": "kept"}, all_outputs=["y"])]
    responses = model.execute(requests)
    assert not any(response.has_error() for response in responses)
    assert [response.outputs()["y"].tolist() for response in responses] == [[[2.0, 4.0]], [[6.0, 8.0], [10.0, 12.0]]]


def test_the_callables_error_reaches_every_request_of_its_batch_named(serve):
    model = serve(double, ModelConfig(max_batch_size=4))
    responses = model.execute([Request({"x": np.array([[-1.0]], np.float32)}), Request({"x": np.ones((1, 1), "f4")})])
    messages = [response.error().message() for response in responses]
    assert messages == ["Model 'Proxied' failed: ValueError: x must not be negative"] * 2


def test_an_async_callables_batches_are_relayed_through_the_response_senders(serve):
    model = serve(triple, ModelConfig(max_batch_size=4), asynchronous=True)
    requests = [Request({"x": np.array([[float(index)]], np.float32)}) for index in range(3)]
    assert model.execute(requests) is None  # answered later, by the relay
    _wait_complete(requests)
    for index, request in enumerate(requests):
        ((response, flags),) = request.sender.sent
        assert flags == pb_utils_standin.TRITONSERVER_RESPONSE_COMPLETE_FINAL
        assert response.outputs()["y"].tolist() == [[3.0 * index]]


def test_a_streams_parts_arrive_in_order_then_its_end(serve):
    model = serve(countdown, ModelConfig(max_batch_size=4, decoupled=True))
    request = Request({"x": np.array([[1.0]], np.float32)})
    assert model.execute([request]) is None
    _wait_complete([request])
    parts = [response.outputs()["y"].tolist() for response, _ in request.sender.sent if response is not None]
    assert parts == [[[3.0]], [[2.0]], [[1.0]]]
    assert request.sender.sent[-1][1] == pb_utils_standin.TRITONSERVER_RESPONSE_COMPLETE_FINAL
