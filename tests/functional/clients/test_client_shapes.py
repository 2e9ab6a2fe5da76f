"""A fixed-size input of the wrong size is refused by the client, in words that fit the mistake.

The README's ``Scale`` model declares ``factor`` with shape ``(1,)``. Sent with two values,
Triton itself answers "unexpected shape ... NOTE: Setting a non-zero max_batch_size in the model
config requires a batch dimension to be prepended to each input shape", which sends the user
after a batch axis the client already added. The clients check the sizes against the model's
dims before sending, as they check dtypes, and name the input, the declared shape and the sent
one; nothing reaches the server, which keeps serving.
"""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from support import grpc_url, http_url, server_config

from pytriton.client import AsyncioModelClient, FuturesModelClient, ModelClient, PyTritonClientValueError
from pytriton.decorators import batch
from pytriton.model_config import ModelConfig, Tensor
from pytriton.triton import Triton

pytestmark = pytest.mark.functional

CALLS = []


@batch
def scale(values, factor):
    CALLS.append(len(values))
    return {"scaled": values * factor}


@pytest.fixture(scope="module")
def server():
    config = server_config()
    with Triton(config=config) as triton:
        triton.bind(
            model_name="Scale",
            infer_func=scale,
            inputs=[Tensor(name="values", dtype=np.float32, shape=(-1,)),
                    Tensor(name="factor", dtype=np.float32, shape=(1,))],
            outputs=[Tensor(name="scaled", dtype=np.float32, shape=(-1,))],
            config=ModelConfig(max_batch_size=8),
        )
        triton.run()
        yield config


VALUES = np.array([1.0, 2.0, 3.0], dtype=np.float32)
TWO_FACTORS = np.array([10.0, 20.0], dtype=np.float32)


def _sync(url, **inputs):
    with ModelClient(url, "Scale") as client:
        return client.infer_sample(**inputs)


def _futures(url, **inputs):
    with FuturesModelClient(url, "Scale") as client:
        return client.infer_sample(**inputs).result(timeout=30)


def _asyncio(url, **inputs):
    async def call():
        async with AsyncioModelClient(url, "Scale") as client:
            return await client.infer_sample(**inputs)

    return asyncio.run(call())


@pytest.mark.parametrize("flavour", [_sync, _futures, _asyncio], ids=["sync", "futures", "asyncio"])
@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_wrong_fixed_size_names_the_input_the_declared_and_the_sent_shape(server, protocol, flavour):
    url = http_url(server) if protocol == "http" else grpc_url(server)
    CALLS.clear()
    with pytest.raises(PyTritonClientValueError) as info:
        flavour(url, values=VALUES, factor=TWO_FACTORS)
    message = str(info.value)
    assert message == ("Model 'Scale': input 'factor' has shape (2,), but the model declares shape (1,) for one "
                       "sample (-1: any size)")
    assert "NOTE" not in message and "prepend" not in message
    # The server was never asked, and it still serves the right size.
    assert CALLS == []
    result = flavour(url, values=VALUES, factor=np.array([10.0], dtype=np.float32))
    assert result["scaled"].tolist() == [10.0, 20.0, 30.0]


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_batch_with_a_wrong_fixed_size_says_so_per_sample(server, protocol):
    url = http_url(server) if protocol == "http" else grpc_url(server)
    with ModelClient(url, "Scale") as client:
        with pytest.raises(PyTritonClientValueError) as info:
            client.infer_batch(values=np.ones((4, 3), np.float32), factor=np.ones((4, 2), np.float32))
        assert str(info.value) == ("Model 'Scale': input 'factor' has samples of shape (2,) (the batch of 4 first), "
                                   "but the model declares shape (1,) for one sample (-1: any size)")
        result = client.infer_batch(values=np.ones((4, 3), np.float32), factor=np.full((4, 1), 2, np.float32))
        assert result["scaled"].tolist() == [[2.0] * 3] * 4
