"""The access token against a server that restricts its APIs, for every client and protocol.

One server restricts model-config and inference over both protocols to requests carrying
``triton-access-token: secret`` (gRPC: ``triton-grpc-protocol-triton-access-token``). Health
stays open, so a client without the token reaches the model and is refused on the restricted call.
"""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from support import grpc_url, http_url, server_config

from pytriton.client import (
    AsyncioModelClient,
    FuturesModelClient,
    ModelClient,
    PyTritonClientInferenceServerError,
    PyTritonClientValueError,
)
from pytriton.decorators import batch
from pytriton.model_config import ModelConfig, Tensor
from pytriton.triton import Triton

pytestmark = pytest.mark.functional

TOKEN = "secret"
RESTRICTION = [f"model-config,inference:triton-access-token={TOKEN}"]
DATA = np.arange(6, dtype=np.float32).reshape(2, 3)


@pytest.fixture(scope="module")
def server():
    config = server_config(http_restricted_api=RESTRICTION, grpc_restricted_protocol=RESTRICTION)
    triton = Triton(config=config)
    triton.bind(
        "Echo",
        batch(lambda INPUT_1: {"OUTPUT_1": INPUT_1}),
        inputs=[Tensor(dtype=np.float32, shape=(-1,))],
        outputs=[Tensor(dtype=np.float32, shape=(-1,))],
        config=ModelConfig(max_batch_size=8),
    )
    triton.run()
    try:
        yield config
    finally:
        triton.stop()


@pytest.fixture(params=["http", "grpc"])
def url(request, server):
    return http_url(server) if request.param == "http" else grpc_url(server)


def _sync(url, **kwargs):
    with ModelClient(url, "Echo", init_timeout_s=10, **kwargs) as client:
        return client.infer_batch(DATA)


def _futures(url, **kwargs):
    with FuturesModelClient(url, "Echo", init_timeout_s=10, **kwargs) as client:
        return client.infer_batch(DATA).result(timeout=30)


def _asyncio(url, **kwargs):
    async def run():
        async with AsyncioModelClient(url, "Echo", init_timeout_s=10, **kwargs) as client:
            return await client.infer_batch(DATA)

    return asyncio.run(run())


CLIENTS = {"sync": _sync, "futures": _futures, "asyncio": _asyncio}


@pytest.mark.parametrize("flavour", sorted(CLIENTS))
def test_with_the_token_inference_succeeds(url, flavour):
    result = CLIENTS[flavour](url, access_token=TOKEN)
    np.testing.assert_array_equal(result["OUTPUT_1"], DATA)


@pytest.mark.parametrize("flavour", sorted(CLIENTS))
@pytest.mark.parametrize("token", [None, "wrong"])
def test_without_the_right_token_the_server_refuses_clearly(url, flavour, token):
    with pytest.raises(PyTritonClientInferenceServerError, match="restricted") as caught:
        CLIENTS[flavour](url, access_token=token)
    assert TOKEN not in str(caught.value)


def test_restricted_inference_alone_with_a_known_config_is_refused_then_allowed(url):
    """With the configuration given, only the inference call is made: the token alone decides."""
    with ModelClient(url, "Echo", init_timeout_s=10, access_token=TOKEN) as client:
        config = client.model_config
    with ModelClient(url, "Echo", model_config=config, ensure_model_is_ready=False) as client:
        with pytest.raises(PyTritonClientInferenceServerError, match="restricted"):
            client.infer_batch(DATA)
    with ModelClient(url, "Echo", model_config=config, ensure_model_is_ready=False, access_token=TOKEN) as client:
        np.testing.assert_array_equal(client.infer_batch(DATA)["OUTPUT_1"], DATA)


@pytest.mark.parametrize("token", ["", "a\nb", 42])
def test_a_token_that_cannot_be_a_header_is_refused(token):
    for client_class in (ModelClient, FuturesModelClient, AsyncioModelClient):
        with pytest.raises(PyTritonClientValueError, match="access_token"):
            client_class("localhost:1", "Echo", access_token=token)
