"""The published PyTriton 0.7.0 client surface, where it needs no server.

Clients here are given their model configuration and ``ensure_model_is_ready=False``, on port 1
of localhost, which nothing serves: a call that went to the network would fail, so every
assertion below also shows that no request was needed.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging

import numpy as np
import pytest
import tritonclient.grpc
import tritonclient.grpc.aio
import tritonclient.http
import tritonclient.http.aio
from support import HTTP_MODEL_CONFIG as HTTP_FULL

from pytriton.client import (
    AsyncioDecoupledModelClient,
    AsyncioModelClient,
    ClientModelConfig,
    DecoupledModelClient,
    FuturesModelClient,
    ModelClient,
    PyTritonClientClosedError,
    PyTritonClientInvalidUrlError,
    PyTritonClientValueError,
    TensorSpec,
    utils,
)
from pytriton.client import url as url_module
from pytriton.client._args import clone_kwargs, load_args
from pytriton.client.model_config import ResponseCache, parse_model_config
from pytriton.model_config import DeviceKind, DynamicBatcher, QueuePolicy, TimeoutAction

I32 = np.dtype(np.int32)
BATCHING = ClientModelConfig(
    "Batch2", 2, (TensorSpec("IN", (1,), I32, "INT32"),), (TensorSpec("OUT", (1,), I32, "INT32"),)
)
PLAIN = ClientModelConfig(
    "Plain", 0, (TensorSpec("IN", (-1,), I32, "INT32"),), (TensorSpec("OUT", (-1,), I32, "INT32"),)
)
STREAMING = ClientModelConfig("Tokens", 4, BATCHING.inputs, BATCHING.outputs, decoupled=True)


def offline(cls=ModelClient, config=BATCHING, url="localhost:1", **kwargs):
    return cls(url, config.model_name, model_config=config, ensure_model_is_ready=False, **kwargs)


# -- pytriton.client.utils.TritonUrl -------------------------------------------------------------


def test_utils_exports_the_clients_url_type_with_the_published_names():
    assert utils.TritonUrl is url_module.TritonUrl
    assert "TritonUrl" in utils.__all__
    parsed = utils.TritonUrl.from_url("localhost")
    assert (parsed.scheme, parsed.hostname, parsed.port) == ("http", "localhost", 8000)
    assert parsed.with_scheme == "http://localhost:8000"
    assert parsed.without_scheme == "localhost:8000"
    grpc = utils.TritonUrl.from_url("grpc://10.0.0.1:9001")
    assert (grpc.scheme, grpc.without_scheme, grpc.with_scheme) == ("grpc", "10.0.0.1:9001", "grpc://10.0.0.1:9001")
    assert utils.TritonUrl("http", "h", 1) == parsed.__class__("http", "h", 1)  # a plain dataclass of three fields


def test_triton_url_keeps_ipv6_hosts_usable_and_refuses_what_it_cannot_parse():
    parsed = utils.TritonUrl.from_url("grpc://[::1]:8001")
    assert parsed.hostname == "::1"
    assert parsed.without_scheme == "[::1]:8001"  # what tritonclient can connect to
    with pytest.raises(PyTritonClientInvalidUrlError, match="unsupported scheme 'ftp'"):
        utils.TritonUrl.from_url("ftp://localhost")
    with pytest.raises(PyTritonClientInvalidUrlError, match="expected a string"):
        utils.TritonUrl.from_url(8000)  # type: ignore[arg-type]


# -- the richer model configuration ---------------------------------------------------------------

# As tritonserver 2.51 answers over HTTP (every field, numbers) and gRPC (defaults left out, uint64 as strings).
GRPC_FULL = {
    "config": {
        "name": "Echo",
        "max_batch_size": 8,
        "input": [{"name": "x", "data_type": "TYPE_FP32", "dims": ["-1"]}],
        "output": [{"name": "y", "data_type": "TYPE_FP32", "dims": ["-1"]}],
        "instance_group": [{"name": "Echo_0", "count": 1}, {"name": "Echo_1", "kind": "KIND_MODEL"}],
        "dynamic_batching": {
            "preferred_batch_size": [2, 4],
            "max_queue_delay_microseconds": "100",
            "priority_levels": "2",
            "default_priority_level": "1",
            "default_queue_policy": {"max_queue_size": 5},
            "priority_queue_policy": {"2": {"timeout_action": "DELAY", "max_queue_size": 3}},
        },
        "response_cache": {},
        "model_transaction_policy": {"decoupled": True},
        "backend": "python",
    }
}


def test_http_config_has_the_published_attributes():
    config = parse_model_config(HTTP_FULL)
    assert (config.batching, config.max_batch_size, config.decoupled, config.backend) == (True, 8, False, "python")
    assert config.batcher == DynamicBatcher(
        max_queue_delay_microseconds=100,
        preferred_batch_size=[2, 4],
        priority_levels=2,
        default_priority_level=1,
        default_queue_policy=QueuePolicy(max_queue_size=5),
        priority_queue_policy={
            2: QueuePolicy(
                timeout_action=TimeoutAction.DELAY,
                default_timeout_microseconds=7,
                allow_timeout_override=True,
                max_queue_size=3,
            )
        },
    )
    assert config.response_cache == ResponseCache(enable=True)
    assert config.instance_group == {DeviceKind.KIND_CPU: 3}  # two CPU groups, counts added
    assert config.backend_parameters == {"pytriton.protocol": "2"}
    assert [(spec.name, spec.optional) for spec in config.inputs] == [("x", False), ("mask", True)]


def test_grpc_config_fills_the_fields_grpc_leaves_out():
    config = parse_model_config(GRPC_FULL)
    assert config.decoupled is True
    assert config.batcher.max_queue_delay_microseconds == 100
    assert config.batcher.default_queue_policy == QueuePolicy(timeout_action=TimeoutAction.REJECT, max_queue_size=5)
    assert config.batcher.priority_queue_policy[2].timeout_action is TimeoutAction.DELAY
    assert config.response_cache == ResponseCache(enable=False)  # a disabled cache is rendered as {}
    # KIND_AUTO is gRPC's default kind, left out; a kind pytriton does not declare keeps Triton's name.
    assert config.instance_group == {DeviceKind.KIND_AUTO: 1, "KIND_MODEL": None}
    assert config.backend_parameters == {}


def test_a_config_without_the_optional_sections_reads_as_published():
    config = parse_model_config({"name": "Bare", "input": [], "output": []})
    assert (config.batcher, config.response_cache, config.instance_group) == (None, None, {})
    assert (config.batching, config.backend_parameters, config.backend) == (False, {}, "")


def test_a_batcher_the_declarations_refuse_is_left_out_with_a_warning(caplog):
    raw = {"name": "Odd", "max_batch_size": 4, "dynamic_batching": {"priority_levels": 2, "default_priority_level": 9}}
    with caplog.at_level(logging.WARNING, logger="pytriton.client.model_config"):
        config = parse_model_config(raw)
    assert config.batcher is None and config.max_batch_size == 4
    assert "'Odd'" in caplog.text and "default_priority_level" in caplog.text


def test_configs_with_dict_fields_stay_hashable_and_comparable():
    first, second = parse_model_config(HTTP_FULL), parse_model_config(json.loads(json.dumps(HTTP_FULL)))
    assert first == second and hash(first) == hash(second)
    assert len({first, second, BATCHING}) == 2
    assert first != parse_model_config(dict(HTTP_FULL, response_cache={"enable": False}))


def test_the_older_constructor_forms_still_work():
    config = ClientModelConfig("M", 2, BATCHING.inputs, BATCHING.outputs, True)
    assert (config.decoupled, config.batcher, config.response_cache, config.instance_group) == (True, None, None, {})
    assert TensorSpec("IN", (1,), I32, "INT32").optional is False


# -- which client has which published method ------------------------------------------------------

SYNC_CLIENTS = (ModelClient, DecoupledModelClient)
ASYNC_CLIENTS = (AsyncioModelClient, AsyncioDecoupledModelClient)


@pytest.mark.parametrize("cls", SYNC_CLIENTS + ASYNC_CLIENTS)
def test_every_model_client_has_from_existing_client_get_lib_and_create_client_from_url(cls):
    assert inspect.ismethod(cls.from_existing_client)  # a classmethod
    assert list(inspect.signature(cls.create_client_from_url).parameters) == ["self", "url", "network_timeout_s"]
    assert inspect.signature(cls.create_client_from_url).parameters["network_timeout_s"].default is None


@pytest.mark.parametrize("cls", SYNC_CLIENTS)
def test_the_sync_clients_have_the_repository_and_server_calls(cls):
    assert isinstance(inspect.getattr_static(cls, "is_batching_supported"), property)
    assert list(inspect.signature(cls.load_model).parameters) == ["self", "config", "files"]
    assert list(inspect.signature(cls.unload_model).parameters) == ["self"]
    assert list(inspect.signature(cls.wait_for_server).parameters) == ["self", "timeout_s"]


def test_futures_client_has_the_published_defaults_and_wait_for_model():
    parameters = inspect.signature(FuturesModelClient).parameters
    assert (parameters["max_workers"].default, parameters["max_queue_size"].default) == (128, 128)
    assert list(inspect.signature(FuturesModelClient.wait_for_model).parameters) == ["self", "timeout_s"]


# -- the calls, offline ---------------------------------------------------------------------------


def test_is_batching_supported_reads_the_configuration():
    with offline() as batching, offline(config=PLAIN) as plain, offline(DecoupledModelClient, STREAMING) as streaming:
        assert (batching.is_batching_supported, plain.is_batching_supported) == (True, False)
        assert streaming.is_batching_supported is True


@pytest.mark.parametrize(("url", "sync_lib", "aio_lib"), [
    ("localhost:1", tritonclient.http, tritonclient.http.aio),
    ("grpc://localhost:1", tritonclient.grpc, tritonclient.grpc.aio),
])  # fmt: skip
def test_get_lib_names_the_protocols_tritonclient_module(url, sync_lib, aio_lib):
    for cls in SYNC_CLIENTS:
        with cls(url, "M") as client:
            assert client.get_lib() is sync_lib
    for cls in ASYNC_CLIENTS:
        assert cls(url, "M").get_lib() is aio_lib


def test_create_client_from_url_makes_a_client_of_the_urls_protocol():
    with offline() as client:
        made = client.create_client_from_url("grpc://localhost:1", network_timeout_s=3)
        assert isinstance(made, tritonclient.grpc.InferenceServerClient)
        made.close()
        made = client.create_client_from_url("localhost:1")
        assert isinstance(made, tritonclient.http.InferenceServerClient)
        made.close()
        with pytest.raises(PyTritonClientValueError, match="network_timeout_s must be a positive number"):
            client.create_client_from_url("localhost:1", network_timeout_s=0)
        with pytest.raises(PyTritonClientInvalidUrlError):
            client.create_client_from_url("https://localhost")


def test_asyncio_create_client_from_url_makes_an_aio_client_in_the_loop():
    async def make(url):
        made = offline(AsyncioModelClient).create_client_from_url(url, network_timeout_s=2)
        await made.close()
        return type(made)

    assert asyncio.run(make("localhost:1")) is tritonclient.http.aio.InferenceServerClient
    assert asyncio.run(make("grpc://localhost:1")) is tritonclient.grpc.aio.InferenceServerClient


def test_from_existing_client_takes_over_what_the_existing_one_knows():
    existing = offline(url="grpc://localhost:1", init_timeout_s=7, inference_timeout_s=3, access_token="t0ken",
                       priority=2)
    copy = ModelClient.from_existing_client(existing)
    with existing, copy:
        assert type(copy) is ModelClient and copy is not existing
        assert copy.model_config is BATCHING  # no readiness wait, no fetch: port 1 would fail
        assert copy.get_lib() is tritonclient.grpc
    assert clone_kwargs(existing) == {
        "url": "grpc://localhost:1",
        "model_name": "Batch2",
        "model_version": None,
        "init_timeout_s": 7.0,
        "inference_timeout_s": 3.0,
        "access_token": "t0ken",
        "priority": 2,
        "model_config": BATCHING,
        "ensure_model_is_ready": False,
    }

    async def asyncio_copy():
        async with AsyncioModelClient.from_existing_client(existing) as copy:
            return await copy.model_config

    assert asyncio.run(asyncio_copy()) is BATCHING


def test_from_existing_client_without_a_known_configuration_waits_as_a_new_client():
    with ModelClient("localhost:1", "M", "3") as existing:
        kwargs = clone_kwargs(existing)
    assert kwargs["model_version"] == "3"
    assert "model_config" not in kwargs and "ensure_model_is_ready" not in kwargs
    with FuturesModelClient("localhost:1", "M") as futures:
        assert "model_config" not in clone_kwargs(futures)


def test_from_existing_client_refuses_what_is_not_a_pytriton_client():
    with pytest.raises(PyTritonClientValueError, match="existing_client must be a pytriton client.*got str"):
        ModelClient.from_existing_client("localhost:8000")


def test_load_args_are_checked_before_anything_is_sent():
    assert load_args(None, None) == (None, None)
    assert load_args('{"name": "M"}', None) == ('{"name": "M"}', None)
    assert json.loads(load_args({"name": "M", "max_batch_size": 2}, None)[0]) == {"name": "M", "max_batch_size": 2}
    assert load_args("{}", {"file:1/model.py": bytearray(b"x")}) == ("{}", {"file:1/model.py": b"x"})
    with pytest.raises(PyTritonClientValueError, match="config must be the model configuration as JSON text"):
        load_args(42, None)  # type: ignore[arg-type]
    with pytest.raises(PyTritonClientValueError, match="files needs config"):
        load_args(None, {"file:1/model.py": b""})
    with pytest.raises(PyTritonClientValueError, match=r"files keys must be 'file:<path.*got '1/model.py'"):
        load_args("{}", {"1/model.py": b""})
    with pytest.raises(PyTritonClientValueError, match=r"files\['file:a'\] must be bytes, got str"):
        load_args("{}", {"file:a": "text"})  # type: ignore[dict-item]
    with pytest.raises(PyTritonClientValueError, match="files must be a mapping"):
        load_args("{}", [b""])  # type: ignore[arg-type]


def test_closed_clients_refuse_the_new_calls():
    client = offline()
    client.close()
    for call in (client.load_model, client.unload_model, client.wait_for_server):
        with pytest.raises(PyTritonClientClosedError):
            call()
    futures = FuturesModelClient("localhost:1", "M")
    futures.close()
    with pytest.raises(PyTritonClientClosedError):
        futures.wait_for_model(1)


def test_futures_wait_for_model_checks_its_timeout_in_the_caller():
    with FuturesModelClient("localhost:1", "M") as client:
        with pytest.raises(PyTritonClientValueError, match="timeout_s must be a positive number"):
            client.wait_for_model(-1)
