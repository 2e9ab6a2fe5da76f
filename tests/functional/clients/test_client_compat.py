"""Client calls of published PyTriton 0.7.0 that code may make, against the real server, HTTP and gRPC.

One server with the library's default security (its model repository needs the token) serves a
batching model with a dynamic batcher and the response cache (``Echo``), one without batching
(``Plain``), one decoupled (``Countdown``) and two kept for reloading (``Reloadable``,
``Override``), so that unloading them never disturbs the other tests.
"""

from __future__ import annotations

import asyncio
import json
import time

import numpy as np
import pytest
import tritonclient.grpc
import tritonclient.grpc.aio
import tritonclient.http
import tritonclient.http.aio
from support import free_ports, grpc_url, http_url, served_backend, server_config, wait_until

from pytriton.client import (
    AsyncioModelClient,
    DecoupledModelClient,
    FuturesModelClient,
    ModelClient,
    PyTritonClientInferenceServerError,
    PyTritonClientModelUnavailableError,
    PyTritonClientTimeoutError,
    PyTritonClientValueError,
)
from pytriton.client.model_config import ResponseCache
from pytriton.client.utils import ModelState, get_model_state
from pytriton.decorators import batch
from pytriton.model_config import DeviceKind, DynamicBatcher, ModelConfig, Tensor
from pytriton.triton import Triton

pytestmark = pytest.mark.functional

F32 = {
    "inputs": [Tensor(name="x", dtype=np.float32, shape=(-1,))],
    "outputs": [Tensor(name="y", dtype=np.float32, shape=(-1,))],
}
ECHO_BATCHER = DynamicBatcher(max_queue_delay_microseconds=100, preferred_batch_size=[2, 4])


def _countdown(requests):
    for left in (2, 1):
        yield [{"y": np.full((1, 1), left, np.float32)} for _ in requests]


@pytest.fixture(scope="module")
def server():
    config = server_config(response_cache_byte_size=1 << 20)
    triton = Triton(config=config)
    echo = batch(lambda x: {"y": x})
    triton.bind("Echo", echo, config=ModelConfig(max_batch_size=8, batcher=ECHO_BATCHER, response_cache=True), **F32)
    triton.bind("Plain", lambda requests: [{"y": r["x"]} for r in requests], config=ModelConfig(batching=False), **F32)
    triton.bind("Countdown", _countdown, config=ModelConfig(max_batch_size=4, decoupled=True), **F32)
    triton.bind("Reloadable", echo, config=ModelConfig(max_batch_size=8), **F32)
    triton.bind("Override", echo, config=ModelConfig(max_batch_size=8), **F32)
    triton.run()
    try:
        yield config, triton.get_access_token()
    finally:
        triton.stop()


@pytest.fixture(params=["http", "grpc"])
def protocol(request):
    return request.param


@pytest.fixture
def url(server, protocol):
    config, _ = server
    return http_url(config) if protocol == "http" else grpc_url(config)


@pytest.fixture
def token(server):
    return server[1]


def _state(url: str, token: str, model: str) -> ModelState:
    client = ModelClient(url, model).create_client_from_url(url, network_timeout_s=5)
    try:
        return get_model_state(client, model, access_token=token)
    finally:
        client.close()


def test_model_config_has_the_published_attributes(url):
    with ModelClient(url, "Echo", init_timeout_s=30) as client:
        config = client.model_config
    assert (config.model_name, config.max_batch_size, config.batching, config.decoupled) == ("Echo", 8, True, False)
    assert isinstance(config.batcher, DynamicBatcher)
    assert config.batcher.max_queue_delay_microseconds == 100
    assert config.batcher.preferred_batch_size == (2, 4)
    assert (config.batcher.preserve_ordering, config.batcher.priority_levels) == (False, 0)
    assert config.response_cache == ResponseCache(enable=True)
    # one callable: one Triton instance
    assert config.instance_group == {DeviceKind.KIND_CPU: 1}
    assert config.backend == served_backend()
    assert [(spec.name, spec.shape, spec.dtype, spec.optional) for spec in config.inputs] == [
        ("x", (-1,), np.float32, False)
    ]

    with ModelClient(url, "Plain", init_timeout_s=30) as client:
        plain = client.model_config
    assert (plain.batching, plain.max_batch_size, plain.batcher, plain.response_cache) == (False, 0, None, None)


def test_is_batching_supported_is_a_property_as_published(url, protocol):
    with ModelClient(url, "Echo", init_timeout_s=30) as echo, ModelClient(url, "Plain", init_timeout_s=30) as plain:
        assert echo.is_batching_supported is True
        assert plain.is_batching_supported is False
    if protocol == "grpc":
        with DecoupledModelClient(url, "Countdown", init_timeout_s=30) as streaming:
            assert streaming.is_batching_supported is True


def test_wait_for_server_returns_on_a_ready_server_and_times_out_without_one(url, protocol):
    with ModelClient(url, "Echo") as client:
        started = time.monotonic()
        client.wait_for_server(10)
        assert time.monotonic() - started < 5
    nobody = f"{protocol}://127.0.0.1:{free_ports(1)[0]}"
    with ModelClient(nobody, "Echo") as client:
        started = time.monotonic()
        with pytest.raises(PyTritonClientTimeoutError, match="was not ready within 1 s"):
            client.wait_for_server(timeout_s=1)
        assert 0.9 < time.monotonic() - started < 3


def test_load_and_unload_are_refused_without_the_access_token(url, token):
    with ModelClient(url, "Reloadable", init_timeout_s=30) as client:
        with pytest.raises(PyTritonClientInferenceServerError, match="access token"):
            client.unload_model()
        with pytest.raises(PyTritonClientInferenceServerError, match="access token"):
            client.load_model()
        assert client.infer_sample(x=np.ones(2, np.float32))["y"].tolist() == [1.0, 1.0]
    assert _state(url, token, "Reloadable") is ModelState.READY


def test_unload_then_load_with_the_access_token(url, token):
    with ModelClient(url, "Reloadable", init_timeout_s=30, access_token=token) as client:
        assert client.infer_sample(x=np.ones(2, np.float32))["y"].tolist() == [1.0, 1.0]
        client.unload_model()
        started = time.monotonic()
        with pytest.raises(PyTritonClientModelUnavailableError, match="Reloadable"):
            client.infer_sample(x=np.ones(2, np.float32))
        assert time.monotonic() - started < 5  # refused at once, not after init_timeout_s
        assert wait_until(lambda: _state(url, token, "Reloadable") is ModelState.UNAVAILABLE, timeout_s=10)
        # It stays unloaded (the server's supervisor does not take the ended stub for a crash).
        time.sleep(1.5)
        assert _state(url, token, "Reloadable") is ModelState.UNAVAILABLE

        client.load_model()
        assert _state(url, token, "Reloadable") is ModelState.READY
        assert client.infer_sample(x=np.full(3, 2.0, np.float32))["y"].tolist() == [2.0, 2.0, 2.0]


def test_load_model_with_a_config_replaces_the_configuration_the_client_read(server, url, token, protocol):
    config, _ = server
    delay = {"http": 250, "grpc": 350}[protocol]
    raw = tritonclient.http.InferenceServerClient(f"127.0.0.1:{config.http_port}")
    try:
        declared = raw.get_model_config("Override")
    finally:
        raw.close()
    declared["dynamic_batching"]["max_queue_delay_microseconds"] = delay
    # The published type is JSON text; a mapping is encoded by the client.
    override = json.dumps(declared) if protocol == "http" else declared

    with ModelClient(url, "Override", init_timeout_s=30, access_token=token) as client:
        assert client.model_config.batcher.max_queue_delay_microseconds != delay
        client.load_model(config=override)
        assert client.model_config.batcher.max_queue_delay_microseconds == delay
        assert client.infer_batch(x=np.ones((2, 1), np.float32))["y"].shape == (2, 1)


def test_load_model_of_a_bad_config_raises_the_servers_error(url, token):
    with ModelClient(url, "Override", init_timeout_s=30, access_token=token) as client:
        with pytest.raises(PyTritonClientValueError, match="files needs config"):
            client.load_model(files={"file:1/model.py": b""})
        with pytest.raises(PyTritonClientInferenceServerError, match="Error occurred while loading the model"):
            client.load_model(config="{not json")
        assert client.infer_batch(x=np.ones((1, 1), np.float32))["y"].shape == (1, 1)


def test_from_existing_client_shares_the_configuration_but_not_the_connection(url, token):
    first = ModelClient(url, "Reloadable", init_timeout_s=30, inference_timeout_s=9, access_token=token)
    config = first.model_config
    second = ModelClient.from_existing_client(first)
    first.close()
    with second:
        assert second.model_config is config  # taken over, not fetched again
        assert second.infer_sample(x=np.ones(2, np.float32))["y"].tolist() == [1.0, 1.0]
        second.load_model()  # the access token came along: the restricted repository API answers

    async def asyncio_copy():
        async with AsyncioModelClient.from_existing_client(second) as copy:
            assert await copy.model_config is config
            return await copy.infer_sample(x=np.ones(2, np.float32))

    assert asyncio.run(asyncio_copy())["y"].tolist() == [1.0, 1.0]


def test_get_lib_and_create_client_from_url(url, protocol):
    sync_lib = {"http": tritonclient.http, "grpc": tritonclient.grpc}[protocol]
    aio_lib = {"http": tritonclient.http.aio, "grpc": tritonclient.grpc.aio}[protocol]
    with ModelClient(url, "Echo") as client:
        assert client.get_lib() is sync_lib
        made = client.create_client_from_url(url, network_timeout_s=5)
        try:
            assert isinstance(made, sync_lib.InferenceServerClient)
            assert made.is_model_ready("Echo")
        finally:
            made.close()

    async def through_aio():
        async with AsyncioModelClient(url, "Echo") as client:
            assert client.get_lib() is aio_lib
            made = client.create_client_from_url(url)
            try:
                assert isinstance(made, aio_lib.InferenceServerClient)
                return await made.is_model_ready("Echo")
            finally:
                await made.close()

    assert asyncio.run(through_aio()) is True


def test_futures_wait_for_model_returns_a_future(url, protocol):
    with FuturesModelClient(url, "Echo") as client:
        future = client.wait_for_model(10)
        assert future.result(timeout=15) is None
        assert client.infer_sample(x=np.ones(2, np.float32)).result()["y"].tolist() == [1.0, 1.0]
    with FuturesModelClient(url, "Missing") as client:
        started = time.monotonic()
        with pytest.raises(PyTritonClientTimeoutError, match="'Missing'"):
            client.wait_for_model(timeout_s=1).result(timeout=10)
        assert time.monotonic() - started < 3
    # Waiting needs no configuration, so it works for a decoupled model too (no mismatch error).
    with FuturesModelClient(url, "Countdown") as client:
        assert client.wait_for_model(10).result(timeout=15) is None


def test_the_asyncio_client_waits_loads_and_unloads_like_the_blocking_one(url, token, protocol):
    async def main():
        async with AsyncioModelClient(url, "Reloadable", init_timeout_s=30, access_token=token) as client:
            await client.wait_for_server(10)
            assert await client.is_batching_supported is True
            assert (await client.infer_sample(x=np.ones(2, np.float32)))["y"].tolist() == [1.0, 1.0]
            await client.unload_model()
            unloaded = await asyncio.to_thread(
                wait_until, lambda: _state(url, token, "Reloadable") is ModelState.UNAVAILABLE, 10)
            await client.load_model()
            loaded = _state(url, token, "Reloadable")
            answer = (await client.infer_sample(x=np.full(3, 2.0, np.float32)))["y"].tolist()
        async with AsyncioModelClient(url, "Reloadable") as refused:  # no access token
            with pytest.raises(PyTritonClientInferenceServerError, match="access token"):
                await refused.unload_model()
        return unloaded, loaded, answer

    unloaded, loaded, answer = asyncio.run(main())
    assert unloaded and loaded is ModelState.READY and answer == [2.0, 2.0, 2.0]
