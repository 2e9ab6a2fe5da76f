"""The blocking side's I/O: the same names as :mod:`pytriton.client.io_aio`, without an event loop.

The blocking clients (``client``, ``core``, ``waits``, ``shm``) are written by
``build_backend/unasync.py`` from the asyncio ones, renaming only; what differs by design lives
here and in its asyncio twin (see :mod:`pytriton.client.io_aio` for the list).
"""

from __future__ import annotations

import contextlib
import threading
import time
import weakref
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Tuple, TypeVar, Union

import tritonclient.grpc
import tritonclient.http

from pytriton.client._args import timeout_arg
from pytriton.client.core_request import CoreRequest
from pytriton.client.url import TritonUrl, parse_url
from pytriton.client.watched import WatchedHttp, grpc_infer_watched

__all__ = [
    "DEFAULT_NETWORK_TIMEOUT_S",
    "Call",
    "Connection",
    "Lock",
    "Look",
    "TritonClient",
    "create_client_from_url",
    "gather_results",
    "made",
    "new_client",
    "sleep",
    "wait_in_constructor",
    "wait_on_enter",
]

_T = TypeVar("_T")

TritonClient = Union[tritonclient.http.InferenceServerClient, tritonclient.grpc.InferenceServerClient]
"""A ``tritonclient`` client of the blocking side."""
Look = Callable[[], None]
"""Looks for a notice of a request's loss between slices of its wait; raises to end it (`pytriton.client.lost`)."""
Call = Callable[[Any, Dict[str, Any]], _T]
"""A call of a ``tritonclient`` client: it gets the client and the call's deadline keywords."""

DEFAULT_NETWORK_TIMEOUT_S = 60.0
"""The time limit of a client's calls when `create_client_from_url` is given none."""

_MADE: weakref.WeakKeyDictionary[Any, Tuple[TritonUrl, float]] = weakref.WeakKeyDictionary()
"""The address and time limit of each client `create_client_from_url` made (``tritonclient`` keeps neither)."""


def new_client(url: TritonUrl, timeout_s: float) -> TritonClient:
    """A blocking ``tritonclient`` client for ``url`` (its scheme picks the module).

    Args:
        url: the server's address.
        timeout_s: an HTTP client's connection and network timeouts (geventhttpclient fixes them
            when the client is made); a gRPC client takes its limits per call.
    """
    if url.scheme == "grpc":
        return tritonclient.grpc.InferenceServerClient(url.address)
    return tritonclient.http.InferenceServerClient(url.address, connection_timeout=timeout_s, network_timeout=timeout_s)


def create_client_from_url(url: str, network_timeout_s: Optional[float] = None) -> TritonClient:
    """A ``tritonclient`` client for the server at ``url``, in the protocol its scheme names.

    Published as ``pytriton.client.utils.create_client_from_url``; the client is remembered
    (`made`), so that the helpers there know its address and its limit.

    Args:
        url: ``host``, ``host:port``, ``http://host[:port]`` or ``grpc://host[:port]``, as for
            the model clients (no scheme: HTTP; no port: 8000 for HTTP, 8001 for gRPC).
        network_timeout_s: the longest one call may take (default 60 s): the connection and
            network timeout of an HTTP client; the deadline the helpers of
            ``pytriton.client.utils`` give each call of a gRPC client (``tritonclient.grpc``
            fixes none at construction).

    Returns:
        A ``tritonclient.http.InferenceServerClient`` or ``tritonclient.grpc.InferenceServerClient``;
        the caller closes it.

    Raises:
        PyTritonClientInvalidUrlError: ``url`` cannot be parsed or its scheme is not served.
        PyTritonClientValueError: ``network_timeout_s`` is not a positive number.
    """
    parsed = parse_url(url)
    timeout_s = timeout_arg("network_timeout_s", network_timeout_s, DEFAULT_NETWORK_TIMEOUT_S)
    client = new_client(parsed, timeout_s)
    _MADE[client] = (parsed, timeout_s)
    return client


def made(client: Any) -> Optional[Tuple[TritonUrl, float]]:
    """The address and time limit `client` was made with by `create_client_from_url`; None for another client."""
    return _MADE.get(client)


class Connection:
    """A core's ``tritonclient`` client of one server, made on the first call; not thread safe
    (neither are ``tritonclient``'s blocking clients): one per thread.

    Args:
        url: the server's address; its scheme picks the protocol.
        default_timeout_s: the HTTP client's socket timeouts.
    """

    def __init__(self, url: TritonUrl, default_timeout_s: float) -> None:
        self.url = url
        self.default_timeout_s = default_timeout_s
        self._grpc = url.scheme == "grpc"
        self._client: Any = None
        self._watched: Optional[WatchedHttp] = None

    def client(self) -> Any:
        """The ``tritonclient`` client (made now if it is not yet)."""
        if self._client is None:
            self._client = new_client(self.url, self.default_timeout_s)
        return self._client

    def call(self, timeout_s: float, call: Call[_T]) -> _T:
        """Make `call` within `timeout_s`, errors untranslated: a gRPC call carries the limit as its
        deadline; the HTTP client fixes its socket timeouts when it is made, so an HTTP call of
        another limit runs on a short-lived client made with it."""
        deadline = {"client_timeout": timeout_s} if self._grpc else {}
        with self._client_for(timeout_s) as client:
            return call(client, deadline)

    def infer_watched(self, request: CoreRequest, look: Look) -> Any:
        """Send `request` (headers, parameters and ``timeout_s`` as sent) and wait for its answer,
        calling `look` between slices of the wait: ``tritonclient``'s blocking ``infer`` cannot be
        left early, so the request goes on a connection it can wait on in slices
        (`pytriton.client.watched`). Errors come out untranslated.

        Returns:
            The protocol's ``InferResult``.
        """
        if self._grpc:
            return grpc_infer_watched(self.client(), request, look)
        if self._watched is None:
            self._watched = WatchedHttp(self.url)
        return self._watched.infer(request, look)

    def close(self) -> None:
        """Close the client and the watched requests' connection; a later call makes new ones."""
        client, self._client = self._client, None
        if client is not None:
            client.close()
        if self._watched is not None:
            self._watched.close()

    @contextlib.contextmanager
    def _client_for(self, timeout_s: float) -> Iterator[Any]:
        if self._grpc or timeout_s == self.default_timeout_s:
            yield self.client()
            return
        client = new_client(self.url, timeout_s)
        try:
            yield client
        finally:
            client.close()


Lock = threading.Lock
"""The lock of a blocking client (``with``)."""


def sleep(seconds: float) -> None:
    """Wait `seconds`."""
    time.sleep(seconds)


def gather_results(calls: Iterable[_T]) -> List[Union[_T, BaseException]]:
    """The outcome of each call, made one after another on the client's one connection (so it stays
    usable from one thread); the first error is raised at once and no later call is made."""
    return list(calls)


def wait_in_constructor(start: Callable[[], None]) -> None:
    """Wait for the server as a blocking client that is not lazy does: in its constructor."""
    start()


def wait_on_enter(start: Callable[[], None]) -> None:
    """Nothing: a blocking client that is not lazy waited for its server in its constructor."""
