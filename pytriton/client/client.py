# Generated from pytriton/client/asyncio_client.py by build_backend/unasync.py: edit that file, not this one.
"""The clients of one model served by Triton, for asyncio and for blocking code, written once.

The first step of a request. :class:`ModelClient` owns one
:class:`~pytriton.client.core.TritonCore` (one ``tritonclient`` client) and adds what
users need on top of it: lazy waiting for the server and model, positional or named inputs, and
the batch axis for ``infer_sample`` (the last two as pure functions of ``pytriton.client.codec``);
arguments are checked by ``pytriton.client._args``, errors translated by
``pytriton.client._errors``, and large tensors may travel through shared memory
(``pytriton.client.shm``). ``FuturesModelClient`` (``pytriton.client.futures``) runs one
blocking client per worker thread.

:class:`ModelClientBase` holds what the one-response and the streaming clients share:
arguments, core, readiness wait and model configuration; each refuses the kind of model it
cannot serve when the configuration is read.

The asyncio module is the source; ``build_backend/unasync.py`` writes the blocking one from it
(``async`` and ``await`` dropped, names mapped, the few lines that differ by design marked as
its directives say), so the two cannot drift apart.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Mapping
from types import ModuleType
from typing import Any, Dict, TypeVar

import numpy as np
import tritonclient.grpc
import tritonclient.http

from pytriton.client._args import (
    client_args,
    clone_kwargs,
    load_args,
    pool_arg,
    timeout_arg,
)
from pytriton.client.codec import (
    batch_request,
    chunked_request,
    concat_batches,
    first_error_raised,
    sample_request,
    sample_response,
)
from pytriton.client.core import TritonCore, create_core
from pytriton.client.exceptions import PyTritonClientClosedError, PyTritonClientValueError
from pytriton.client.infer_calls import InferCall, InferCalls, call_priority
from pytriton.client.lost import Lookout, RequestIds, is_relayed
from pytriton.client.model_config import ClientModelConfig, check_decoupled
from pytriton.client.shm import ShmTransport
from pytriton.client.shm_regions import ShmMode, shm_arg
from pytriton.client.utils import TritonSyncClient
from pytriton.client.utils import create_client_from_url as _create_client_from_url
from pytriton.client.waits import wait_until_ready, wait_until_server_ready

_Client = TypeVar("_Client", bound="ModelClientBase")
_TritonClient = TritonSyncClient
_Outputs = Dict[str, np.ndarray]


def _budget(timeout_s: float | None) -> str:
    """Which setting a wait's time comes from, as its notices name it: what the caller passed."""
    return "init_timeout_s" if timeout_s is None else "timeout_s"


class ModelClientBase:
    """What every client of one model shares; see :class:`ModelClient`.

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
        shared_memory: ShmMode = False,
        priority: int = 0,
    ) -> None:
        """Create a client; with ``lazy_init`` nothing touches the network until the first request.

        Args:
            url: ``host``, ``host:port``, ``http://host[:port]`` or ``grpc://host[:port]``;
                without a scheme HTTP is used, without a port 8000 (HTTP) or 8001 (gRPC).
            model_name: the model's name on the server.
            model_version: a version number, or ``None`` for the server's choice.
            lazy_init: when False, wait for the server and model (and read the model
                configuration) at once, so a missing server fails there: in the constructor of
                a blocking client; for an asyncio client, when its context is entered (a
                constructor cannot await).
            init_timeout_s: the longest to wait for the server and model to be ready
                (default 300 s).
            inference_timeout_s: the longest to wait for an inference answer (default 60 s).
            model_config: the model's configuration if already known; it is then not fetched.
            ensure_model_is_ready: wait for the server and model to be ready before the first
                request; when False, the first request goes out at once.
            access_token: for a server that restricts its APIs: sent with every call as header
                ``triton-access-token`` (HTTP) or ``triton-grpc-protocol-triton-access-token`` (gRPC).
            shared_memory: pass tensors through Triton's system shared memory instead of the
                socket (one-response clients only): ``"auto"`` for tensors of 64 KiB and more when
                the server runs on this host, falling back to the socket (one log line) when the
                server refuses; True for every tensor it can, raising when refused; False (the
                default) never. Needs the server's ``access_token`` on a pytriton server.
            priority: the priority level of this client's requests in the model's dynamic batcher
                (``DynamicBatcher(priority_levels=...)``; 1 is the highest), unless a call gives its
                own; 0 (the default) for the model's ``default_priority_level``. A level the model
                does not have is refused when a request is made.

        Raises:
            PyTritonClientInvalidUrlError: the URL is not understood.
            PyTritonClientValueError: another argument is wrong.
            PyTritonClientTimeoutError: ``lazy_init=False`` and not ready within ``init_timeout_s``.
            PyTritonClientDecoupledMismatchError: ``lazy_init=False`` and the model is decoupled
                (for a one-response client) or not (for a streaming client).
        """
        self._args = client_args(
            url,
            model_name,
            model_version,
            init_timeout_s=init_timeout_s,
            inference_timeout_s=inference_timeout_s,
            model_config=model_config,
            access_token=access_token,
            priority=priority,
        )
        self._lazy_init = lazy_init
        self._model_config = model_config
        self._given_config = model_config  # kept across a load_model, which drops one read from the server
        self._ready_checked = not ensure_model_is_ready
        self._init_lock = threading.Lock()
        self._request_ids = RequestIds()
        self._lookout = Lookout(model_name)
        self._closed = False
        choice = shm_arg(shared_memory, self._args.url.hostname)
        if self.streaming and choice.mode is not False:
            raise PyTritonClientValueError("shared_memory is for the one-response clients; streams use the socket")
        self._core: TritonCore = create_core(
            self._args.url, self._args.inference_timeout_s, self._args.access_token
        )
        self._transport = ShmTransport(self._core, choice, model_name)
        if not lazy_init:
            try:
                self._initialized_config()
            except BaseException:
                self.close()
                raise

    @classmethod
    def from_existing_client(cls: type[_Client], existing_client: Any) -> _Client:
        """A new client of this class for the model of ``existing_client``, without a second wait.

        For one client per thread or task: the new client has the same address, model,
        version, timeouts, access token and ``shared_memory`` (a streaming client: none), and
        takes over the configuration the existing one already read, so its first request goes
        out at once. Each client has its own connection.

        Args:
            existing_client: any client of this package (sync, asyncio or futures).

        Raises:
            PyTritonClientValueError: ``existing_client`` is not a client of this package.
        """
        kwargs = clone_kwargs(existing_client)
        if cls.streaming:
            kwargs.pop("shared_memory", None)  # streams use the socket
        return cls(**kwargs)

    @property
    def model_config(self) -> ClientModelConfig:
        """The model's configuration; the first access waits for the server and model if needed.

        An asyncio client's is a coroutine, to await.

        Raises:
            PyTritonClientDecoupledMismatchError: the model is decoupled and this client is not a
                streaming one, or the other way round.
        """
        return self._initialized_config()

    @property
    def is_batching_supported(self) -> bool:
        """Whether the model batches (``max_batch_size > 0``); waits for the configuration as `model_config` does."""
        return self._batching_supported()

    def _batching_supported(self) -> bool:
        return (self._initialized_config()).max_batch_size > 0

    def get_lib(self) -> ModuleType:
        """The ``tritonclient`` module of this client's protocol: ``tritonclient.grpc`` or
        ``tritonclient.http`` (for an asyncio client, their ``aio`` submodule)."""
        module: ModuleType = tritonclient.grpc if self._args.url.scheme == "grpc" else tritonclient.http
        return module

    def create_client_from_url(self, url: str, network_timeout_s: float | None = None) -> _TritonClient:
        """A new ``tritonclient`` client for ``url``, for calls this client does not offer; the caller closes it.

        An asyncio client gives an ``aio`` client: create it inside the event loop that will use
        it (its HTTP session belongs to that loop), and close it there (``close()`` is a coroutine).

        Args:
            url: an address in any form the clients take; its scheme picks the protocol.
            network_timeout_s: the longest one call may take (for HTTP, the connection and network
                timeouts); ``None`` means this client's ``inference_timeout_s``.

        Raises:
            PyTritonClientInvalidUrlError: ``url`` is not understood.
            PyTritonClientValueError: ``network_timeout_s`` is not a positive number.
        """
        timeout_s = timeout_arg("network_timeout_s", network_timeout_s, self._args.inference_timeout_s)
        return _create_client_from_url(url, network_timeout_s=timeout_s)

    def wait_for_server(self, timeout_s: float | None = None) -> None:
        """Wait until the server is live and ready, whatever the state of the model.

        Args:
            timeout_s: the longest to wait; ``None`` means the client's ``init_timeout_s``.

        Raises:
            PyTritonClientTimeoutError: not ready within ``timeout_s``.
            PyTritonClientClosedError: the client was closed.
        """
        self._check_open()
        wait_until_server_ready(self._core, timeout_arg("timeout_s", timeout_s, self._args.init_timeout_s),
                                            _budget(timeout_s))

    def load_model(
        self, config: str | Mapping[str, Any] | None = None, files: Mapping[str, bytes] | None = None
    ) -> None:
        """Load (or reload) this client's model on the server; returns once it is loaded.

        Uses Triton's model repository API, which a pytriton server restricts by default: give
        the client ``access_token=Triton.get_access_token()``. Waits at most ``init_timeout_s``.
        A configuration this client read before is dropped, so the next request reads the new one.

        Args:
            config: a model configuration (JSON text, or a mapping encoded as JSON) to load
                instead of the repository's.
            files: ``"file:<path>"`` to bytes: a model folder to load instead of the repository's
                (``config`` is then required).

        Raises:
            PyTritonClientValueError: ``config`` or ``files`` is malformed.
            PyTritonClientInferenceServerError: the server refused or failed the load (a missing
                or wrong access token included).
            PyTritonClientTimeoutError: the load did not finish within ``init_timeout_s``.
            PyTritonClientClosedError: the client was closed.
        """
        self._check_open()
        load = load_args(config, files)
        try:
            self._core.load_model(self._args.model_name, load, timeout_s=self._args.init_timeout_s)
        finally:
            self._forget_config()

    def unload_model(self) -> None:
        """Unload this client's model from the server (Triton finishes unloading in the background).

        Needs the access token as :meth:`load_model` does. Requests sent afterwards fail until
        the model is loaded again.

        Raises:
            PyTritonClientInferenceServerError: the server refused the unload.
            PyTritonClientClosedError: the client was closed.
        """
        self._check_open()
        try:
            self._core.unload_model(self._args.model_name)
        finally:
            self._forget_config()

    def wait_for_model(self, timeout_s: float | None = None) -> None:
        """Wait until the server and the model are ready.

        Args:
            timeout_s: the longest to wait; ``None`` means the client's ``init_timeout_s``.

        Raises:
            PyTritonClientTimeoutError: not ready within ``timeout_s``.
            PyTritonClientClosedError: the client was closed.
        """
        self._check_open()
        budget = _budget(timeout_s)
        timeout_s = timeout_arg("timeout_s", timeout_s, self._args.init_timeout_s)
        wait_until_ready(self._core, self._args.model_name, self._args.model_version, timeout_s,
                                     budget=budget)
        self._ready_checked = True

    def close(self) -> None:
        """Close the connections; later calls raise :class:`PyTritonClientClosedError`. Idempotent."""
        if not self._closed:
            self._closed = True
            self._transport.close()
            self._core.close()

    def __enter__(self: _Client) -> _Client:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            name, url = self._args.model_name, self._args.url
            raise PyTritonClientClosedError(f"The {type(self).__name__} of model {name!r} at {url} is closed")

    def _forget_config(self) -> None:
        # A configuration read from the server may have changed with the load; one the user gave stays.
        self._model_config = self._given_config

    def _read_config(self, timeout_s: float) -> ClientModelConfig:
        """The model's configuration as the server has it now (not the one kept)."""
        return self._core.get_model_config(self._args.model_name, self._args.model_version, timeout_s=timeout_s)

    def _initialized_config(self) -> ClientModelConfig:
        self._check_open()
        if self._model_config is not None and self._ready_checked:
            return check_decoupled(self._model_config, self.streaming)
        with self._init_lock:  # concurrent first requests wait once, together
            deadline = time.monotonic() + self._args.init_timeout_s
            if not self._ready_checked:
                wait_until_ready(
                    self._core, self._args.model_name, self._args.model_version, self._args.init_timeout_s,
                    unknown_fails=True,
                )
                self._ready_checked = True
            if self._model_config is None:
                # What is left of the init time bounds the fetch too; never below a small floor, as
                # a ready server answers it in milliseconds.
                left = max(deadline - time.monotonic(), 0.5)
                self._model_config = self._core.get_model_config(
                    self._args.model_name, self._args.model_version, timeout_s=left
                )
        return check_decoupled(self._model_config, self.streaming)


class ModelClient(ModelClientBase, InferCalls[_Outputs]):
    """Client of one model on a Triton server, over HTTP or gRPC.

    An asyncio client serves many tasks of one event loop at once: their requests run
    concurrently over its connection pool (HTTP) or channel (gRPC); use it from one event loop
    only. A blocking client serves one request at a time and is not thread safe: use one per
    thread, or :class:`~pytriton.client.futures.FuturesModelClient`. For a decoupled model (any
    number of responses per request) use
    :class:`~pytriton.client.streaming.DecoupledModelClient`.

    Example:
        >>> with ModelClient("grpc://localhost", "Linear") as client:  # doctest: +SKIP
        ...     outputs = client.infer_batch(np.zeros((4, 2), dtype=np.float32))
    """

    def _request(self, call: InferCall) -> dict[str, np.ndarray]:
        config = self._initialized_config()
        if not call.sample:
            inputs = batch_request(config, call.inputs, call.named_inputs)
            return self._infer(inputs, call.parameters, call.headers, call.sequence, call.priority)
        inputs = sample_request(config, call.inputs, call.named_inputs)
        return sample_response(config, self._infer(inputs, call.parameters, call.headers, call.sequence,
                                                         call.priority))

    def infer_batch_chunked(
        self,
        *inputs: np.ndarray,
        chunk_size: int | None = None,
        parameters: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        priority: int | None = None,
        **named_inputs: np.ndarray,
    ) -> dict[str, np.ndarray]:
        """Run a batch of any size: split along the batch axis, the chunks sent, their outputs joined in order.

        The way to send more samples than the model's ``max_batch_size`` (Triton refuses such a
        request). An asyncio client sends every chunk at once; if one fails, its error is raised
        once all are done. A blocking client sends one chunk after another on its connection (so
        it stays usable from one thread), and none after a chunk that failed;
        :class:`~pytriton.client.futures.FuturesModelClient` sends them concurrently from
        blocking code.

        Args:
            *inputs: arrays in the order of the model's inputs, all with the same first axis.
            chunk_size: samples per request; ``None`` for the model's ``max_batch_size``.
            parameters: custom request parameters, sent with every chunk.
            headers: extra HTTP headers or gRPC metadata, sent with every chunk.
            priority: the priority level of every chunk, as for ``infer_batch``.
            **named_inputs: arrays by input name (not together with positional ones).

        Returns:
            The outputs of the whole batch, in the order of the inputs.

        Raises:
            PyTritonClientModelDoesntSupportBatchingError: the model does not batch.
            PyTritonClientValueError: the inputs disagree on the batch size, or a wrong argument.
            PyTritonClientError: the error of the first chunk that failed.
        """
        pool_arg("chunk_size", chunk_size, 1)
        level = call_priority(priority, named_inputs)
        config = self._initialized_config()
        sent = (self._infer(chunk, parameters, headers, None, level)
                for chunk in chunked_request(config, inputs, named_inputs, chunk_size))
        results = list(sent)
        return concat_batches(first_error_raised(results))

    def _infer(
        self,
        inputs: dict[str, np.ndarray],
        parameters: Mapping[str, Any] | None,
        headers: Mapping[str, str] | None,
        sequence: Mapping[str, Any] | None = None,
        priority: int | None = None,
    ) -> dict[str, np.ndarray]:
        self._check_open()
        request_id = self._request_ids()
        look = None
        if self._model_config is not None and is_relayed(self._model_config):
            look = functools.partial(self._lookout.check, request_id, self._read_config)
        request = self._args.request(inputs, parameters, headers, request_id, sequence, priority, self._model_config)
        return self._transport.infer(request, self._model_config, look)
