"""Decorator code written the way the published PyTriton 0.7.0 documents it, through the real tritonserver.

Such code must run unchanged. Each test serves one published form: `@batch` above
`@group_by_values` (rows of a batch grouped by value, merged back in row order), `@first_value`
on a callable that takes the list of requests, ``triton_context.model_configs[infer_func]``, and a
user's own `wrapt` decorator built on `get_model_config(wrapped, instance)` and
`convert_output(outputs, wrapped, instance)`.
"""

from __future__ import annotations

import concurrent.futures
import threading

import numpy as np
import pytest
import wrapt
from support import http_url, server_config

from pytriton.client import ModelClient
from pytriton.decorators import (
    ConstantPadder,
    batch,
    convert_output,
    fill_optionals,
    first_value,
    get_model_config,
    get_triton_context,
    group_by_values,
    triton_context,
)
from pytriton.model_config import DynamicBatcher, ModelConfig, Tensor
from pytriton.triton import Triton

pytestmark = pytest.mark.functional

# Triton dispatches the moment the batch is full; the long delay only waits for the partner request.
WAIT_FOR_FULL = DynamicBatcher(max_queue_delay_microseconds=5_000_000)
F32_X = [Tensor(name="x", dtype=np.float32, shape=(-1,))]
F32_Y = [Tensor(name="y", dtype=np.float32, shape=(-1,))]

calls: dict = {}
lock = threading.Lock()


def record(model: str, value) -> None:
    with lock:
        calls.setdefault(model, []).append(value)


@batch
@group_by_values("p")
def gbv_fn(x, p):
    record("Gbv", (p[:, 0].tolist(), x[:, 0].tolist()))
    return {"y": x * p}


@fill_optionals(temperature=np.array([2.0], dtype=np.float32))
@batch
@group_by_values("temperature", pad_fn=ConstantPadder(0))
@first_value("temperature")
def temperature_fn(tokens, temperature):
    record("Temperature", float(temperature))
    width = int(temperature)  # each temperature answers with its own number of columns
    return {"scores": np.tile(np.arange(1, width + 1, dtype=np.float32), (len(tokens), 1)) * tokens[:, :1]}


@first_value("t")
def fv_fn(requests):
    return [{"y": r["x"] * r["t"]} for r in requests]


@triton_context
def ctx_fn(requests, **kwargs):
    model_config = kwargs["triton_context"].model_configs[ctx_fn]
    summary = [len(model_config.inputs), len(model_config.outputs), model_config.max_batch_size,
               float(model_config.batching), float(model_config.batcher.preferred_batch_size[0])]
    return [{"y": np.tile(np.array(summary, dtype=np.float32), (len(r["x"]), 1))} for r in requests]


class ContextModel:
    @batch
    @triton_context
    def __call__(self, x, triton_context):
        config = triton_context.model_configs[self]
        assert config is not None and triton_context.model_configs[self.__call__].model_name == "CtxMethod"
        return {"y": np.full_like(x, config.model_version)}


@wrapt.decorator
def outputs_as_list(wrapped, instance, args, kwargs):
    """A user's decorator: the callable returns a list in output order; the decorator names it."""
    config = get_model_config(wrapped, instance)
    context = get_triton_context(wrapped, instance)
    assert context.model_configs[wrapped] == config
    return [convert_output(result, wrapped, instance) for result in wrapped(*args, **kwargs)]


@outputs_as_list
def custom_fn(requests):
    return [[r["x"] + 1, np.array([[b"ok"]] * len(r["x"]), dtype=object)] for r in requests]


@pytest.fixture(scope="module")
def server():
    config = server_config()
    triton = Triton(config=config)
    triton.bind(
        "Gbv", gbv_fn, inputs=[*F32_X, Tensor(name="p", dtype=np.float32, shape=(1,))], outputs=F32_Y,
        config=ModelConfig(max_batch_size=4, batcher=WAIT_FOR_FULL),
    )
    triton.bind(
        "Temperature", temperature_fn,
        inputs=[Tensor(name="tokens", dtype=np.float32, shape=(-1,)),
                Tensor(name="temperature", dtype=np.float32, shape=(1,), optional=True)],
        outputs=[Tensor(name="scores", dtype=np.float32, shape=(-1,))],
        config=ModelConfig(max_batch_size=8),
    )
    triton.bind("Fv", fv_fn, inputs=[*F32_X, Tensor(name="t", dtype=np.float32, shape=(1,))], outputs=F32_Y,
                config=ModelConfig(max_batch_size=8))
    triton.bind("Ctx", ctx_fn, inputs=F32_X, outputs=F32_Y,
                config=ModelConfig(max_batch_size=6, batcher=DynamicBatcher(preferred_batch_size=[3])))
    triton.bind("CtxMethod", ContextModel(), inputs=F32_X, outputs=F32_Y, model_version=4)
    triton.bind("Custom", custom_fn, inputs=F32_X,
                outputs=[Tensor(name="y", dtype=np.int32, shape=(-1,)), Tensor(name="ok", dtype=object, shape=(1,))])
    triton.run()
    try:
        yield http_url(config)
    finally:
        triton.stop()


def test_batch_above_group_by_values_calls_once_per_value_and_keeps_row_order(server):
    f32 = np.float32
    requests = [
        {"x": np.array([[1.0], [2.0], [3.0]], f32), "p": np.array([[10.0], [20.0], [10.0]], f32)},
        {"x": np.array([[4.0]], f32), "p": np.array([[20.0]], f32)},
    ]

    def one(inputs):
        with ModelClient(server, "Gbv") as client:
            return client.infer_batch(**inputs)["y"].tolist()

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        results = list(pool.map(one, requests))

    assert results == [[[10.0], [40.0], [30.0]], [[80.0]]]
    # Triton's one batch of 4 rows became one call per value of p, each with that value's rows
    # (which request Triton put first in the batch varies).
    assert sorted((p, sorted(x)) for p, x in calls["Gbv"]) == [([10.0, 10.0], [1.0, 3.0]), ([20.0, 20.0], [2.0, 4.0])]


def test_published_stack_with_padded_group_outputs(server):
    tokens = np.ones((3, 2), dtype=np.float32) * np.array([[1.0], [2.0], [3.0]], dtype=np.float32)
    temperature = np.array([[3.0], [1.0], [3.0]], dtype=np.float32)
    with ModelClient(server, "Temperature") as client:
        mixed = client.infer_batch(tokens=tokens, temperature=temperature)["scores"]
        default = client.infer_batch(tokens=tokens[:1])["scores"]

    # one call per temperature; the 1-column group's outputs padded with 0 to 3 columns
    assert mixed.tolist() == [[1.0, 2.0, 3.0], [2.0, 0.0, 0.0], [3.0, 6.0, 9.0]]
    assert default.tolist() == [[1.0, 2.0]]  # fill_optionals gave temperature 2.0
    assert sorted(calls["Temperature"]) == [1.0, 2.0, 3.0]


def test_first_value_on_a_callable_taking_the_requests(server):
    with ModelClient(server, "Fv") as client:
        result = client.infer_batch(x=np.ones((2, 1), np.float32), t=np.array([[3.0], [3.0]], np.float32))

    assert result["y"].tolist() == [[3.0], [3.0]]


def test_triton_context_model_configs_of_the_bound_callable(server):
    with ModelClient(server, "Ctx") as client:
        result = client.infer_batch(x=np.zeros((2, 1), np.float32))
    # inputs, outputs, max_batch_size, batching, preferred batch size
    assert result["y"].tolist() == [[1.0, 1.0, 6.0, 1.0, 3.0]] * 2

    with ModelClient(server, "CtxMethod") as client:
        assert client.infer_batch(x=np.zeros((1, 1), np.float32))["y"].tolist() == [[4.0]]


def test_user_decorator_with_get_model_config_and_convert_output(server):
    with ModelClient(server, "Custom") as client:
        result = client.infer_batch(x=np.array([[1.5, 2.0]], np.float32))

    assert result["y"].dtype == np.int32 and result["y"].tolist() == [[2, 3]]  # cast to the declared dtype
    assert result["ok"].tolist() == [[b"ok"]]
