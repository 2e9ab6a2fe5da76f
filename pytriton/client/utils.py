"""Helpers over a bare ``tritonclient`` client, under the names of published PyTriton's ``pytriton.client.utils``.

Client step, beside the model clients: code written for the published library makes a
``tritonclient`` client with :func:`create_client_from_url` (or brings its own), then waits for
the server or a model and reads a model's configuration or state through it. These helpers add
no logic of their own: the given client is adopted by a :class:`~pytriton.client.core.TritonCore`
for the call, so the readiness wait, the error translation, the access-token headers and the
configuration parsing are the ones every model client uses. The helpers never close the client.

Differences from the published helpers, all in the caller's favour: every helper takes an
``access_token`` keyword (a pytriton server restricts the model repository, which
:func:`get_model_state` reads, by default); a gRPC client made by :func:`create_client_from_url`
bounds each call by its ``network_timeout_s`` instead of ignoring it with a warning; errors are
the clients' own (``PyTritonClientError`` and below), never ``tritonclient``'s. ``TritonUrl``
is the clients' own parsed address (``pytriton.client.url``) under its published name: frozen,
and its ``without_scheme`` keeps an IPv6 host in brackets so ``tritonclient`` can use it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import time
import weakref
from collections.abc import Iterable, Iterator, Mapping
from types import ModuleType
from typing import Any, Dict, Tuple, Union

import tritonclient.grpc
import tritonclient.http

from pytriton.access_token import auth_headers
from pytriton.client._args import DEFAULT_INIT_TIMEOUT_S, model_args, timeout_arg, token_arg, with_auth
from pytriton.client._errors import translate_errors
from pytriton.client.core import TritonCore
from pytriton.client.exceptions import PyTritonClientValueError
from pytriton.client.model_config import ClientModelConfig
from pytriton.client.url import TritonUrl, parse_url
from pytriton.client.waits import wait_until_ready, wait_until_server_ready

__all__ = [
    "LATEST_MODEL_VERSION",
    "ModelState",
    "TritonUrl",
    "create_client_from_url",
    "get_client_lib_from_client",
    "get_model_config",
    "get_model_state",
    "parse_grpc_response",
    "parse_http_response",
    "wait_for_model_ready",
    "wait_for_server_ready",
]

TritonSyncClient = Union[tritonclient.http.InferenceServerClient, tritonclient.grpc.InferenceServerClient]
"""The clients these helpers take: blocking ``tritonclient`` clients of either protocol."""

# The published defaults, under the published (private) names that code and tests import.
_DEFAULT_NETWORK_TIMEOUT_S = 60.0
_DEFAULT_WAIT_FOR_SERVER_READY_TIMEOUT_S = 60.0
_DEFAULT_WAIT_FOR_MODEL_TIMEOUT_S = DEFAULT_INIT_TIMEOUT_S  # 300 s, the model clients' init_timeout_s

LATEST_MODEL_VERSION = "<latest>"
"""How messages name the version when ``model_version`` is None (the server's latest)."""

_INDEX_ACTION = "Error occurred while reading the model repository index"


class ModelState(enum.Enum):
    """A model version's state as the server's model repository index reports it.

    Attributes:
        LOADING: being loaded (also a version the index lists without a state).
        UNLOADING: being unloaded.
        UNAVAILABLE: unknown to the server, failed to load, or unloaded.
        READY: loaded and taking requests.
    """

    LOADING = "LOADING"
    UNLOADING = "UNLOADING"
    UNAVAILABLE = "UNAVAILABLE"
    READY = "READY"


# What create_client_from_url knows of the clients it made: their address (for messages) and
# their network timeout (the per-call deadline of gRPC calls). Weak: the caller owns the client.
_MADE: weakref.WeakKeyDictionary[Any, tuple[TritonUrl, float]] = weakref.WeakKeyDictionary()


@dataclasses.dataclass(frozen=True)
class _GivenClientUrl(TritonUrl):
    """Stands for the address of a client made elsewhere: ``tritonclient`` does not say it."""

    def __str__(self) -> str:
        return f"<the server of the given tritonclient.{self.scheme} client>"


class _AdoptedCore(TritonCore):
    """A :class:`TritonCore` over the caller's client, which it never closes.

    A gRPC call still carries its own deadline; an HTTP client's socket timeouts are the ones the
    caller gave it, and bound every call (a call cannot get a shorter one).
    """

    def __init__(self, client: TritonSyncClient, url: TritonUrl, default_timeout_s: float,
                 access_token: str | None) -> None:  # fmt: skip
        super().__init__(url, default_timeout_s, access_token)
        self._client = client

    @contextlib.contextmanager
    def _client_for(self, timeout_s: float) -> Iterator[Any]:
        yield self._client

    def close(self) -> None:
        """Leave the caller's client open."""


def _adopt(client: Any, access_token: str | None) -> TritonCore:
    """The core that makes the helpers' calls through ``client``."""
    token = token_arg(access_token)
    scheme = _scheme_of(client)
    url, timeout_s = _MADE.get(client, (_GivenClientUrl(scheme, "", 0), _DEFAULT_NETWORK_TIMEOUT_S))
    return _AdoptedCore(client, url, timeout_s, token)


def _scheme_of(client: Any) -> str:
    if isinstance(client, tritonclient.grpc.InferenceServerClient):
        return "grpc"
    if isinstance(client, tritonclient.http.InferenceServerClient):
        return "http"
    raise PyTritonClientValueError(
        f"client must be a tritonclient.http or tritonclient.grpc InferenceServerClient (for example from "
        f"create_client_from_url), got {type(client).__name__}"
    )


def create_client_from_url(url: str, network_timeout_s: float | None = None) -> TritonSyncClient:
    """A ``tritonclient`` client for the server at ``url``, in the protocol its scheme names.

    Args:
        url: ``host``, ``host:port``, ``http://host[:port]`` or ``grpc://host[:port]``, as for
            the model clients (no scheme: HTTP; no port: 8000 for HTTP, 8001 for gRPC).
        network_timeout_s: the longest one call may take (default 60 s): the connection and
            network timeout of an HTTP client; the deadline these helpers give each call of a
            gRPC client (``tritonclient.grpc`` fixes none at construction).

    Returns:
        A ``tritonclient.http.InferenceServerClient`` or ``tritonclient.grpc.InferenceServerClient``;
        the caller closes it.

    Raises:
        PyTritonClientInvalidUrlError: ``url`` cannot be parsed or its scheme is not served.
        PyTritonClientValueError: ``network_timeout_s`` is not a positive number.
    """
    parsed = parse_url(url)
    timeout_s = timeout_arg("network_timeout_s", network_timeout_s, _DEFAULT_NETWORK_TIMEOUT_S)
    client: TritonSyncClient
    if parsed.scheme == "grpc":
        client = tritonclient.grpc.InferenceServerClient(parsed.address)
    else:
        client = tritonclient.http.InferenceServerClient(
            parsed.address, connection_timeout=timeout_s, network_timeout=timeout_s
        )
    _MADE[client] = (parsed, timeout_s)
    return client


def get_client_lib_from_client(client: TritonSyncClient) -> ModuleType:
    """The ``tritonclient`` module of ``client``: ``tritonclient.http`` or ``tritonclient.grpc``.

    Raises:
        PyTritonClientValueError: ``client`` is not a blocking ``tritonclient`` client.
    """
    module: ModuleType = tritonclient.grpc if _scheme_of(client) == "grpc" else tritonclient.http
    return module


def wait_for_server_ready(
    client: TritonSyncClient, timeout_s: float | None = None, *, access_token: str | None = None
) -> None:
    """Block until the server is live and ready.

    A server that cannot be reached yet counts as not ready, so this also waits for a server
    that is still starting.

    Args:
        client: the ``tritonclient`` client to ask through.
        timeout_s: the longest to wait (default 60 s).
        access_token: for a server that restricts its health API.

    Raises:
        PyTritonClientTimeoutError: not live and ready within ``timeout_s``.
        PyTritonClientInferenceServerError: the server refused the check (a restricted health API).
    """
    core = _adopt(client, access_token)
    wait_until_server_ready(core, timeout_arg("timeout_s", timeout_s, _DEFAULT_WAIT_FOR_SERVER_READY_TIMEOUT_S),
                            "timeout_s")


def wait_for_model_ready(
    client: TritonSyncClient,
    model_name: str,
    model_version: str | None = None,
    timeout_s: float | None = None,
    *,
    access_token: str | None = None,
) -> None:
    """Block until the server and the model are ready, as the model clients wait.

    A model the server does not know (yet) counts as not ready: it may be loaded at any moment.

    Args:
        client: the ``tritonclient`` client to ask through.
        model_name: the model to wait for.
        model_version: its version; None for the server's choice (the latest).
        timeout_s: the longest to wait (default 300 s).
        access_token: for a server that restricts its health or metadata APIs.

    Raises:
        PyTritonClientTimeoutError: not ready within ``timeout_s``; says what was last seen.
    """
    core = _adopt(client, access_token)
    name, version = model_args(model_name, model_version)
    wait_until_ready(core, name, version, timeout_arg("timeout_s", timeout_s, _DEFAULT_WAIT_FOR_MODEL_TIMEOUT_S),
                     budget="timeout_s")


def get_model_config(
    client: TritonSyncClient,
    model_name: str,
    model_version: str | None = None,
    timeout_s: float | None = None,
    *,
    access_token: str | None = None,
) -> ClientModelConfig:
    """The model's configuration, once the server and the model are ready.

    Args:
        client: the ``tritonclient`` client to ask through.
        model_name: the model.
        model_version: its version; None for the server's choice (the latest).
        timeout_s: the longest to wait for readiness and the configuration together (default 300 s).
        access_token: for a server that restricts its model-config API.

    Returns:
        The configuration as every pytriton client sees it (``ModelClient.model_config``).

    Raises:
        PyTritonClientTimeoutError: not ready within ``timeout_s``.
        PyTritonClientInferenceServerError: the server refused the request (e.g. a missing token).
    """
    core = _adopt(client, access_token)
    name, version = model_args(model_name, model_version)
    timeout_s = timeout_arg("timeout_s", timeout_s, _DEFAULT_WAIT_FOR_MODEL_TIMEOUT_S)
    deadline = time.monotonic() + timeout_s
    wait_until_ready(core, name, version, timeout_s, budget="timeout_s")
    return core.get_model_config(name, version, timeout_s=max(deadline - time.monotonic(), 1e-3))


def get_model_state(
    client: TritonSyncClient, model_name: str, model_version: str | None = None, *, access_token: str | None = None
) -> ModelState:
    """The state of a model version, from the server's model repository index.

    Args:
        client: the ``tritonclient`` client to ask through.
        model_name: the model.
        model_version: its version; None for the numerically highest version the index lists.
        access_token: the server's token; a pytriton server restricts the model repository by
            default (``Triton.get_access_token()``).

    Returns:
        The state; ``ModelState.UNAVAILABLE`` for a model or version the index does not list.

    Raises:
        PyTritonClientInferenceServerError: the server refused the request (e.g. a missing token).
        PyTritonClientModelUnavailableError: the server cannot be reached.
    """
    core = _adopt(client, access_token)
    name, version = model_args(model_name, model_version)
    headers = with_auth(auth_headers(core.url.scheme, token_arg(access_token)), None)
    with translate_errors(_INDEX_ACTION, str(core.url), core.default_timeout_s):
        if isinstance(client, tritonclient.grpc.InferenceServerClient):
            index = client.get_model_repository_index(
                headers=headers, as_json=True, client_timeout=core.default_timeout_s
            )
            states = _states(index.get("models", ()))
        else:
            states = _states(client.get_model_repository_index(headers=headers))
    versions = {entry_version: state for (entry_name, entry_version), state in states.items() if entry_name == name}
    if version:
        return versions.get(version, ModelState.UNAVAILABLE)
    numbered = [entry_version for entry_version in versions if entry_version.isdigit()]
    if not numbered:
        return ModelState.UNAVAILABLE
    return versions[max(numbered, key=int)]


def parse_http_response(models: Iterable[Mapping[str, Any]]) -> Dict[Tuple[str, str], ModelState]:
    """The states in an HTTP model repository index (a list of ``{"name", "version", "state"}``).

    Returns:
        ``(name, version)`` to state; entries without a version (models with no version on
        disk) are left out.
    """
    return _states(models)


def parse_grpc_response(models: Iterable[Any]) -> Dict[Tuple[str, str], ModelState]:
    """The states in a gRPC model repository index (``RepositoryIndexResponse.models``), as
    :func:`parse_http_response` gives them."""
    return _states({"name": model.name, "version": model.version, "state": model.state} for model in models)


def _states(entries: Iterable[Mapping[str, Any]]) -> Dict[Tuple[str, str], ModelState]:
    states: Dict[Tuple[str, str], ModelState] = {}
    for entry in entries:
        version = str(entry.get("version") or "")
        if not version:
            continue
        raw = str(entry.get("state") or ModelState.LOADING.value)
        # Triton may also report "UNKNOWN" (a version it has no record of): treat it as unavailable.
        state = ModelState[raw] if raw in ModelState.__members__ else ModelState.UNAVAILABLE
        states[(str(entry["name"]), version)] = state
    return states
