"""Each decorator of `pytriton.decorators` through the real tritonserver, on functions and methods.

The callables record what they received, so each test shows what the decorator did to the
requests Triton handed over. Models that must see several requests in one call have
``max_batch_size`` equal to the number of concurrent requests and a long queue delay: Triton
dispatches the moment the batch is full.
"""

from __future__ import annotations

import concurrent.futures
import threading

import numpy as np
import pytest
from support import http_url, server_config

from pytriton.client import ModelClient
from pytriton.client.exceptions import PyTritonClientInferenceServerError
from pytriton.decorators import (
    ConstantPadder,
    batch,
    convert_output,
    fill_optionals,
    first_value,
    get_model_config,
    group_by_keys,
    group_by_values,
    pad_batch,
    sample,
    triton_context,
)
from pytriton.model_config import DynamicBatcher, ModelConfig, Tensor
from pytriton.triton import Triton

pytestmark = pytest.mark.functional

WAIT_FOR_FULL = DynamicBatcher(max_queue_delay_microseconds=5_000_000)
# Triton never puts requests with different sets of inputs into one batch; a short delay keeps the
# second request from waiting long for a partner that cannot come.
SHORT_DELAY = DynamicBatcher(max_queue_delay_microseconds=100_000)
F32 = {"inputs": [Tensor(dtype=np.float32, shape=(-1,))], "outputs": [Tensor(dtype=np.float32, shape=(-1,))]}


class Model:
    """One object whose decorated methods serve several models; `seen` records per model."""

    def __init__(self) -> None:
        self.seen: dict = {}
        self.lock = threading.Lock()

    def record(self, model: str, value) -> None:
        with self.lock:
            self.seen.setdefault(model, []).append(value)

    @batch
    def batched(self, INPUT_1):
        self.record("Batch", INPUT_1.shape)
        return {"OUTPUT_1": INPUT_1 * 2}

    @sample
    def one_sample(self, INPUT_1):
        self.record("Sample", INPUT_1.shape)
        return [INPUT_1[::-1].copy()]

    @group_by_keys
    @batch
    def by_keys(self, **inputs):
        self.record("GroupByKeys", (tuple(sorted(inputs)), len(inputs["a"])))
        total = inputs["a"] + inputs["b"] if "b" in inputs else inputs["a"]
        return {"sum": total}

    @group_by_values("temperature", pad_fn=ConstantPadder(0))
    @batch
    @first_value("temperature")
    def by_values(self, tokens, temperature):
        self.record("GroupByValues", (float(temperature), tokens.shape))
        return {"score": tokens.sum(axis=1, keepdims=True).astype(np.float32) * temperature}

    @fill_optionals(b=np.array([100.0], dtype=np.float32))
    @batch
    def filled(self, a, b):
        self.record("FillOptionals", b[:, 0].tolist())
        return {"sum": a + b}

    @batch
    @pad_batch
    def padded(self, INPUT_1):
        self.record("PadBatch", INPUT_1.shape[0])
        return [INPUT_1 + 1]

    @batch
    @first_value("scale", "mode")
    def first(self, INPUT_1, scale, mode):
        self.record("FirstValue", (type(scale).__name__, np.ndim(scale), mode.tolist()))
        return {"OUTPUT_1": INPUT_1 * scale}

    @triton_context
    def with_context(self, requests, triton_context):
        self.record("Context", triton_context)
        text = f"{triton_context.model_name}:{triton_context.model_version}:{triton_context.config.max_batch_size}"
        return [{"OUTPUT_1": np.array([[text.encode()]] * len(r["INPUT_1"]), dtype=object)} for r in requests]


@batch
@triton_context
def _context_below_batch(INPUT_1, triton_context):
    names = ",".join(triton_context.output_names)
    return {"OUTPUT_1": np.array([[names.encode()]] * len(INPUT_1), dtype=object)}


def _helpers(requests):
    limit = get_model_config().max_batch_size
    return [convert_output([np.minimum(r["INPUT_1"], limit), [["ok"]] * len(r["INPUT_1"])]) for r in requests]


@first_value("INPUT_1")
@batch
def _wrong_order(INPUT_1):
    return {"OUTPUT_1": INPUT_1}


OPTIONAL_AB = {
    "inputs": [Tensor(name="a", dtype=np.float32, shape=(1,)),
               Tensor(name="b", dtype=np.float32, shape=(1,), optional=True)],
    "outputs": [Tensor(name="sum", dtype=np.float32, shape=(1,))],
}
TEXT_OUT = {"inputs": F32["inputs"], "outputs": [Tensor(dtype=object, shape=(1,))]}


@pytest.fixture(scope="module")
def server():
    config = server_config()
    model = Model()
    triton = Triton(config=config)
    triton.bind("Batch", model.batched, config=ModelConfig(max_batch_size=3, batcher=WAIT_FOR_FULL), **F32)
    triton.bind("Sample", model.one_sample, config=ModelConfig(batching=False), **F32)
    triton.bind("GroupByKeys", model.by_keys, config=ModelConfig(max_batch_size=2, batcher=SHORT_DELAY),
                **OPTIONAL_AB)
    triton.bind(
        "GroupByValues", model.by_values,
        inputs=[Tensor(name="tokens", dtype=np.int32, shape=(-1,)),
                Tensor(name="temperature", dtype=np.float32, shape=(1,))],
        outputs=[Tensor(name="score", dtype=np.float32, shape=(1,))],
        config=ModelConfig(max_batch_size=3, batcher=WAIT_FOR_FULL),
    )
    triton.bind("FillOptionals", model.filled, config=ModelConfig(max_batch_size=2, batcher=SHORT_DELAY),
                **OPTIONAL_AB)
    triton.bind("PadBatch", model.padded,
                config=ModelConfig(max_batch_size=8, batcher=DynamicBatcher(preferred_batch_size=[2, 4])), **F32)
    triton.bind(
        "FirstValue", model.first,
        inputs=[Tensor(dtype=np.float32, shape=(-1,)), Tensor(name="scale", dtype=np.float32, shape=(1,)),
                Tensor(name="mode", dtype=np.bytes_, shape=(1,))],
        outputs=[Tensor(dtype=np.float32, shape=(-1,))],
    )
    triton.bind("Context", model.with_context, config=ModelConfig(max_batch_size=7), model_version=3, **TEXT_OUT)
    triton.bind("ContextBelowBatch", _context_below_batch, **TEXT_OUT)
    triton.bind("Helpers", _helpers, config=ModelConfig(max_batch_size=5), inputs=F32["inputs"],
                outputs=[Tensor(dtype=np.int32, shape=(-1,)), Tensor(dtype=object, shape=(1,))])
    triton.bind("WrongOrder", _wrong_order, **F32)
    triton.run()
    try:
        yield http_url(config), model.seen
    finally:
        triton.stop()


def concurrently(url: str, model: str, requests: list) -> list:
    """Send each request (a dict of named inputs) from its own client at the same time."""

    def one(inputs):
        with ModelClient(url, model) as client:
            return client.infer_batch(**inputs)

    with concurrent.futures.ThreadPoolExecutor(len(requests)) as pool:
        return list(pool.map(one, requests))


def test_batch_concatenates_requests_and_splits_the_outputs_back(server):
    url, seen = server
    sizes = [1, 2]
    requests = [{"INPUT_1": np.full((n, 2), float(n), dtype=np.float32)} for n in sizes]
    results = concurrently(url, "Batch", requests)
    assert [r["OUTPUT_1"].tolist() for r in results] == [[[2.0, 2.0]], [[4.0, 4.0], [4.0, 4.0]]]
    assert seen["Batch"] == [(3, 2)]  # both requests in one call, as one array


def test_sample_calls_once_per_request_without_the_request_list(server):
    url, seen = server
    with ModelClient(url, "Sample") as client:
        result = client.infer_sample(np.array([1.0, 2.0, 3.0], dtype=np.float32))
    assert result["OUTPUT_1"].tolist() == [3.0, 2.0, 1.0]
    assert seen["Sample"] == [(3,)]


def test_group_by_keys_serves_requests_with_and_without_an_optional_input(server):
    url, seen = server
    one = np.ones((1, 1), dtype=np.float32)
    results = concurrently(url, "GroupByKeys", [{"a": one}, {"a": one, "b": one * 5}])
    assert [r["sum"].tolist() for r in results] == [[[1.0]], [[6.0]]]
    # @batch was called once per set of input names (Triton itself never mixes the two sets).
    assert sorted(seen["GroupByKeys"]) == [(("a",), 1), (("a", "b"), 1)]


def test_group_by_values_calls_once_per_value(server):
    url, seen = server
    # Same token shape: Triton batches only requests whose (non-ragged) input shapes agree.
    requests = [
        {"tokens": np.array([[1, 2]], dtype=np.int32), "temperature": np.array([[1.0]], dtype=np.float32)},
        {"tokens": np.array([[3, 4]], dtype=np.int32), "temperature": np.array([[2.0]], dtype=np.float32)},
        {"tokens": np.array([[5, 0]], dtype=np.int32), "temperature": np.array([[1.0]], dtype=np.float32)},
    ]
    results = concurrently(url, "GroupByValues", requests)
    assert [r["score"].tolist() for r in results] == [[[3.0]], [[14.0]], [[5.0]]]
    # Triton's one batch of three became one call per temperature.
    assert sorted(seen["GroupByValues"]) == [(1.0, (2, 2)), (2.0, (1, 2))]


def test_fill_optionals_gives_missing_inputs_their_default(server):
    url, seen = server
    one = np.ones((1, 1), dtype=np.float32)
    results = concurrently(url, "FillOptionals", [{"a": one}, {"a": one, "b": one * 5}])
    assert [r["sum"].tolist() for r in results] == [[[101.0]], [[6.0]]]
    assert sorted(seen["FillOptionals"]) == [[5.0], [100.0]]  # the callable always received b


def test_pad_batch_pads_to_a_preferred_size_and_trims_the_outputs(server):
    url, seen = server
    with ModelClient(url, "PadBatch") as client:
        for n in (1, 3, 5):
            result = client.infer_batch(np.arange(n, dtype=np.float32).reshape(n, 1))
            assert result["OUTPUT_1"].tolist() == [[i + 1.0] for i in range(n)]
    assert seen["PadBatch"] == [2, 4, 8]  # preferred sizes 2 and 4, then max_batch_size 8


def test_first_value_passes_one_value_of_parameter_like_inputs(server):
    url, seen = server
    with ModelClient(url, "FirstValue") as client:
        result = client.infer_batch(
            np.ones((2, 2), dtype=np.float32),
            np.full((2, 1), 3.0, dtype=np.float32),
            np.array([[b"fast"], [b"fast"]], dtype=np.bytes_),
        )
        assert result["OUTPUT_1"].tolist() == [[3.0, 3.0], [3.0, 3.0]]
        with pytest.raises(PyTritonClientInferenceServerError, match="rows of input 'scale' differ"):
            client.infer_batch(np.ones((2, 1), dtype=np.float32), np.array([[1.0], [2.0]], dtype=np.float32),
                               np.array([[b"x"], [b"x"]], dtype=np.bytes_))
    scale_type, scale_ndim, mode = seen["FirstValue"][0]
    assert scale_type == "float32"
    assert scale_ndim == 0  # squeezed to a scalar
    assert mode == b"fast"


def test_triton_context_names_the_model_and_its_config(server):
    url, seen = server
    with ModelClient(url, "Context", "3") as client:
        result = client.infer_batch(np.zeros((2, 1), dtype=np.float32))
    assert result["OUTPUT_1"].tolist() == [[b"Context:3:7"], [b"Context:3:7"]]
    context = seen["Context"][0]
    assert context.input_names == ("INPUT_1",)
    assert context.config == ModelConfig(max_batch_size=7)
    with ModelClient(url, "ContextBelowBatch") as client:
        assert client.infer_batch(np.zeros((1, 1), dtype=np.float32))["OUTPUT_1"].tolist() == [[b"OUTPUT_1"]]


def test_get_model_config_and_convert_output_inside_the_callable(server):
    url, _ = server
    with ModelClient(url, "Helpers") as client:
        result = client.infer_batch(np.array([[1.0, 9.0]], dtype=np.float32))
    assert result["OUTPUT_1"].dtype == np.int32  # converted from float32 to the declared dtype
    assert result["OUTPUT_1"].tolist() == [[1, 5]]  # capped at max_batch_size=5
    assert result["OUTPUT_2"].tolist() == [[b"ok"]]


def test_a_decorator_in_the_wrong_place_fails_the_request_saying_where_to_move_it(server):
    url, _ = server
    with ModelClient(url, "WrongOrder") as client, pytest.raises(
        PyTritonClientInferenceServerError, match="Place @first_value below @batch"
    ):
        client.infer_batch(np.zeros((1, 1), dtype=np.float32))
