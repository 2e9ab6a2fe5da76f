"""The asyncio client of models served by Triton.

The client step of a request, for code that runs in an event loop. :class:`AsyncioModelClient`
is :class:`~pytriton.client.client.ModelClient` with ``await``: the same arguments (checked by
``pytriton.client._args``), the same input mapping and batch axis handling (pure functions of
``pytriton.client.codec``), the same errors (translated by ``pytriton.client._errors``), over
:class:`~pytriton.client.core_aio.AsyncTritonCore` instead of the blocking core.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Awaitable, Mapping
from types import ModuleType
from typing import Any, TypeVar

import numpy as np
import tritonclient.grpc.aio
import tritonclient.http.aio

from pytriton.client._args import (
    client_args,
    clone_kwargs,
    load_args,
    mapping_arg,
    pool_arg,
    sequence_args,
    timeout_arg,
)
from pytriton.client.codec import batch_request, concat_batches, sample_request, sample_response, split_batch
from pytriton.client.core_aio import (
    AsyncTritonCore,
    new_aio_client,
    wait_until_ready_async,
    wait_until_server_ready_async,
)
from pytriton.client.exceptions import PyTritonClientClosedError
from pytriton.client.lost import Lookout, RequestIds, is_relayed, watched
from pytriton.client.model_config import ClientModelConfig, check_decoupled
from pytriton.client.url import parse_url

_Client = TypeVar("_Client", bound="AsyncioModelClientBase")


class AsyncioModelClientBase:
    """What every asyncio client of one model shares; see :class:`AsyncioModelClient`.

    Subclasses set :attr:`streaming`: whether they serve decoupled models (and only those).
    """

    #: True for the streaming client, which needs a decoupled model; False for one-response clients.
    streaming = False

    def __init__(
        self,
        url: str,
        model_name: str,
        model_version: str | None = None,
        *,
        lazy_init: bool = True,
        init_timeout_s: float | None = None,
        inference_timeout_s: float | None = None,
        model_config: ClientModelConfig | None = None,
        ensure_model_is_ready: bool = True,
        access_token: str | None = None,
    ) -> None:
        """Create a client; nothing touches the network here (a constructor cannot await).

        Args:
            url: as for :class:`~pytriton.client.client.ModelClient`.
            model_name: the model's name on the server.
            model_version: a version number, or ``None`` for the server's choice.
            lazy_init: when False, ``async with`` waits for the server and model (and reads the
                model configuration) on entry, so a missing server fails there.
            init_timeout_s: the longest to wait for the server and model (default 300 s).
            inference_timeout_s: the longest to wait for an inference answer (default 60 s).
            model_config: the model's configuration if already known; it is then not fetched.
            ensure_model_is_ready: wait for the server and model before the first request.
            access_token: as for :class:`~pytriton.client.client.ModelClient`.

        Raises:
            PyTritonClientInvalidUrlError: the URL is not understood.
            PyTritonClientValueError: another argument is wrong.
        """
        self._args = client_args(
            url,
            model_name,
            model_version,
            init_timeout_s=init_timeout_s,
            inference_timeout_s=inference_timeout_s,
            model_config=model_config,
            access_token=access_token,
        )
        self._lazy_init = lazy_init
        self._model_config = model_config
        self._given_config = model_config  # kept across a load_model, which drops one read from the server
        self._ready_checked = not ensure_model_is_ready
        self._init_lock: asyncio.Lock | None = None  # made in the loop: before 3.10 a Lock binds one
        self._request_ids = RequestIds()
        self._lookout = Lookout(model_name)
        self._closed = False
        self._core = AsyncTritonCore(self._args.url, self._args.inference_timeout_s, self._args.access_token)

    @classmethod
    def from_existing_client(cls: type[_Client], existing_client: Any) -> _Client:
        """A new client of this class for the model of ``existing_client``, without a second wait.

        The same address, model, version, timeouts and access token; a configuration the
        existing client already read is taken over (see ``ModelClient.from_existing_client``).

        Args:
            existing_client: any client of this package (sync, asyncio or futures).

        Raises:
            PyTritonClientValueError: ``existing_client`` is not a client of this package.
        """
        return cls(**clone_kwargs(existing_client))

    def get_lib(self) -> ModuleType:
        """The ``tritonclient`` module of this protocol's asyncio client: ``tritonclient.grpc.aio`` or ``.http.aio``."""
        module: ModuleType = tritonclient.grpc.aio if self._args.url.scheme == "grpc" else tritonclient.http.aio
        return module

    def create_client_from_url(self, url: str, network_timeout_s: float | None = None) -> Any:
        """A new ``tritonclient`` asyncio client for ``url``, for calls this client does not offer.

        Call it inside the event loop that will use the client (its HTTP session belongs to
        that loop); the caller closes it (``await client.close()``).

        Args:
            url: an address in any form the clients take; its scheme picks the protocol.
            network_timeout_s: the HTTP session's connection and request limit; ``None`` means
                this client's ``inference_timeout_s`` (gRPC ``aio`` calls take their limits per call).

        Returns:
            A ``tritonclient.http.aio`` or ``tritonclient.grpc.aio`` ``InferenceServerClient``.

        Raises:
            PyTritonClientInvalidUrlError: ``url`` is not understood.
            PyTritonClientValueError: ``network_timeout_s`` is not a positive number.
        """
        timeout_s = timeout_arg("network_timeout_s", network_timeout_s, self._args.inference_timeout_s)
        return new_aio_client(parse_url(url), timeout_s)

    @property
    def model_config(self) -> Awaitable[ClientModelConfig]:
        """The model's configuration, to be awaited (``await client.model_config``).

        The first await waits for the server and model if needed; later ones return at once.
        """
        return self._initialized_config()

    @property
    def is_batching_supported(self) -> Awaitable[bool]:
        """Whether the model batches (``max_batch_size`` > 0), to be awaited, as `model_config` is."""
        return self._batching_supported()

    async def _batching_supported(self) -> bool:
        return (await self._initialized_config()).max_batch_size > 0

    async def wait_for_server(self, timeout_s: float | None = None) -> None:
        """Wait until the server is live and ready, whatever the state of the model.

        Args:
            timeout_s: the longest to wait; ``None`` means the client's ``init_timeout_s``.

        Raises:
            PyTritonClientTimeoutError: not ready within ``timeout_s``.
            PyTritonClientClosedError: the client was closed.
        """
        self._check_open()
        await wait_until_server_ready_async(self._core, timeout_arg("timeout_s", timeout_s, self._args.init_timeout_s))

    async def load_model(
        self, config: str | Mapping[str, Any] | None = None, files: Mapping[str, bytes] | None = None
    ) -> None:
        """Load (or reload) this client's model on the server; see :meth:`ModelClient.load_model
        <pytriton.client.client.ModelClient.load_model>` (the access token, the time limit, the arguments).

        Raises:
            PyTritonClientValueError: ``config`` or ``files`` is malformed.
            PyTritonClientInferenceServerError: the server refused or failed the load.
            PyTritonClientTimeoutError: the load did not finish within ``init_timeout_s``.
            PyTritonClientClosedError: the client was closed.
        """
        self._check_open()
        config_json, files = load_args(config, files)
        try:
            await self._core.load_model(
                self._args.model_name, config=config_json, files=files, timeout_s=self._args.init_timeout_s
            )
        finally:
            self._forget_config()

    async def unload_model(self) -> None:
        """Unload this client's model from the server; see :meth:`ModelClient.unload_model
        <pytriton.client.client.ModelClient.unload_model>`.

        Raises:
            PyTritonClientInferenceServerError: the server refused the unload.
            PyTritonClientClosedError: the client was closed.
        """
        self._check_open()
        try:
            await self._core.unload_model(self._args.model_name)
        finally:
            self._forget_config()

    async def wait_for_model(self, timeout_s: float | None = None) -> None:
        """Wait until the server and the model are ready.

        Args:
            timeout_s: the longest to wait; ``None`` means the client's ``init_timeout_s``.

        Raises:
            PyTritonClientTimeoutError: not ready within ``timeout_s``.
            PyTritonClientClosedError: the client was closed.
        """
        self._check_open()
        timeout_s = timeout_arg("timeout_s", timeout_s, self._args.init_timeout_s)
        await wait_until_ready_async(self._core, self._args.model_name, self._args.model_version, timeout_s)
        self._ready_checked = True

    async def close(self) -> None:
        """Close the connections; later calls raise :class:`PyTritonClientClosedError`. Idempotent."""
        if not self._closed:
            self._closed = True
            await self._core.close()

    async def __aenter__(self: _Client) -> _Client:
        if not self._lazy_init:
            try:
                await self._initialized_config()
            except BaseException:
                await self.close()
                raise
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def _check_open(self) -> None:
        if self._closed:
            args = self._args
            raise PyTritonClientClosedError(f"The asyncio client of model {args.model_name!r} at {args.url} is closed")

    async def _read_config(self, timeout_s: float) -> ClientModelConfig:
        """The model's configuration as the server has it now (not the one kept)."""
        return await self._core.get_model_config(self._args.model_name, self._args.model_version, timeout_s=timeout_s)

    def _forget_config(self) -> None:
        # A configuration read from the server may have changed with the load; one the user gave stays.
        self._model_config = self._given_config

    async def _initialized_config(self) -> ClientModelConfig:
        self._check_open()
        if self._model_config is not None and self._ready_checked:
            return check_decoupled(self._model_config, self.streaming)
        if self._init_lock is None:
            self._init_lock = asyncio.Lock()
        async with self._init_lock:  # concurrent first requests wait once, together
            deadline = time.monotonic() + self._args.init_timeout_s
            if not self._ready_checked:
                await wait_until_ready_async(
                    self._core, self._args.model_name, self._args.model_version, self._args.init_timeout_s,
                    unknown_fails=True,
                )
                self._ready_checked = True
            if self._model_config is None:
                left = max(deadline - time.monotonic(), 0.5)  # as in ModelClient: a ready server answers at once
                self._model_config = await self._core.get_model_config(
                    self._args.model_name, self._args.model_version, timeout_s=left
                )
        return check_decoupled(self._model_config, self.streaming)


class AsyncioModelClient(AsyncioModelClientBase):
    """Asyncio client of one model on a Triton server, over HTTP or gRPC.

    Many tasks of one event loop may share a client: requests run concurrently over its
    connection pool (HTTP) or channel (gRPC). Use it from one event loop only. For a decoupled
    model use :class:`~pytriton.client.streaming_aio.AsyncioDecoupledModelClient`.

    Example:
        >>> async with AsyncioModelClient("grpc://localhost", "Linear") as client:  # doctest: +SKIP
        ...     outputs = await client.infer_batch(np.zeros((4, 2), dtype=np.float32))
    """

    async def infer_sample(
        self,
        *inputs: np.ndarray,
        parameters: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        sequence_id: int | str = 0,
        sequence_start: bool = False,
        sequence_end: bool = False,
        **named_inputs: np.ndarray,
    ) -> dict[str, np.ndarray]:
        """Run inference on one sample, as :meth:`ModelClient.infer_sample` does (same arguments and errors)."""
        config = await self._initialized_config()
        sequence = sequence_args(sequence_id, sequence_start, sequence_end)
        outputs = await self._infer(sample_request(config, inputs, named_inputs), parameters, headers, sequence)
        return sample_response(config, outputs)

    async def infer_batch(
        self,
        *inputs: np.ndarray,
        parameters: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        sequence_id: int | str = 0,
        sequence_start: bool = False,
        sequence_end: bool = False,
        **named_inputs: np.ndarray,
    ) -> dict[str, np.ndarray]:
        """Run inference on a batch, as :meth:`ModelClient.infer_batch` does (same arguments and errors)."""
        config = await self._initialized_config()
        sequence = sequence_args(sequence_id, sequence_start, sequence_end)
        return await self._infer(batch_request(config, inputs, named_inputs), parameters, headers, sequence)

    async def infer_batch_chunked(
        self,
        *inputs: np.ndarray,
        chunk_size: int | None = None,
        parameters: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        **named_inputs: np.ndarray,
    ) -> dict[str, np.ndarray]:
        """Run a batch of any size: split along the batch axis, sent concurrently, joined in order.

        See :meth:`FuturesModelClient.infer_batch_chunked
        <pytriton.client.futures.FuturesModelClient.infer_batch_chunked>`; here every chunk is
        in flight at once. If a chunk fails, its error is raised once all chunks are done.
        """
        pool_arg("chunk_size", chunk_size, 1)
        config = await self._initialized_config()
        chunks = split_batch(batch_request(config, inputs, named_inputs), chunk_size or config.max_batch_size)
        results = await asyncio.gather(
            *(self._infer(chunk, parameters, headers) for chunk in chunks), return_exceptions=True
        )
        for result in results:
            if isinstance(result, BaseException):
                raise result
        return concat_batches(results)  # type: ignore[arg-type]  # no exception left in the list

    async def _infer(
        self,
        inputs: dict[str, np.ndarray],
        parameters: Mapping[str, Any] | None,
        headers: Mapping[str, str] | None,
        sequence: Mapping[str, Any] | None = None,
    ) -> dict[str, np.ndarray]:
        self._check_open()
        request_id = self._request_ids()
        call = self._core.infer(
            self._args.model_name,
            self._args.model_version,
            inputs,
            parameters=mapping_arg("parameters", parameters),
            headers=mapping_arg("headers", headers),
            timeout_s=self._args.inference_timeout_s,
            request_id=request_id,
            sequence=sequence,
        )
        if self._model_config is None or not is_relayed(self._model_config):
            return await call
        look = functools.partial(self._lookout.check_async, request_id, self._read_config)
        return await watched(call, look, self._args.inference_timeout_s)
