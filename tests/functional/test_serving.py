"""Inference through the real tritonserver: results, decorators, instances, bad input and faults.

One server with many models serves the whole module, so the suite pays one start-up.
"""

from __future__ import annotations

import concurrent.futures
import threading
import time

import numpy as np
import pytest
from support import grpc_url, http_url, server_config

from pytriton.client import ModelClient
from pytriton.client.exceptions import PyTritonClientInferenceServerError
from pytriton.decorators import batch, sample
from pytriton.model_config import DynamicBatcher, ModelConfig, Tensor
from pytriton.triton import Triton

pytestmark = pytest.mark.functional

GATHER = DynamicBatcher(max_queue_delay_microseconds=300_000)  # long enough to gather concurrent requests


class Recorder:
    """A callable per instance that records which instance served and what batch sizes it saw."""

    def __init__(self, index: int, calls: list) -> None:
        self.index = index
        self.calls = calls

    @batch
    def __call__(self, **inputs):
        self.calls.append(self.index)
        time.sleep(0.3)
        return {"OUTPUT_1": inputs["INPUT_1"] + self.index * 0}


@batch
def _double(INPUT_1):
    return {"OUTPUT_1": INPUT_1 * 2}


@batch
def _raise(**inputs):
    raise ValueError("the model refuses this batch")


@batch
def _float64(**inputs):
    return {"OUTPUT_1": inputs["INPUT_1"].astype(np.float64)}


@batch
def _bad_shape(**inputs):
    return {"OUTPUT_1": np.zeros((len(inputs["INPUT_1"]), 3), dtype=np.float32)}


def _per_request(requests):
    """Answers each request with its own input, except requests whose first value is negative."""
    responses = []
    for request in requests:
        data = request["INPUT_1"]
        responses.append({} if data.flat[0] < 0 else {"OUTPUT_1": data})
    return responses


@batch
def _unnamed(INPUT_1):
    return {"output_1": INPUT_1}  # declared without a name: OUTPUT_1, matched by position


@batch
def _misnamed(INPUT_1):
    return {"Output": INPUT_1}  # declared: "output", a name the user wrote


@sample
def _sample(INPUT_1):
    return {"OUTPUT_1": INPUT_1[::-1].copy()}


def _parameters(requests):
    return [{"OUTPUT_1": np.array([[len(r.parameters)]], dtype=np.int32), "OUTPUT_2": np.array(
        [[str(r.parameters.get("mode", "")).encode()]], dtype=object)} for r in requests]


@batch
def _in_place(INPUT_1):
    INPUT_1 *= 2  # the whole-batch path hands large inputs over writeable, as @batch's copy was
    return {"OUTPUT_1": INPUT_1}


KEPT: list = []


@batch
def _keeps(INPUT_1):
    KEPT.append(INPUT_1)  # kept past the answer: later batches must not write into it
    return {"OUTPUT_1": INPUT_1 + 1}


@pytest.fixture(scope="module")
def server():
    config = server_config()
    triton = Triton(config=config)
    f32 = {"inputs": [Tensor(dtype=np.float32, shape=(-1,))], "outputs": [Tensor(dtype=np.float32, shape=(-1,))]}
    triton.bind("Identity", lambda requests: requests, config=ModelConfig(max_batch_size=8), **f32)
    triton.bind("Double", _double, config=ModelConfig(max_batch_size=16), **f32)
    triton.bind("InPlace", _in_place, config=ModelConfig(max_batch_size=16), **f32)
    triton.bind("Keeps", _keeps, config=ModelConfig(max_batch_size=16), **f32)
    triton.bind(
        "Batch2", batch(lambda **inputs: [inputs["INPUT_1"]]), inputs=[Tensor(dtype=np.int32, shape=(1,))],
        outputs=[Tensor(dtype=np.int32, shape=(1,))], config=ModelConfig(max_batch_size=2),
    )
    triton.bind("Raises", _raise, config=ModelConfig(max_batch_size=8, batcher=GATHER), **f32)
    triton.bind("Strict", _float64, strict=True, **f32)
    triton.bind("Cast", _float64, strict=False, **f32)
    triton.bind("StrictShape", _bad_shape, strict=True, inputs=f32["inputs"],
                outputs=[Tensor(dtype=np.float32, shape=(2,))])
    triton.bind("PerRequest", _per_request, config=ModelConfig(max_batch_size=8, batcher=GATHER), **f32)
    named = {"inputs": f32["inputs"], "outputs": [Tensor(name="output", dtype=np.float32, shape=(-1,))]}
    triton.bind("Misnamed", _misnamed, **named)
    triton.bind("MisnamedStrict", _misnamed, strict=True, **named)
    triton.bind("Unnamed", _unnamed, **f32)
    triton.bind("Sample", _sample, config=ModelConfig(batching=False), **f32)
    bytes_io = {"inputs": [Tensor(dtype=object, shape=(-1,)), Tensor(name="s", dtype=np.bytes_, shape=(1,))],
                    "outputs": [Tensor(dtype=object, shape=(-1,)), Tensor(name="s", dtype=np.bytes_, shape=(1,))]}
    triton.bind("Bytes", batch(lambda **inputs: {"OUTPUT_1": inputs["INPUT_1"], "s": inputs["s"]}), **bytes_io)
    triton.bind("Params", _parameters, inputs=f32["inputs"],
                outputs=[Tensor(dtype=np.int32, shape=(1,)), Tensor(dtype=object, shape=(1,))])
    calls: list = []
    triton.bind("Multi", [Recorder(0, calls), Recorder(1, calls)], config=ModelConfig(max_batch_size=1), **f32)
    triton.run()
    try:
        yield triton, config, calls
    finally:
        triton.stop()


@pytest.fixture(params=["http", "grpc"])
def url(request, server):
    _, config, _ = server
    return http_url(config) if request.param == "http" else grpc_url(config)


def test_identity_lambda_returns_each_request_its_own_data(url):
    data = np.arange(12, dtype=np.float32).reshape(3, 4)
    with ModelClient(url, "Identity") as client:
        result = client.infer_batch(data)
    np.testing.assert_array_equal(result["OUTPUT_1"], data)


def test_batch_decorator_doubles_large_tensors_through_shared_memory(url):
    data = np.random.default_rng(0).random((2, 256 * 1024), dtype=np.float32)  # 2 MiB: over the inline limit
    with ModelClient(url, "Double") as client:
        result = client.infer_batch(data)
    np.testing.assert_array_equal(result["OUTPUT_1"], data * 2)


def test_batch_function_may_change_its_large_inputs_in_place(url):
    data = np.random.default_rng(1).random((2, 256 * 1024), dtype=np.float32)  # in the arena: no copy
    with ModelClient(url, "InPlace") as client:
        for _ in range(3):  # the same arena again: each batch starts from what its requester sent
            np.testing.assert_array_equal(client.infer_batch(data)["OUTPUT_1"], data * 2)


def test_large_inputs_a_batch_function_keeps_are_never_overwritten_by_later_batches(url):
    KEPT.clear()
    sent = [np.full((2, 256 * 1024), value, dtype=np.float32) for value in (1.0, 2.0, 3.0)]
    with ModelClient(url, "Keeps") as client:
        for data in sent:
            np.testing.assert_array_equal(client.infer_batch(data)["OUTPUT_1"], data + 1)
    assert len(KEPT) == 3
    for kept, data in zip(KEPT, sent):
        np.testing.assert_array_equal(kept, data)  # each still holds its own batch
    KEPT.clear()


def test_batch_larger_than_max_batch_size_gets_tritons_message(url):
    with ModelClient(url, "Batch2") as client:
        with pytest.raises(PyTritonClientInferenceServerError, match="batch-size must be <= 2 for 'Batch2'"):
            client.infer_batch(np.zeros((4, 1), dtype=np.int32))
        np.testing.assert_array_equal(client.infer_batch(np.ones((2, 1), dtype=np.int32))["OUTPUT_1"], [[1], [1]])


def test_callable_exception_reaches_each_requester_without_traceback(server, url):
    _, config, _ = server
    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        def call(value):
            with ModelClient(url, "Raises") as client:
                with pytest.raises(PyTritonClientInferenceServerError) as info:
                    client.infer_batch(np.full((1, 2), value, dtype=np.float32))
                return str(info.value)

        messages = list(pool.map(call, [1.0, 2.0, 3.0]))
    for message in messages:
        assert "Model 'Raises' failed: ValueError: the model refuses this batch" in message
        assert "Traceback" not in message and "File " not in message
    with ModelClient(url, "Identity") as client:  # the server keeps serving
        np.testing.assert_array_equal(client.infer_sample(np.ones(2, np.float32))["OUTPUT_1"], np.ones(2))


def test_one_bad_response_fails_only_its_own_request(url):
    good = np.full((1, 3), 7.0, dtype=np.float32)
    bad = np.full((1, 3), -1.0, dtype=np.float32)
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        def call(data):
            with ModelClient(url, "PerRequest") as client:
                try:
                    return client.infer_batch(data)["OUTPUT_1"]
                except PyTritonClientInferenceServerError as exc:
                    return str(exc)

        good_future, bad_future = pool.submit(call, good), pool.submit(call, bad)
        good_result, bad_result = good_future.result(), bad_future.result()
    np.testing.assert_array_equal(good_result, good)
    assert "Model 'PerRequest': the response to request" in bad_result
    assert "is missing output(s) ['OUTPUT_1']" in bad_result
    assert "7" not in bad_result  # never another requester's data


@pytest.mark.parametrize("model", ["Misnamed", "MisnamedStrict"])
def test_a_misnamed_output_is_refused_naming_the_unknown_and_the_missing_name(url, model):
    """A name the user declared matches by name in both modes: a dict's key is never renamed to it."""
    with ModelClient(url, model) as client:
        with pytest.raises(PyTritonClientInferenceServerError) as info:
            client.infer_sample(np.ones(2, np.float32))
    message = str(info.value)
    assert f"Model '{model}': the response to request 0 is missing output(s) ['output']" in message
    assert "has output(s) ['Output'] that the model does not declare" in message
    assert "'Output' -> 'output'" in message  # the case-only slip is pointed out


def test_outputs_declared_without_names_take_any_names_by_position(url):
    """The user never chose OUTPUT_1: a dict of other names maps to the unnamed outputs in order."""
    with ModelClient(url, "Unnamed") as client:
        np.testing.assert_array_equal(client.infer_sample(np.array([1.0, 2.0], np.float32))["OUTPUT_1"], [1.0, 2.0])


def test_strict_refuses_wrong_dtype_naming_model_output_and_expectation(url):
    with ModelClient(url, "Strict") as client:
        with pytest.raises(PyTritonClientInferenceServerError) as info:
            client.infer_batch(np.ones((1, 2), np.float32))
    message = str(info.value)
    assert "Model 'Strict'" in message and "'OUTPUT_1'" in message
    assert "float64" in message and "expected float32" in message


def test_strict_refuses_wrong_shape(url):
    with ModelClient(url, "StrictShape") as client:
        with pytest.raises(PyTritonClientInferenceServerError, match=r"output 'OUTPUT_1'.*shape \(1, 3\).*expected"):
            client.infer_batch(np.ones((1, 2), np.float32))


def test_non_strict_converts_output_dtype(url):
    with ModelClient(url, "Cast") as client:
        result = client.infer_batch(np.full((2, 2), 1.5, np.float32))
    assert result["OUTPUT_1"].dtype == np.float32
    np.testing.assert_array_equal(result["OUTPUT_1"], np.full((2, 2), 1.5))


def test_sample_decorator_on_non_batching_model(url):
    with ModelClient(url, "Sample") as client:
        result = client.infer_sample(np.array([1, 2, 3], dtype=np.float32))
    np.testing.assert_array_equal(result["OUTPUT_1"], [3, 2, 1])


def test_bytes_and_object_round_trip_with_trailing_zero_bytes(url):
    values = np.array([[b"\xff\x00", b"", b"abc\x00\x00"]], dtype=object)
    with ModelClient(url, "Bytes") as client:
        result = client.infer_batch(values, np.array([[b"text"]], dtype=np.bytes_))
    assert result["OUTPUT_1"].tolist() == values.tolist()
    assert result["s"].tolist() == [[b"text"]]


def test_request_parameters_reach_the_callable(url):
    with ModelClient(url, "Params") as client:
        result = client.infer_batch(np.ones((1, 1), np.float32), parameters={"mode": "fast", "n": 3})
    assert result["OUTPUT_1"].tolist() == [[2]]
    assert result["OUTPUT_2"].tolist() == [[b"fast"]]


@pytest.mark.parametrize(
    "inputs, expected",
    [
        ({"INPUT_1": np.ones((1, 2), np.int64)}, "INT64"),  # wrong dtype
        ({"INPUT_1": np.ones((1, 2, 2), np.float32)}, "shape"),  # wrong shape
        ({"INPUT_1": np.ones((1, 2), np.float32), "EXTRA": np.ones((1, 2), np.float32)}, "EXTRA"),  # unknown input
    ],
)
def test_bad_inputs_get_clear_errors_and_the_server_keeps_serving(server, inputs, expected):
    import tritonclient.http as httpclient

    _, config, _ = server
    client = httpclient.InferenceServerClient(f"127.0.0.1:{config.http_port}")
    try:
        infer_inputs = []
        for name, array in inputs.items():
            tensor = httpclient.InferInput(name, array.shape, "FP32" if array.dtype == np.float32 else "INT64")
            tensor.set_data_from_numpy(array)
            infer_inputs.append(tensor)
        with pytest.raises(Exception, match=expected):
            client.infer("Identity", infer_inputs)
        with pytest.raises(Exception, match="expected 1 inputs but got 0|INPUT_1"):
            client.infer("Identity", [])  # missing input
    finally:
        client.close()
    with ModelClient(http_url(config), "Identity") as ok:
        np.testing.assert_array_equal(ok.infer_sample(np.ones(2, np.float32))["OUTPUT_1"], np.ones(2))


def test_every_instance_of_a_list_of_callables_serves(server):
    _, config, calls = server
    calls.clear()
    barrier = threading.Barrier(4)

    def call(index):
        with ModelClient(http_url(config), "Multi") as client:
            barrier.wait()
            return client.infer_sample(np.full(2, index, np.float32))["OUTPUT_1"]

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        results = list(pool.map(call, range(4)))
    for index, result in enumerate(results):
        np.testing.assert_array_equal(result, np.full(2, index))
    assert sorted(set(calls)) == [0, 1], f"instances that served: {calls}"


def test_concurrent_mixed_requests_each_get_their_own_answer(server):
    """300 requests from 12 threads, both protocols, inline and shared-memory sizes, batched together."""
    _, config, _ = server
    rng = np.random.default_rng(1)
    payloads = [rng.random((int(rng.integers(1, 8)), int(rng.choice([4, 1000, 70_000]))), dtype=np.float32)
                for _ in range(300)]
    local = threading.local()
    created: list = []

    def call(index):
        if not hasattr(local, "clients"):
            local.clients = [ModelClient(http_url(config), "Double"), ModelClient(grpc_url(config), "Double")]
            created.extend(local.clients)
        return local.clients[index % 2].infer_batch(payloads[index])["OUTPUT_1"]

    try:
        with concurrent.futures.ThreadPoolExecutor(12) as pool:
            results = list(pool.map(call, range(len(payloads))))
    finally:
        for client in created:
            client.close()
    for data, result in zip(payloads, results):
        np.testing.assert_array_equal(result, data * 2)
