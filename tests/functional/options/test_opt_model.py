"""Per-model options through the real tritonserver: batching off, versions, several models, the
response cache, optional inputs, request parameters and forwarded headers.

One server serves the module; its `TritonConfig` turns on the response cache and forwards
headers starting with ``x-fwd-`` over HTTP and gRPC.
"""

from __future__ import annotations

import json
import threading

import numpy as np
import pytest
import tritonclient.http as httpclient
from support import grpc_url, http_url, server_config

from pytriton.client import ModelClient
from pytriton.client.exceptions import PyTritonClientModelUnavailableError
from pytriton.decorators import batch, fill_optionals
from pytriton.exceptions import PyTritonBadParameterError, PyTritonInvalidOperationError
from pytriton.model_config import ModelConfig, Tensor
from pytriton.triton import Triton

pytestmark = pytest.mark.functional

F32 = {"inputs": [Tensor(dtype=np.float32, shape=(-1,))], "outputs": [Tensor(dtype=np.float32, shape=(-1,))]}


class Counter:
    """Counts calls and the requests it saw; answers each request with its input plus one."""

    def __init__(self) -> None:
        self.calls = 0
        self.shapes: list = []
        self.lock = threading.Lock()

    def __call__(self, requests):
        with self.lock:
            self.calls += 1
            self.shapes.extend(request["INPUT_1"].shape for request in requests)
        return [{"OUTPUT_1": request["INPUT_1"] + 1} for request in requests]


def _optional_plain(requests):
    """`b` is optional: requests without it get `a`, with it `a + b`, each on its own."""
    return [{"sum": r["a"] + r["b"] if "b" in r else r["a"], "had_b": np.full((len(r["a"]), 1), "b" in r)}
            for r in requests]


@fill_optionals(b=np.array([10.0], dtype=np.float32))
@batch
def _optional_filled(a, b):
    return {"sum": a + b, "had_b": np.ones((len(a), 1), dtype=bool)}


def _echo_parameters(requests):
    return [{"OUTPUT_1": np.array([[json.dumps(r.parameters, sort_keys=True).encode()]], dtype=object)}
            for r in requests]


OPTIONAL_IO = {
    "inputs": [Tensor(name="a", dtype=np.float32, shape=(1,)),
               Tensor(name="b", dtype=np.float32, shape=(1,), optional=True)],
    "outputs": [Tensor(name="sum", dtype=np.float32, shape=(1,)), Tensor(name="had_b", dtype=np.bool_, shape=(1,))],
}


@pytest.fixture(scope="module")
def server():
    config = server_config(
        response_cache_byte_size=1024 * 1024,
        http_header_forward_pattern="x-fwd-.*",
        grpc_header_forward_pattern="x-fwd-.*",
    )
    triton = Triton(config=config)
    counters = {name: Counter() for name in ("NoBatch", "Cached", "NotCached", "Versioned")}
    triton.bind("NoBatch", counters["NoBatch"], config=ModelConfig(batching=False), **F32)
    triton.bind("Cached", counters["Cached"], config=ModelConfig(response_cache=True), **F32)
    triton.bind("NotCached", counters["NotCached"], config=ModelConfig(response_cache=False), **F32)
    triton.bind("Versioned", counters["Versioned"], model_version=2, **F32)
    triton.bind("OptionalPlain", _optional_plain, **OPTIONAL_IO)
    triton.bind("OptionalFilled", _optional_filled, **OPTIONAL_IO)
    triton.bind("Parameters", _echo_parameters, inputs=F32["inputs"], outputs=[Tensor(dtype=object, shape=(1,))])
    triton.run()
    try:
        yield triton, config, counters
    finally:
        triton.stop()


@pytest.fixture(params=["http", "grpc"])
def url(request, server):
    _, config, _ = server
    return http_url(config) if request.param == "http" else grpc_url(config)


def test_batching_false_serves_max_batch_size_0_and_the_callable_sees_no_batch_axis(server):
    _, config, counters = server
    raw = httpclient.InferenceServerClient(http_url(config).removeprefix("http://")).get_model_config("NoBatch")
    assert raw.get("max_batch_size", 0) == 0
    assert "dynamic_batching" not in raw
    with ModelClient(http_url(config), "NoBatch") as client:
        assert not client.model_config.batching
        result = client.infer_sample(np.array([1.0, 2.0, 3.0], dtype=np.float32))
    assert result["OUTPUT_1"].tolist() == [2.0, 3.0, 4.0]
    assert counters["NoBatch"].shapes == [(3,)]


def test_max_batch_size_below_1_is_refused_when_batching():
    with pytest.raises(PyTritonBadParameterError, match=r"ModelConfig.max_batch_size must be an integer >= 1, got 0"):
        ModelConfig(max_batch_size=0)
    assert ModelConfig(batching=False, max_batch_size=0).max_batch_size == 0


def test_model_version_2_is_served_and_addressable_as_version_2(server, url):
    _, config, counters = server
    with ModelClient(url, "Versioned", "2", init_timeout_s=5) as client:
        assert client.infer_batch(np.zeros((1, 2), dtype=np.float32))["OUTPUT_1"].tolist() == [[1.0, 1.0]]
    with ModelClient(url, "Versioned", "1", ensure_model_is_ready=False) as client, pytest.raises(
        PyTritonClientModelUnavailableError
    ):
        client.infer_batch(np.zeros((1, 2), dtype=np.float32))
    raw = httpclient.InferenceServerClient(http_url(config).removeprefix("http://"))
    assert raw.is_model_ready("Versioned", "2")
    assert not raw.is_model_ready("Versioned", "1")


def test_several_models_are_served_by_one_server(server):
    _, config, _ = server
    raw = httpclient.InferenceServerClient(http_url(config).removeprefix("http://"))
    names = ["NoBatch", "Cached", "NotCached", "OptionalPlain", "OptionalFilled", "Parameters"]
    assert all(raw.is_model_ready(name) for name in names)
    assert raw.is_model_ready("Versioned", "2")


def test_binding_the_same_name_twice_is_refused(server):
    triton, config, counters = server
    with pytest.raises(PyTritonInvalidOperationError, match="model 'Cached' version 1 is already bound"):
        triton.bind("Cached", lambda requests: requests, **F32)
    with ModelClient(http_url(config), "Cached") as client:  # the first binding still serves
        client.infer_batch(np.full((1, 1), 99.0, dtype=np.float32))


def test_response_cache_answers_an_identical_request_without_calling_the_callable(server, url):
    _, _, counters = server
    for model, expected_calls in (("Cached", [1, 1, 2]), ("NotCached", [1, 2, 3])):
        counter = counters[model]
        seed = 100.0 if url.startswith("grpc") else 200.0  # each protocol's run starts uncached
        start = counter.calls
        calls = []
        with ModelClient(url, model) as client:
            for value in (seed, seed, seed + 0.5):
                result = client.infer_batch(np.full((1, 2), value, dtype=np.float32))
                assert result["OUTPUT_1"].tolist() == [[value + 1, value + 1]]
                calls.append(counter.calls - start)
        assert calls == expected_calls, model


@pytest.mark.parametrize("model", ["OptionalPlain", "OptionalFilled"])
def test_optional_input_may_be_left_out(server, url, model):
    a = np.array([[1.0], [2.0]], dtype=np.float32)
    with ModelClient(url, model) as client:
        with_b = client.infer_batch(a=a, b=np.array([[5.0], [6.0]], dtype=np.float32))
        without_b = client.infer_batch(a=a)
    assert with_b["sum"].tolist() == [[6.0], [8.0]]
    assert with_b["had_b"].all()
    if model == "OptionalFilled":  # @fill_optionals gave the default b=10 to each sample
        assert without_b["sum"].tolist() == [[11.0], [12.0]]
    else:
        assert without_b["sum"].tolist() == [[1.0], [2.0]]
        assert not without_b["had_b"].any()


def test_request_parameters_and_forwarded_headers_reach_the_callable(server, url):
    headers = {"x-fwd-tenant": "acme", "x-other": "not forwarded"}
    with ModelClient(url, "Parameters") as client:
        result = client.infer_batch(np.zeros((1, 1), dtype=np.float32), parameters={"mode": "fast", "n": 3},
                                    headers=headers)
    seen = json.loads(result["OUTPUT_1"][0, 0])
    assert seen["mode"] == "fast"
    assert seen["n"] == 3
    assert seen["x-fwd-tenant"] == "acme"
    assert "x-other" not in seen
