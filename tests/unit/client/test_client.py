"""Client arguments and the checks made before any request leaves (no server, no process).

A client given its model configuration and ``ensure_model_is_ready=False`` needs no network
until it sends, so everything refused before sending is tested here; port 1 on localhost is
never served, so a request that did leave would fail differently.
"""

from __future__ import annotations

import concurrent.futures
import time

import numpy as np
import pytest

from pytriton.client import (
    ClientModelConfig,
    FuturesModelClient,
    ModelClient,
    PyTritonClientClosedError,
    PyTritonClientInvalidUrlError,
    PyTritonClientModelDoesntSupportBatchingError,
    PyTritonClientModelUnavailableError,
    PyTritonClientQueueFullError,
    PyTritonClientValueError,
    TensorSpec,
)

URL = "localhost:1"
I32 = np.dtype(np.int32)
BATCHING = ClientModelConfig(
    "Batch2", 2, (TensorSpec("INPUT_1", (1,), I32, "INT32"),), (TensorSpec("OUTPUT_1", (1,), I32, "INT32"),)
)
NOT_BATCHING = ClientModelConfig(
    "Plain",
    0,
    (TensorSpec("A", (-1,), I32, "INT32"), TensorSpec("B", (-1,), I32, "INT32")),
    (TensorSpec("OUT", (-1,), I32, "INT32"),),
)


def offline_client(config=BATCHING, url=URL, **kwargs):
    return ModelClient(url, config.model_name, model_config=config, ensure_model_is_ready=False, **kwargs)


@pytest.mark.parametrize("url", ["localhost:1", "grpc://localhost:1"])
def test_construction_touches_no_network(url):
    with ModelClient(url, "Batch2"):
        pass


def test_given_config_is_returned_without_network():
    with offline_client() as client:
        assert client.model_config is BATCHING


def test_invalid_url_fails_at_construction():
    with pytest.raises(PyTritonClientInvalidUrlError):
        ModelClient("https://localhost", "Batch2")
    with pytest.raises(PyTritonClientInvalidUrlError):
        FuturesModelClient("localhost:notaport", "Batch2")


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"init_timeout_s": 0}, "init_timeout_s must be a positive number"),
        ({"init_timeout_s": -1.0}, "init_timeout_s must be a positive number"),
        ({"inference_timeout_s": "60"}, "inference_timeout_s must be a positive number"),
        ({"inference_timeout_s": True}, "inference_timeout_s must be a positive number"),
        ({"model_version": 1.5}, "model_version must be a string, an integer or None"),
        ({"model_config": {"max_batch_size": 2}}, "model_config must be a ClientModelConfig"),
    ],
)
def test_bad_arguments_are_named(kwargs, match):
    with pytest.raises(PyTritonClientValueError, match=match):
        ModelClient(URL, "Batch2", **kwargs)


@pytest.mark.parametrize("name", ["", None, 3])
def test_model_name_must_be_a_non_empty_string(name):
    with pytest.raises(PyTritonClientValueError, match="model_name must be a non-empty string"):
        ModelClient(URL, name)


def test_positional_and_named_inputs_together_are_refused():
    with offline_client(NOT_BATCHING) as client:
        with pytest.raises(PyTritonClientValueError, match="not both"):
            client.infer_sample(np.zeros(1, np.int32), B=np.zeros(1, np.int32))


def test_infer_batch_on_a_model_without_batching():
    with offline_client(NOT_BATCHING) as client:
        with pytest.raises(PyTritonClientModelDoesntSupportBatchingError, match="'Plain' has max_batch_size 0"):
            client.infer_batch(np.zeros(1, np.int32))


def test_parameters_and_headers_must_be_mappings():
    with offline_client() as client:
        with pytest.raises(PyTritonClientValueError, match="parameters must be a mapping"):
            client.infer_sample(np.zeros(1, np.int32), parameters=[("a", 1)])
        with pytest.raises(PyTritonClientValueError, match="headers must be a mapping"):
            client.infer_sample(np.zeros(1, np.int32), headers="x")


@pytest.mark.parametrize("url", ["localhost:1", "grpc://localhost:1"])
def test_a_request_that_leaves_to_nowhere_says_the_server_is_unreachable(url):
    with offline_client(url=url) as client:
        with pytest.raises(PyTritonClientModelUnavailableError, match="Cannot reach the server at"):
            client.infer_sample(np.zeros(1, np.int32))


def test_calls_after_close():
    client = offline_client()
    client.close()
    client.close()  # idempotent
    with pytest.raises(PyTritonClientClosedError):
        client.infer_sample(np.zeros(1, np.int32))
    with pytest.raises(PyTritonClientClosedError):
        client.infer_batch(np.zeros((1, 1), np.int32))
    with pytest.raises(PyTritonClientClosedError):
        _ = client.model_config
    with pytest.raises(PyTritonClientClosedError):
        client.wait_for_model(1)


def test_futures_client_arguments():
    with pytest.raises(PyTritonClientValueError, match="max_workers must be an integer >= 1 or None"):
        FuturesModelClient(URL, "Batch2", max_workers=0)
    with pytest.raises(PyTritonClientValueError, match="max_queue_size must be an integer >= 0 or None"):
        FuturesModelClient(URL, "Batch2", max_queue_size=-1)
    with pytest.raises(PyTritonClientValueError, match="init_timeout_s must be a positive number"):
        FuturesModelClient(URL, "Batch2", init_timeout_s=0)


def test_futures_client_returns_futures_and_carries_errors_in_them():
    with FuturesModelClient(URL, "Batch2", init_timeout_s=0.3) as client:
        future = client.model_config()
        assert isinstance(future, concurrent.futures.Future)
        with pytest.raises(Exception, match="not ready within 0.3 s"):
            future.result(timeout=10)


def test_futures_client_calls_after_close():
    client = FuturesModelClient(URL, "Batch2")
    with client:
        pass
    client.close()  # idempotent
    for call in (client.model_config, lambda: client.infer_sample(np.zeros(1, np.int32))):
        with pytest.raises(PyTritonClientClosedError):
            call()
    with pytest.raises(PyTritonClientClosedError):
        client.infer_batch(np.zeros((1, 1), np.int32))


def test_a_full_blocking_futures_queue_raises_after_inference_timeout_s():
    # As the published client: a blocking submit waits for a place at most inference_timeout_s.
    # The one worker is held by wait_for_model on a port nothing serves, which waits its 2 s.
    client = FuturesModelClient(URL, "M", max_workers=1, max_queue_size=0, inference_timeout_s=0.3)
    try:
        holding = client.wait_for_model(timeout_s=2.0)
        started = time.monotonic()
        with pytest.raises(PyTritonClientQueueFullError, match=r"no place freed for 0.3 s \(inference_timeout_s\)"):
            client.infer_sample(np.ones(1, np.int32))
        assert 0.25 < time.monotonic() - started < 1.5
        assert holding.exception(timeout=10) is not None  # nothing serves it
    finally:
        client.close(wait=True)
