"""The asyncio side's I/O: what the asyncio clients do differently from the blocking ones.

The clients' logic is written once, for asyncio (``asyncio_client``, ``core_aio``, ``waits_aio``,
``shm_aio``), and ``build_backend/unasync.py`` writes the blocking modules from it by renaming
only (``async`` and ``await`` dropped, ``AsyncConnection`` -> ``Connection``, ``io_aio`` ->
``io_sync``, ...). Where the two sides differ by design, the difference lives here and in
:mod:`pytriton.client.io_sync`, which has the same names with the blocking behaviour:

* the ``tritonclient`` client of a core, how a call is bounded in time and how a request to a
  relayed model is watched (:class:`AsyncConnection`);
* a lock, a sleep, and running several calls (:class:`AsyncLock`, :func:`sleep`,
  :func:`gather_results`);
* when a client that is not lazy waits for its server (:func:`wait_in_constructor`,
  :func:`wait_on_enter`): a constructor cannot await.
"""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable, Dict, Iterable, List, Optional, TypeVar, Union

import tritonclient.grpc
import tritonclient.grpc.aio
import tritonclient.http
import tritonclient.http.aio

from pytriton.client._args import timeout_arg
from pytriton.client.codec import infer_call
from pytriton.client.core_request import CoreRequest
from pytriton.client.lost import watched
from pytriton.client.url import TritonUrl, parse_url

__all__ = [
    "DEFAULT_NETWORK_TIMEOUT_S",
    "AsyncCall",
    "AsyncConnection",
    "AsyncLock",
    "AsyncLook",
    "AsyncTritonClient",
    "create_client_from_url",
    "gather_results",
    "new_client",
    "sleep",
    "wait_in_constructor",
    "wait_on_enter",
]

_T = TypeVar("_T")

AsyncTritonClient = Union[tritonclient.grpc.aio.InferenceServerClient, tritonclient.http.aio.InferenceServerClient]
"""A ``tritonclient`` client of the asyncio side."""
AsyncLook = Callable[[], Awaitable[None]]
"""Looks for a notice of a request's loss between slices of its wait; raises to end it (`pytriton.client.lost`)."""
AsyncCall = Callable[[Any, Dict[str, Any]], Awaitable[_T]]
"""A call of a ``tritonclient`` client: it gets the client and the call's deadline keywords."""

DEFAULT_NETWORK_TIMEOUT_S = 60.0
"""The time limit of a client's calls when `create_client_from_url` is given none."""


def new_client(url: TritonUrl, timeout_s: float) -> AsyncTritonClient:
    """A ``tritonclient`` ``aio`` client for ``url`` (its scheme picks the module); create it in the loop that uses it.

    Args:
        url: the server's address.
        timeout_s: an HTTP client's connection timeout (aiohttp's session); a gRPC client takes
            its limits per call.
    """
    if url.scheme == "grpc":
        return tritonclient.grpc.aio.InferenceServerClient(url.address)
    return tritonclient.http.aio.InferenceServerClient(url.address, conn_timeout=timeout_s)


def create_client_from_url(url: str, network_timeout_s: Optional[float] = None) -> AsyncTritonClient:
    """`pytriton.client.utils.create_client_from_url` for asyncio code: a ``tritonclient`` ``aio``
    client for ``url``; create it inside the event loop that uses it.

    Raises:
        PyTritonClientInvalidUrlError: ``url`` is not understood.
        PyTritonClientValueError: ``network_timeout_s`` is not a positive number.
    """
    parsed = parse_url(url)
    return new_client(parsed, timeout_arg("network_timeout_s", network_timeout_s, DEFAULT_NETWORK_TIMEOUT_S))


class AsyncConnection:
    """A core's ``tritonclient`` client of one server, made on the first call inside the running
    event loop (``aiohttp`` sessions and ``grpc.aio`` channels belong to the loop that makes them).

    Serves many concurrent tasks of its loop: ``aiohttp`` pools connections, a gRPC channel
    multiplexes calls.

    Args:
        url: the server's address; its scheme picks the protocol.
        default_timeout_s: the time limit of the HTTP client's connections.
    """

    def __init__(self, url: TritonUrl, default_timeout_s: float) -> None:
        self.url = url
        self.default_timeout_s = default_timeout_s
        self._grpc = url.scheme == "grpc"
        self._client: Any = None

    def client(self) -> Any:
        """The ``tritonclient`` client (made now if it is not yet)."""
        if self._client is None:
            self._client = new_client(self.url, self.default_timeout_s)
        return self._client

    async def call(self, timeout_s: float, call: AsyncCall[_T]) -> _T:
        """Make `call` within `timeout_s`, errors untranslated: a gRPC call also carries the limit
        as its deadline (so the server drops it too); ``asyncio.wait_for`` bounds either."""
        deadline = {"client_timeout": timeout_s} if self._grpc else {}
        return await asyncio.wait_for(call(self.client(), deadline), timeout_s)

    async def infer_watched(self, request: CoreRequest, look: AsyncLook) -> Any:
        """Send `request` (headers, parameters and ``timeout_s`` as sent) and wait for its answer,
        awaiting `look` between slices of the wait (`pytriton.client.lost.watched`); when `look`
        raises, the call is cancelled and the error goes on. Errors come out untranslated.

        Returns:
            The protocol's ``InferResult``.
        """
        assert request.timeout_s is not None
        args, keywords = infer_call(tritonclient.grpc if self._grpc else tritonclient.http, request)
        answer = self.call(request.timeout_s, lambda client, deadline: client.infer(*args, **keywords, **deadline))
        return await watched(answer, look, request.timeout_s)

    async def close(self) -> None:
        """Close the client; a later call makes a new one."""
        client, self._client = self._client, None
        if client is not None:
            await client.close()


class AsyncLock:
    """A lock for the tasks of one event loop, made on first use: before Python 3.10 an
    ``asyncio.Lock`` binds the loop it is made in, and a client may be made outside any loop."""

    def __init__(self) -> None:
        self._lock: Optional[asyncio.Lock] = None

    async def __aenter__(self) -> None:
        if self._lock is None:
            self._lock = asyncio.Lock()
        await self._lock.acquire()

    async def __aexit__(self, *exc_info: object) -> None:
        assert self._lock is not None
        self._lock.release()


async def sleep(seconds: float) -> None:
    """Wait `seconds`, letting the loop's other tasks run."""
    await asyncio.sleep(seconds)


async def gather_results(calls: Iterable[Awaitable[_T]]) -> List[Union[_T, BaseException]]:
    """The outcome of each call, in order: all run at once, and each one's error is returned in
    its place (every call has finished when this returns)."""
    return list(await asyncio.gather(*calls, return_exceptions=True))


def wait_in_constructor(start: Callable[[], Awaitable[None]]) -> None:
    """Nothing: a constructor cannot await, so an asyncio client that is not lazy waits for its
    server when its context is entered (`wait_on_enter`)."""


async def wait_on_enter(start: Callable[[], Awaitable[None]]) -> None:
    """Wait for the server as a client that is not lazy does: when its context is entered."""
    await start()
