"""Access restriction, on by default, and a workspace private to the server's user, on the real server.

By default the administrative APIs (model repository, shared memory, statistics, trace, logging)
need the token the library generated; inference, health, metadata and model configuration stay
open. A chosen token, a chosen set of endpoints and no restriction at all are each shown too,
and so is a token read from the config (or the environment) before the server starts.
"""

from __future__ import annotations

import http.client
import os
import pathlib
import re
import shutil
import stat
import tempfile
import time

import numpy as np
import psutil
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from support import grpc_url, http_url, served_backend, server_config

from pytriton.client import ModelClient, PyTritonClientInferenceServerError
from pytriton.decorators import batch
from pytriton.environment import ACCESS_TOKEN as ACCESS_TOKEN_ENV
from pytriton.model_config import ModelConfig, Tensor
from pytriton.triton import RemoteTriton, Triton, TritonSecurityConfig

pytestmark = pytest.mark.functional

DATA = np.arange(6, dtype=np.float32).reshape(2, 3)
LARGE = np.ones((1, 512 * 1024), dtype=np.float32)  # 2 MiB: travels through shared memory
HEADER = "triton-access-token"
# One call of each restricted-by-default group (method, path).
ADMIN_CALLS = {
    "model-repository": ("POST", "/v2/repository/index"),
    "statistics": ("GET", "/v2/models/Echo/stats"),
    "shared-memory": ("GET", "/v2/systemsharedmemory/status"),
    "trace": ("GET", "/v2/trace/setting"),
    "logging": ("GET", "/v2/logging"),
}
OPEN_CALLS = {
    "health": ("GET", "/v2/health/ready"),
    "metadata": ("GET", "/v2/models/Echo"),
    "model-config": ("GET", "/v2/models/Echo/config"),
}


def _bind_echo(triton: Triton, name: str = "Echo") -> None:
    triton.bind(
        name,
        batch(lambda INPUT_1: {"OUTPUT_1": INPUT_1}),
        inputs=[Tensor(dtype=np.float32, shape=(-1,))],
        outputs=[Tensor(dtype=np.float32, shape=(-1,))],
        config=ModelConfig(max_batch_size=8),
    )


def _status(config, method: str, path: str, token=None, header: str = HEADER) -> int:
    connection = http.client.HTTPConnection("127.0.0.1", config.http_port, timeout=10)
    try:
        headers = {header: token} if token is not None else {}
        connection.request(method, path, body=b"{}" if method == "POST" else None, headers=headers)
        response = connection.getresponse()
        response.read()
        return response.status
    finally:
        connection.close()


def _infer(url: str, model: str = "Echo", data=DATA, **kwargs):
    with ModelClient(url, model, init_timeout_s=10, **kwargs) as client:
        return client.infer_batch(data)["OUTPUT_1"]


@pytest.fixture(scope="module")
def workspace():
    path = pathlib.Path(tempfile.mkdtemp(prefix="ptsec-"))
    path.chmod(0o755)  # a user folder open to others: what the library creates inside must not be
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def default_server(workspace):
    config = server_config()
    triton = Triton(config=config, workspace=workspace / "ws")
    _bind_echo(triton)
    triton.run()
    try:
        yield triton, config
    finally:
        triton.stop()


@pytest.mark.parametrize("api", sorted(ADMIN_CALLS))
def test_by_default_admin_apis_need_the_generated_token(default_server, api):
    triton, config = default_server
    method, path = ADMIN_CALLS[api]
    assert _status(config, method, path) == 403
    assert _status(config, method, path, token="wrong") == 403
    assert _status(config, method, path, token=triton.get_access_token()) == 200


def test_by_default_the_grpc_model_repository_needs_the_token(default_server):
    triton, config = default_server
    client = grpcclient.InferenceServerClient(grpc_url(config).removeprefix("grpc://"))
    try:
        with pytest.raises(Exception, match="restricted"):
            client.get_model_repository_index()
        with pytest.raises(Exception, match="restricted"):
            client.get_inference_statistics("Echo")
        token_header = {"triton-grpc-protocol-" + HEADER: triton.get_access_token()}
        assert [model.name for model in client.get_model_repository_index(headers=token_header).models] == ["Echo"]
    finally:
        client.close()


@pytest.mark.parametrize("api", sorted(OPEN_CALLS))
def test_by_default_client_apis_stay_open(default_server, api):
    _, config = default_server
    assert _status(config, *OPEN_CALLS[api]) == 200


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_by_default_inference_needs_no_token(default_server, protocol):
    _, config = default_server
    url = http_url(config) if protocol == "http" else grpc_url(config)
    np.testing.assert_array_equal(_infer(url), DATA)


def test_a_token_is_generated_per_server(default_server):
    triton, _ = default_server
    other = Triton(config=server_config())
    try:
        assert other.get_access_token() != triton.get_access_token()
        assert len(triton.get_access_token()) >= 40
    finally:
        other.stop()


def test_bind_after_run_loads_with_the_token(default_server):
    triton, config = default_server
    _bind_echo(triton, "EchoLate")
    np.testing.assert_array_equal(_infer(http_url(config), "EchoLate"), DATA)


def test_regions_of_a_model_loaded_behind_the_librarys_back_become_private(default_server, monkeypatch):
    """The Python backend creates its regions 0644; a model another process sends (RemoteTriton),
    or that a client loads, gets them made private within about a second, like the library's own.
    (The model goes on the proxy path: pytriton's backend makes no regions.)"""
    monkeypatch.setenv("PYTRITON_TRITON_CONFIG_MODEL_BACKEND", "python")
    triton, config = default_server
    marker = f"pytriton-{os.getpid()}-"

    def regions() -> dict:
        return {name: stat.S_IMODE(os.stat(f"/dev/shm/{name}").st_mode)
                for name in os.listdir("/dev/shm") if name.startswith(marker) and "-tpb" in name}  # fmt: skip

    before = set(regions())
    with RemoteTriton(http_url(config), access_token=triton.get_access_token()) as remote:
        _bind_echo(remote, "Behind")  # type: ignore[arg-type]
        assert set(regions()) - before, "the sent model's stub got no region of its own"
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and set(regions().values()) != {0o600}:
            time.sleep(0.1)
        assert set(regions().values()) == {0o600}, regions()


def test_workspace_sockets_and_segments_are_private(default_server, workspace):
    triton, config = default_server
    np.testing.assert_array_equal(_infer(http_url(config), data=LARGE), LARGE)  # creates both arenas
    ws = workspace / "ws"
    for folder in ("models", "sockets", "backends"):
        assert stat.S_IMODE((ws / folder).stat().st_mode) == 0o700, folder
    sockets = list((ws / "sockets").iterdir())
    assert sockets and all(stat.S_IMODE(s.stat().st_mode) == 0o600 for s in sockets)
    marker = f"pytriton-{os.getpid()}-"
    segments = {name: stat.S_IMODE(os.stat(f"/dev/shm/{name}").st_mode)
                for name in os.listdir("/dev/shm") if name.startswith(marker)}  # fmt: skip
    if served_backend() == "python":  # the Python backend's own regions (pytriton's backend has none)
        assert any("-tpb" in name for name in segments), segments
    # generation 1 of an input and an output arena (".<lane>" for the worker's arena of lane 1)
    assert any(re.search(r"-in-1$", name) for name in segments), segments
    assert any(re.search(r"-out-1(\.\d+)?$", name) for name in segments), segments
    assert set(segments.values()) == {0o600}, segments
    # The server and its stubs create files with umask 077.
    children = [p for p in psutil.Process().children(recursive=True) if str(ws) in " ".join(p.cmdline())]
    assert children
    for child in children:
        umask = next(line for line in pathlib.Path(f"/proc/{child.pid}/status").read_text().splitlines()
                     if line.startswith("Umask:"))  # fmt: skip
        assert umask.split()[1] == "0077", (child.cmdline()[:1], umask)


def test_a_chosen_token_and_user_restrictions_are_both_honoured():
    # The user's own item wins for statistics; the chosen token guards the other default APIs.
    config = server_config(http_restricted_api=["statistics:x-stats-key=abc"])
    with Triton(config=config, security_config=TritonSecurityConfig(access_token="my-token")) as triton:
        _bind_echo(triton)
        triton.run()
        assert triton.get_access_token() == "my-token"
        assert _status(config, "POST", "/v2/repository/index") == 403
        assert _status(config, "POST", "/v2/repository/index", token="my-token") == 200
        assert _status(config, "GET", "/v2/models/Echo/stats", token="my-token") == 403
        assert _status(config, "GET", "/v2/models/Echo/stats", token="abc", header="x-stats-key") == 200


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_chosen_endpoints_are_enforced_and_clients_with_the_token_get_through(protocol):
    config = server_config()
    security = TritonSecurityConfig(restricted_endpoints=["inference"])
    with Triton(config=config, security_config=security) as triton:
        _bind_echo(triton)
        triton.run()
        url = http_url(config) if protocol == "http" else grpc_url(config)
        with pytest.raises(PyTritonClientInferenceServerError, match="restricted"):
            _infer(url)
        np.testing.assert_array_equal(_infer(url, access_token=triton.get_access_token()), DATA)
        assert _status(config, "POST", "/v2/repository/index") == 200  # no longer restricted


def test_an_empty_list_disables_restriction(monkeypatch):
    monkeypatch.delenv(ACCESS_TOKEN_ENV, raising=False)
    config = server_config()
    with Triton(config=config, security_config=TritonSecurityConfig(restricted_endpoints=[])) as triton:
        _bind_echo(triton)
        triton.run()
        assert triton.get_access_token() is None  # nothing needs one
        for method, path in ADMIN_CALLS.values():
            assert _status(config, method, path) == 200, path


def test_over_grpc_only_the_library_loads_models_with_the_token():
    """With HTTP off, the library's own calls go over gRPC, with the header's gRPC prefix."""
    config = server_config(allow_http=False)
    with Triton(config=config) as triton:
        _bind_echo(triton)
        triton.run()
        _bind_echo(triton, "EchoLate")
        np.testing.assert_array_equal(_infer(grpc_url(config), "EchoLate"), DATA)


def _repository_names(config, protocol: str, token=None) -> list:
    """The model names of the repository index (a restricted API) through tritonclient."""
    if protocol == "http":
        client = httpclient.InferenceServerClient(f"127.0.0.1:{config.http_port}")
        headers = {HEADER: token} if token is not None else None
        try:
            return [entry["name"] for entry in client.get_model_repository_index(headers=headers)]
        finally:
            client.close()
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{config.grpc_port}")
    headers = {"triton-grpc-protocol-" + HEADER: token} if token is not None else None
    try:
        return [entry.name for entry in client.get_model_repository_index(headers=headers).models]
    finally:
        client.close()


def test_the_token_of_a_config_is_known_before_the_server_starts_and_opens_it(monkeypatch):
    monkeypatch.delenv(ACCESS_TOKEN_ENV, raising=False)
    security = TritonSecurityConfig()
    token = security.access_token  # what a script hands its clients before starting anything
    assert token and len(token) >= 40
    config = server_config()
    with Triton(config=config, security_config=security) as triton:
        assert triton.get_access_token() == token
        _bind_echo(triton)
        triton.run()
        assert triton.get_access_token() == token
        for protocol in ("http", "grpc"):
            assert _repository_names(config, protocol, token) == ["Echo"], protocol
            with pytest.raises(Exception, match="restricted"):
                _repository_names(config, protocol)
            with pytest.raises(Exception, match="restricted"):
                _repository_names(config, protocol, token + "x")
        assert _status(config, "GET", "/v2/models/Echo/stats", token=token) == 200


def test_the_environment_token_is_taken_when_the_config_is_built(monkeypatch):
    monkeypatch.setenv(ACCESS_TOKEN_ENV, "token-from-a-secret")
    config = server_config()
    with Triton(config=config) as triton:  # the default config, built here, reads the variable
        monkeypatch.delenv(ACCESS_TOKEN_ENV)  # later changes do not matter
        _bind_echo(triton)
        triton.run()
        assert triton.get_access_token() == "token-from-a-secret"
        assert _status(config, "POST", "/v2/repository/index", token="token-from-a-secret") == 200
        assert _status(config, "POST", "/v2/repository/index") == 403
        assert _repository_names(config, "grpc", "token-from-a-secret") == ["Echo"]
