"""Callables that return torch tensors, served by the real tritonserver (pytriton/worker/responses.py, host_array).

One server serves four models: a `@batch` model returning a CPU tensor that requires grad (a bare
``np.asarray`` refuses those), a plain per-request model returning tensors, a streaming model
yielding tensors, and a `@batch` model on CUDA, bound only where torch sees a GPU.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from support import grpc_url, http_url, running_triton

from pytriton.client import DecoupledModelClient, ModelClient
from pytriton.decorators import batch
from pytriton.model_config import ModelConfig, Tensor

pytestmark = pytest.mark.functional

CUDA = torch.cuda.is_available()
WEIGHT = torch.full((1,), 3.0, requires_grad=True)


@batch
def scaled(x):
    return {"y": torch.tensor(x) * WEIGHT}  # carries autograd history


def per_request(requests):
    return [{"y": torch.tensor(request["x"]).double() + 1} for request in requests]  # float64 -> cast


def counting(requests):
    for step in range(3):
        yield [{"y": torch.tensor(request["x"]) + step} for request in requests]


@batch
def on_cuda(x):
    return {"y": torch.tensor(x).to("cuda") * 2}


@pytest.fixture(scope="module")
def triton():
    io = {
        "inputs": [Tensor(name="x", dtype=np.float32, shape=(-1,))],
        "outputs": [Tensor(name="y", dtype=np.float32, shape=(-1,))],
    }
    with running_triton() as server:
        server.bind("Scaled", scaled, **io, config=ModelConfig(max_batch_size=8))
        server.bind("PerRequest", per_request, **io, config=ModelConfig(max_batch_size=8))
        server.bind("Counting", counting, **io, config=ModelConfig(max_batch_size=8, decoupled=True))
        if CUDA:
            server.bind("OnCuda", on_cuda, **io, config=ModelConfig(max_batch_size=8))
        server.run()
        yield server


def test_batch_model_returning_a_tensor_that_requires_grad(triton):
    with ModelClient(http_url(triton._config), "Scaled") as client:
        result = client.infer_batch(x=np.array([[1.0, 2.0], [3.0, 4.0]], np.float32))
    assert result["y"].dtype == np.float32
    assert result["y"].tolist() == [[3.0, 6.0], [9.0, 12.0]]


def test_plain_callable_returning_tensors_of_another_dtype(triton):
    with ModelClient(http_url(triton._config), "PerRequest") as client:
        result = client.infer_sample(x=np.array([0.5, 1.5], np.float32))
    assert result["y"].dtype == np.float32 and result["y"].tolist() == [1.5, 2.5]


def test_streaming_callable_yielding_tensors(triton):
    with DecoupledModelClient(grpc_url(triton._config), "Counting") as client:
        steps = [step["y"].tolist() for step in client.infer_sample(x=np.array([1.0], np.float32))]
    assert steps == [[1.0], [2.0], [3.0]]


@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU (torch.cuda.is_available() is False)")
def test_batch_model_returning_a_cuda_tensor(triton):
    with ModelClient(http_url(triton._config), "OnCuda") as client:
        result = client.infer_batch(x=np.array([[1.0, 2.0]], np.float32))
    assert result["y"].tolist() == [[2.0, 4.0]]
