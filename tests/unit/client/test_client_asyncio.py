"""AsyncioModelClient and the access token without a server: what is decided before sending."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from pytriton.access_token import auth_headers
from pytriton.client import (
    AsyncioModelClient,
    ClientModelConfig,
    PyTritonClientClosedError,
    PyTritonClientInvalidUrlError,
    PyTritonClientModelDoesntSupportBatchingError,
    PyTritonClientTimeoutError,
    PyTritonClientValueError,
    TensorSpec,
)
from pytriton.client._args import with_auth
from pytriton.client.url import parse_url
from pytriton.client.waits_aio import wait_until_ready_async

I32 = np.dtype(np.int32)
PLAIN = ClientModelConfig(
    "Plain", 0, (TensorSpec("A", (-1,), I32, "INT32"),), (TensorSpec("OUT", (-1,), I32, "INT32"),)
)


def offline(config=PLAIN, url="localhost:1", **kwargs):
    return AsyncioModelClient(url, config.model_name, model_config=config, ensure_model_is_ready=False, **kwargs)


def test_construction_outside_a_loop_touches_nothing():
    AsyncioModelClient("grpc://localhost:1", "M")
    AsyncioModelClient("localhost:1", "M")


def test_same_argument_checks_as_the_sync_client():
    with pytest.raises(PyTritonClientInvalidUrlError):
        AsyncioModelClient("https://localhost", "M")
    with pytest.raises(PyTritonClientValueError, match="inference_timeout_s"):
        AsyncioModelClient("localhost", "M", inference_timeout_s=0)


def test_given_config_and_refusals_before_sending():
    async def run():
        async with offline() as client:
            assert await client.model_config is PLAIN
            with pytest.raises(PyTritonClientModelDoesntSupportBatchingError):
                await client.infer_batch(np.zeros(1, np.int32))
            with pytest.raises(PyTritonClientValueError, match="not both"):
                await client.infer_sample(np.zeros(1, np.int32), A=np.zeros(1, np.int32))
        with pytest.raises(PyTritonClientClosedError):
            await client.infer_sample(np.zeros(1, np.int32))
        with pytest.raises(PyTritonClientClosedError):
            await client.model_config

    asyncio.run(run())


class ScriptedAsyncCore:
    """Answers readiness from a script, awaiting like a real core."""

    def __init__(self, server_answers):
        self.url = parse_url("localhost:1")
        self.server_answers = iter(server_answers)

    async def is_server_ready(self, timeout_s=None):
        await asyncio.sleep(0)
        return next(self.server_answers)

    async def is_model_ready(self, model_name, model_version="", timeout_s=None):
        return True

    async def model_presence(self, model_name, timeout_s=None):
        return False  # not a stopping server: it has no stopping model


def test_async_readiness_shares_the_blocking_wait_logic():
    asyncio.run(wait_until_ready_async(ScriptedAsyncCore([False, True]), "M", "", 5.0))
    with pytest.raises(PyTritonClientTimeoutError, match="last seen: the server is not ready"):
        asyncio.run(wait_until_ready_async(ScriptedAsyncCore(iter(lambda: False, None)), "M", "", 0.3))


def test_token_header_per_protocol_and_merged_into_a_fresh_dict():
    assert auth_headers("http", "t") == {"triton-access-token": "t"}
    assert auth_headers("grpc", "t") == {"triton-grpc-protocol-triton-access-token": "t"}
    assert auth_headers("http", None) == {}
    user = {"x": "1"}
    merged = with_auth({"triton-access-token": "t"}, user)
    assert merged == {"x": "1", "triton-access-token": "t"} and merged is not user and user == {"x": "1"}
    assert with_auth({}, None) is None
