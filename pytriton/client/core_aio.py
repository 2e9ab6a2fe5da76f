"""The asyncio twin of :mod:`pytriton.client.core`, over ``tritonclient.http.aio`` and ``tritonclient.grpc.aio``.

The client step of a request for :class:`~pytriton.client.asyncio_client.AsyncioModelClient`.
Everything but the I/O is shared with the blocking core: the headers carrying the access token
(``pytriton.client._args``), the codec, the parsing of the model configuration, the error
translation (``translate_errors`` is a plain context manager, so it wraps ``await`` as well),
and the readiness wait (``pytriton.client.waits_aio``, from which the blocking one is
generated). Its ``infer`` watches a relayed request for a lost instance as the blocking core's
does (``pytriton.client.lost``). Both ``aio`` clients bound a call the same way:
``asyncio.wait_for`` with the call's own limit, so one protocol cannot drift from the other.

The ``tritonclient`` client is created on the first call, inside the running event loop:
``aiohttp`` sessions and ``grpc.aio`` channels belong to the loop that creates them. Streams of
decoupled models go through an :class:`~pytriton.client.core_stream_aio.AsyncStreamOpener`,
which keeps its own channel or session for them.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import numpy as np
import tritonclient.grpc
import tritonclient.grpc.aio
import tritonclient.http
import tritonclient.http.aio

from pytriton.access_token import auth_headers
from pytriton.client import _errors as errors
from pytriton.client._args import ModelLoad, with_auth
from pytriton.client.codec import from_infer_result, infer_call, with_deadline
from pytriton.client.core_request import CoreRequest
from pytriton.client.core_stream_aio import AsyncResponseStream, AsyncStreamOpener
from pytriton.client.lost import watched
from pytriton.client.model_config import ClientModelConfig, parse_model_config
from pytriton.client.readiness import presence_from_error, ready_names
from pytriton.client.url import TritonUrl, parse_url

_T = TypeVar("_T")


class AsyncTritonCore:
    """Readiness, model configuration and inference for one server, awaited, errors translated.

    Unlike the blocking core, one instance may serve many concurrent tasks of its event loop
    (``aiohttp`` pools connections, a gRPC channel multiplexes calls).
    """

    def __init__(self, url: TritonUrl, default_timeout_s: float, access_token: str | None = None) -> None:
        """Prepare a core; nothing is created before the first call.

        Args:
            url: the server's address; its scheme picks ``tritonclient.http.aio`` or ``tritonclient.grpc.aio``.
            default_timeout_s: the time limit of calls that give none (the inference timeout).
            access_token: sent with every call, for servers that restrict their APIs.
        """
        self.url = url
        self.default_timeout_s = default_timeout_s
        self._auth = auth_headers(url.scheme, access_token)
        self._grpc = url.scheme == "grpc"
        self._client: Any = None
        self._streams = AsyncStreamOpener(url, self._auth)

    async def is_server_live(self, timeout_s: float | None = None) -> bool:
        """Whether the server process answers its liveness endpoint."""
        live = await self._call(errors.READY_ACTION, timeout_s, lambda client: client.is_server_live(**self._kw()))
        return bool(live)

    async def load_model(self, model_name: str, load: ModelLoad, timeout_s: float | None = None) -> None:
        """See :meth:`pytriton.client.core.TritonCore.load_model`."""
        await self._call(errors.LOAD_ACTION, timeout_s, lambda client: client.load_model(
            model_name, config=load.config, files=load.files, **self._kw()))

    async def unload_model(self, model_name: str, timeout_s: float | None = None) -> None:
        """See :meth:`pytriton.client.core.TritonCore.unload_model`."""
        await self._call(errors.UNLOAD_ACTION, timeout_s, lambda client: client.unload_model(model_name, **self._kw()))

    async def is_server_ready(self, timeout_s: float | None = None) -> bool:
        """Whether the server accepts inference."""
        ready = await self._call(errors.READY_ACTION, timeout_s, lambda client: client.is_server_ready(**self._kw()))
        return bool(ready)

    async def is_model_ready(self, model_name: str, model_version: str = "", timeout_s: float | None = None) -> bool:
        """Whether the model (and version, ``""`` for the server's choice) is loaded and ready."""
        ready = await self._call(errors.READY_ACTION, timeout_s,
                                 lambda client: client.is_model_ready(model_name, model_version, **self._kw()))
        return bool(ready)

    async def model_presence(self, model_name: str, timeout_s: float | None = None) -> bool | None:
        """See :meth:`pytriton.client.core.TritonCore.model_presence`."""
        timeout_s = self.default_timeout_s if timeout_s is None else timeout_s
        try:
            await asyncio.wait_for(self._connection().get_model_metadata(model_name, **self._kw()), timeout_s)
        except Exception as exc:  # noqa: BLE001 - any failure is read for what it says, else "unknown"
            return presence_from_error(exc)
        return True

    async def served_models(self, timeout_s: float | None = None) -> list[str] | None:
        """See :meth:`pytriton.client.core.TritonCore.served_models`."""
        timeout_s = self.default_timeout_s if timeout_s is None else timeout_s
        extra = {"as_json": True} if self._grpc else {}
        try:
            index = await asyncio.wait_for(
                self._connection().get_model_repository_index(**self._kw(), **extra), timeout_s
            )
        except Exception:  # noqa: BLE001 - only a hint for an error message
            return None
        return ready_names(index)

    async def get_model_config(
        self, model_name: str, model_version: str = "", timeout_s: float | None = None
    ) -> ClientModelConfig:
        """The model's configuration as the server has it."""
        extra = {"as_json": True} if self._grpc else {}
        raw = await self._call(
            errors.CONFIG_ACTION,
            timeout_s,
            lambda client: client.get_model_config(model_name, model_version, **self._kw(), **extra),
        )
        return parse_model_config(raw)

    async def infer(
        self, request: CoreRequest, look: Callable[[], Awaitable[None]] | None = None
    ) -> dict[str, np.ndarray]:
        """Run one inference request; see :meth:`pytriton.client.core.TritonCore.infer`.

        `look` (for a relayed model) is awaited between slices of the wait (`pytriton.client.lost.watched`).
        """
        protocol = tritonclient.grpc if self._grpc else tritonclient.http
        limit_s = self.default_timeout_s if request.timeout_s is None else request.timeout_s

        async def call(client: Any) -> dict[str, np.ndarray]:
            sent = dataclasses.replace(request, parameters=with_deadline(request.parameters, limit_s, time.time()),
                                       headers=with_auth(self._auth, request.headers), timeout_s=limit_s)
            args, keywords = infer_call(protocol, sent)
            return from_infer_result(await client.infer(*args, **keywords), request.shared)

        if look is None:
            return await self._call(errors.INFER_ACTION, limit_s, call)
        return await watched(self._call(errors.INFER_ACTION, limit_s, call), look, limit_s)

    async def register_region(self, name: str, key: str, byte_size: int, timeout_s: float | None = None) -> None:
        """See :meth:`pytriton.client.core.TritonCore.register_region`."""
        await self._call(errors.SHM_ACTION, timeout_s, lambda client: client.register_system_shared_memory(
            name, key, byte_size, **self._kw()))

    async def unregister_region(self, name: str, timeout_s: float | None = None) -> None:
        """See :meth:`pytriton.client.core.TritonCore.unregister_region`."""
        await self._call(errors.SHM_ACTION, timeout_s,
                         lambda client: client.unregister_system_shared_memory(name, **self._kw()))

    async def open_stream(self, request: CoreRequest, config: ClientModelConfig) -> AsyncResponseStream:
        """Send one request to a decoupled model; see :meth:`pytriton.client.core.TritonCore.open_stream`."""
        return await self._streams.open(dataclasses.replace(
            request,
            parameters=dict(request.parameters) if request.parameters else None,
            timeout_s=self.default_timeout_s if request.timeout_s is None else request.timeout_s,
        ), config)

    async def close(self) -> None:
        """Close the sessions or channels; the core is unusable afterwards."""
        client, self._client = self._client, None
        if client is not None:
            await client.close()
        await self._streams.close()

    def _kw(self) -> dict[str, Any]:
        return {"headers": with_auth(self._auth, None)}

    def _connection(self) -> Any:
        if self._client is None:
            # The session's own limit only backs up asyncio.wait_for, which bounds each call.
            self._client = new_aio_client(self.url, self.default_timeout_s)
        return self._client

    async def _call(self, action: str, timeout_s: float | None, call: Callable[[Any], Awaitable[_T]]) -> _T:
        timeout_s = self.default_timeout_s if timeout_s is None else timeout_s
        with errors.translate_errors(action, str(self.url), timeout_s):
            return await asyncio.wait_for(call(self._connection()), timeout_s)


def create_async_core(url: TritonUrl, default_timeout_s: float, access_token: str | None = None) -> AsyncTritonCore:
    """The asyncio core for `url` (one class serves both protocols); named as the blocking `create_core`."""
    return AsyncTritonCore(url, default_timeout_s, access_token)


def create_aio_client_from_url(url: str, network_timeout_s: float) -> Any:
    """`pytriton.client.utils.create_client_from_url` for asyncio code: a ``tritonclient`` ``aio``
    client for ``url``; create it inside the event loop that uses it.

    Raises:
        PyTritonClientInvalidUrlError: ``url`` is not understood.
    """
    return new_aio_client(parse_url(url), network_timeout_s)


def new_aio_client(url: TritonUrl, timeout_s: float) -> Any:
    """A ``tritonclient.http.aio`` or ``tritonclient.grpc.aio`` client for ``url``; create it inside the event loop.

    Args:
        url: the server's address; its scheme picks the module.
        timeout_s: the HTTP session's connection and request limit (``conn_timeout``); a gRPC
            ``aio`` client takes its limits per call.
    """
    if url.scheme == "grpc":
        return tritonclient.grpc.aio.InferenceServerClient(url.address)
    return tritonclient.http.aio.InferenceServerClient(url.address, conn_timeout=timeout_s)
