"""pytriton.client.utils against the real server, over HTTP and gRPC.

One server with the library's default security (the model repository needs the token) serves
``Echo``. Each helper is called as code written for published PyTriton calls it: on a
``tritonclient`` client from ``create_client_from_url``, and on one the test builds itself.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
import tritonclient.grpc
import tritonclient.http
from support import free_ports, grpc_url, http_url, server_config

from pytriton.client import (
    ClientModelConfig,
    PyTritonClientInferenceServerError,
    PyTritonClientInvalidUrlError,
    PyTritonClientTimeoutError,
    PyTritonClientValueError,
)
from pytriton.client.utils import (
    ModelState,
    create_client_from_url,
    get_client_lib_from_client,
    get_model_config,
    get_model_state,
    wait_for_model_ready,
    wait_for_server_ready,
)
from pytriton.decorators import batch
from pytriton.model_config import ModelConfig, Tensor
from pytriton.triton import Triton

pytestmark = pytest.mark.functional


def _bind_echo(triton: Triton) -> None:
    triton.bind(
        "Echo",
        batch(lambda INPUT_1: {"OUTPUT_1": INPUT_1}),
        inputs=[Tensor(dtype=np.float32, shape=(-1,))],
        outputs=[Tensor(dtype=np.float32, shape=(-1,))],
        config=ModelConfig(max_batch_size=8),
    )


@pytest.fixture(scope="module")
def server():
    config = server_config()
    triton = Triton(config=config)
    _bind_echo(triton)
    triton.run()
    try:
        yield config, triton.get_access_token()
    finally:
        triton.stop()


@pytest.fixture(params=["http", "grpc"])
def protocol(request):
    return request.param


@pytest.fixture
def client(server, protocol):
    config, _ = server
    made = create_client_from_url(http_url(config) if protocol == "http" else grpc_url(config), network_timeout_s=10)
    yield made
    made.close()


@pytest.fixture
def token(server):
    return server[1]


def test_create_client_from_url_gives_the_protocols_tritonclient_client(client, protocol):
    library = tritonclient.http if protocol == "http" else tritonclient.grpc
    assert isinstance(client, library.InferenceServerClient)
    assert get_client_lib_from_client(client) is library
    assert client.is_server_live()


def test_wait_for_server_ready_returns_on_a_ready_server_and_leaves_the_client_open(client):
    started = time.monotonic()
    wait_for_server_ready(client, timeout_s=10)
    assert time.monotonic() - started < 5
    assert client.is_server_ready()  # the helper did not close the caller's client


def test_wait_for_model_ready_returns_for_a_loaded_model(client):
    wait_for_model_ready(client, "Echo", timeout_s=10)
    wait_for_model_ready(client, "Echo", model_version="1", timeout_s=10)
    wait_for_model_ready(client, "Echo")  # the published defaults


def test_wait_for_a_missing_model_times_out_on_time(client):
    started = time.monotonic()
    with pytest.raises(PyTritonClientTimeoutError, match=r"model 'Missing'.*not ready within 1 s"):
        wait_for_model_ready(client, "Missing", timeout_s=1)
    assert 0.9 < time.monotonic() - started < 3


def test_get_model_config_reads_the_configuration(client):
    config = get_model_config(client, "Echo", timeout_s=10)
    assert isinstance(config, ClientModelConfig)
    assert (config.model_name, config.max_batch_size, config.batching) == ("Echo", 8, True)
    assert [(spec.name, spec.dtype, spec.shape) for spec in config.inputs] == [("INPUT_1", np.float32, (-1,))]
    assert [spec.name for spec in config.outputs] == ["OUTPUT_1"]
    assert get_model_config(client, "Echo", "1") == config


def test_get_model_config_of_a_missing_model_times_out(client):
    with pytest.raises(PyTritonClientTimeoutError, match="Missing"):
        get_model_config(client, "Missing", timeout_s=1)


def test_get_model_state_with_the_token(client, token):
    assert get_model_state(client, "Echo", access_token=token) is ModelState.READY
    assert get_model_state(client, "Echo", "1", access_token=token) is ModelState.READY
    assert get_model_state(client, "Echo", "2", access_token=token) is ModelState.UNAVAILABLE
    assert get_model_state(client, "Missing", access_token=token) is ModelState.UNAVAILABLE


def test_get_model_state_without_the_token_is_refused(client, token):
    with pytest.raises(PyTritonClientInferenceServerError, match="restricts this API") as raised:
        get_model_state(client, "Echo")
    assert token not in str(raised.value)
    with pytest.raises(PyTritonClientInferenceServerError, match="restricts this API"):
        get_model_state(client, "Echo", access_token="wrong")


def test_helpers_take_a_tritonclient_client_made_elsewhere(server, protocol, token):
    config, _ = server
    if protocol == "http":
        own = tritonclient.http.InferenceServerClient(f"127.0.0.1:{config.http_port}")
    else:
        own = tritonclient.grpc.InferenceServerClient(f"127.0.0.1:{config.grpc_port}")
    try:
        wait_for_server_ready(own, timeout_s=10)
        wait_for_model_ready(own, "Echo", timeout_s=10)
        assert get_model_config(own, "Echo", timeout_s=10).model_name == "Echo"
        assert get_model_state(own, "Echo", access_token=token) is ModelState.READY
        with pytest.raises(PyTritonClientTimeoutError, match=f"given tritonclient.{protocol} client"):
            wait_for_model_ready(own, "Missing", timeout_s=0.5)
    finally:
        own.close()


@pytest.mark.parametrize(
    "url", ["https://localhost:8000", "invalid_scheme://localhost", "http://localhost:foo", "localhost:0", ""]
)
def test_an_invalid_url_is_refused(url):
    with pytest.raises(PyTritonClientInvalidUrlError, match="Invalid server URL"):
        create_client_from_url(url)


def test_a_url_that_is_not_a_string_is_refused():
    with pytest.raises(PyTritonClientInvalidUrlError, match="expected a string, got list"):
        create_client_from_url(["localhost:8001"])  # type: ignore[arg-type]


def test_bad_arguments_are_named():
    with pytest.raises(PyTritonClientValueError, match="network_timeout_s must be a positive number"):
        create_client_from_url("localhost", network_timeout_s=0)
    with pytest.raises(PyTritonClientValueError, match="client must be a tritonclient.http or tritonclient.grpc"):
        wait_for_server_ready("localhost:8000", timeout_s=1)  # type: ignore[arg-type]
    client = create_client_from_url("localhost:1")
    try:
        with pytest.raises(PyTritonClientValueError, match="timeout_s must be a positive number"):
            wait_for_model_ready(client, "Echo", timeout_s=-1)
        with pytest.raises(PyTritonClientValueError, match="model_name must be a non-empty string"):
            get_model_state(client, "")
    finally:
        client.close()


@pytest.mark.parametrize("scheme", ["http", "grpc"])
def test_wait_for_server_ready_times_out_when_nothing_listens(scheme):
    (port,) = free_ports(1)
    client = create_client_from_url(f"{scheme}://127.0.0.1:{port}", network_timeout_s=2)
    started = time.monotonic()
    try:
        with pytest.raises(PyTritonClientTimeoutError, match=f"Server at {scheme}://127.0.0.1:{port} was not ready"):
            wait_for_server_ready(client, timeout_s=1)
    finally:
        client.close()
    assert 0.9 < time.monotonic() - started < 3


def test_wait_for_model_ready_waits_for_a_server_that_starts_later():
    config = server_config()
    client = create_client_from_url(grpc_url(config), network_timeout_s=5)
    outcome: list = []

    def wait() -> None:
        try:
            wait_for_model_ready(client, "Echo", timeout_s=120)
            outcome.append("ready")
        except Exception as exc:  # noqa: BLE001 - handed to the test thread to fail it
            outcome.append(exc)

    waiter = threading.Thread(target=wait)
    waiter.start()
    try:
        time.sleep(0.5)  # the waiter polls a port where nothing listens yet
        assert not outcome
        with Triton(config=config) as triton:
            _bind_echo(triton)
            triton.run()
            waiter.join(timeout=30)
            assert outcome == ["ready"]
    finally:
        waiter.join(timeout=5)
        client.close()
