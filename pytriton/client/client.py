"""Clients for models served by Triton: synchronous and ``concurrent.futures`` based.

The first step of a request. :class:`ModelClient` owns one :class:`~pytriton.client.core.TritonCore`
(one ``tritonclient`` client) and adds what users need on top of it: lazy waiting for the
server and model, positional or named inputs, and the batch axis for ``infer_sample``.
:class:`FuturesModelClient` runs one ``ModelClient`` per worker thread, because ``tritonclient``
clients must not be shared between threads; it adds no inference logic of its own.
"""

from __future__ import annotations

import concurrent.futures
import itertools
import os
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import numpy as np

from pytriton.client._args import (
    DEFAULT_INFERENCE_TIMEOUT_S,
    DEFAULT_INIT_TIMEOUT_S,
    mapping_arg,
    model_args,
    pool_arg,
    timeout_arg,
)
from pytriton.client.codec import add_batch_axis, map_inputs, strip_batch_axis
from pytriton.client.core import TritonCore, create_core, wait_until_ready
from pytriton.client.exceptions import (
    PyTritonClientClosedError,
    PyTritonClientModelDoesntSupportBatchingError,
    PyTritonClientQueueFullError,
    PyTritonClientValueError,
)
from pytriton.client.model_config import ClientModelConfig
from pytriton.client.url import parse_url

_T = TypeVar("_T")


class ModelClient:
    """Synchronous client of one model on a Triton server, over HTTP or gRPC.

    Not thread safe: use one per thread, or :class:`FuturesModelClient`.

    Example:
        >>> with ModelClient("localhost:8000", "Linear") as client:  # doctest: +SKIP
        ...     outputs = client.infer_batch(np.zeros((4, 2), dtype=np.float32))
    """

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
    ) -> None:
        """Create a client; with ``lazy_init`` nothing touches the network until the first request.

        Args:
            url: ``host``, ``host:port``, ``http://host[:port]`` or ``grpc://host[:port]``;
                without a scheme HTTP is used, without a port 8000 (HTTP) or 8001 (gRPC).
            model_name: the model's name on the server.
            model_version: a version number, or ``None`` for the server's choice.
            lazy_init: when False, wait for the server and model (and read the model
                configuration) here, so a missing server fails at construction.
            init_timeout_s: the longest to wait for the server and model to be ready
                (default 300 s).
            inference_timeout_s: the longest to wait for an inference answer (default 60 s).
            model_config: the model's configuration if already known; it is then not fetched.
            ensure_model_is_ready: wait for the server and model to be ready before the first
                request; when False, the first request goes out at once.

        Raises:
            PyTritonClientInvalidUrlError: the URL is not understood.
            PyTritonClientValueError: another argument is wrong.
            PyTritonClientTimeoutError: ``lazy_init=False`` and not ready within ``init_timeout_s``.
        """
        self._url = parse_url(url)
        self._model_name, self._model_version = model_args(model_name, model_version)
        self._init_timeout_s = timeout_arg("init_timeout_s", init_timeout_s, DEFAULT_INIT_TIMEOUT_S)
        self._inference_timeout_s = timeout_arg("inference_timeout_s", inference_timeout_s, DEFAULT_INFERENCE_TIMEOUT_S)
        if model_config is not None and not isinstance(model_config, ClientModelConfig):
            raise PyTritonClientValueError(
                f"model_config must be a ClientModelConfig or None, got {type(model_config).__name__}"
            )
        self._model_config = model_config
        self._ensure_model_is_ready = ensure_model_is_ready
        self._ready_checked = not ensure_model_is_ready
        self._request_ids = itertools.count()
        self._closed = False
        self._core: TritonCore = create_core(self._url, self._inference_timeout_s)
        if not lazy_init:
            try:
                self._initialized_config()
            except BaseException:
                self.close()
                raise

    @property
    def model_config(self) -> ClientModelConfig:
        """The model's configuration; the first access waits for the server and model if needed."""
        return self._initialized_config()

    def wait_for_model(self, timeout_s: float | None = None) -> None:
        """Wait until the server and the model are ready.

        Args:
            timeout_s: the longest to wait; ``None`` means the client's ``init_timeout_s``.

        Raises:
            PyTritonClientTimeoutError: not ready within ``timeout_s``.
            PyTritonClientClosedError: the client was closed.
        """
        self._check_open()
        timeout_s = timeout_arg("timeout_s", timeout_s, self._init_timeout_s)
        wait_until_ready(self._core, self._model_name, self._model_version, timeout_s)
        self._ready_checked = True

    def infer_sample(
        self,
        *inputs: np.ndarray,
        parameters: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        **named_inputs: np.ndarray,
    ) -> dict[str, np.ndarray]:
        """Run inference on one sample (no batch axis).

        For a batching model the batch axis is added to the inputs and removed from the outputs.

        Args:
            *inputs: arrays in the order of the model's inputs.
            parameters: custom request parameters, passed to the model.
            headers: extra HTTP headers or gRPC metadata.
            **named_inputs: arrays by input name (not together with positional ones).

        Returns:
            Output name to array.

        Raises:
            PyTritonClientValueError: inputs are given both ways, or are not arrays.
            PyTritonClientTimeoutError: no answer within ``inference_timeout_s``.
            PyTritonClientInferenceServerError: the server refused or failed the request.
            PyTritonClientModelUnavailableError: the model is unknown or the server unreachable.
        """
        config = self._initialized_config()
        arrays = map_inputs(config, inputs, named_inputs)
        if not config.batching:
            return self._infer(arrays, parameters, headers)
        return strip_batch_axis(self._infer(add_batch_axis(arrays), parameters, headers))

    def infer_batch(
        self,
        *inputs: np.ndarray,
        parameters: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        **named_inputs: np.ndarray,
    ) -> dict[str, np.ndarray]:
        """Run inference on a batch (the first axis of every input).

        Args:
            *inputs: arrays in the order of the model's inputs.
            parameters: custom request parameters, passed to the model.
            headers: extra HTTP headers or gRPC metadata.
            **named_inputs: arrays by input name (not together with positional ones).

        Returns:
            Output name to array, batch axis included.

        Raises:
            PyTritonClientModelDoesntSupportBatchingError: the model does not batch.
            PyTritonClientValueError, PyTritonClientTimeoutError, PyTritonClientInferenceServerError,
            PyTritonClientModelUnavailableError: as for :meth:`infer_sample`.
        """
        config = self._initialized_config()
        if not config.batching:
            raise PyTritonClientModelDoesntSupportBatchingError(
                f"Model {config.model_name!r} has max_batch_size 0 and does not take batches; use infer_sample"
            )
        return self._infer(map_inputs(config, inputs, named_inputs), parameters, headers)

    def close(self) -> None:
        """Close the connection; later calls raise :class:`PyTritonClientClosedError`. Idempotent."""
        if not self._closed:
            self._closed = True
            self._core.close()

    def __enter__(self) -> ModelClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise PyTritonClientClosedError(f"The client of model {self._model_name!r} at {self._url} is closed")

    def _initialized_config(self) -> ClientModelConfig:
        self._check_open()
        if self._model_config is not None and self._ready_checked:
            return self._model_config
        deadline = time.monotonic() + self._init_timeout_s
        if not self._ready_checked:
            wait_until_ready(self._core, self._model_name, self._model_version, self._init_timeout_s)
            self._ready_checked = True
        if self._model_config is None:
            # What is left of the init time bounds the fetch too; never below a small floor, as
            # a ready server answers it in milliseconds.
            left = max(deadline - time.monotonic(), 0.5)
            self._model_config = self._core.get_model_config(self._model_name, self._model_version, timeout_s=left)
        return self._model_config

    def _infer(
        self,
        inputs: dict[str, np.ndarray],
        parameters: Mapping[str, Any] | None,
        headers: Mapping[str, str] | None,
    ) -> dict[str, np.ndarray]:
        return self._core.infer(
            self._model_name,
            self._model_version,
            inputs,
            parameters=mapping_arg("parameters", parameters),
            headers=mapping_arg("headers", headers),
            timeout_s=self._inference_timeout_s,
            request_id=str(next(self._request_ids)),
        )


def _default_max_workers() -> int:
    # ThreadPoolExecutor's own default, computed here because the queue bound needs the number.
    return min(32, (os.cpu_count() or 1) + 4)


class FuturesModelClient:
    """Client of one model whose calls return :class:`concurrent.futures.Future` objects.

    Requests run on a thread pool; each worker thread has its own :class:`ModelClient` (and so
    its own connection), created on its first request. The first worker to reach the model
    shares the model configuration with the others, so later workers neither wait nor fetch.
    Timeouts (``init_timeout_s``, ``inference_timeout_s``) count from the moment a worker
    starts the request.

    Example:
        >>> with FuturesModelClient("localhost", "Batch2") as client:  # doctest: +SKIP
        ...     future = client.infer_batch(np.zeros((2, 1), dtype=np.int32))
        ...     outputs = future.result()
    """

    def __init__(
        self,
        url: str,
        model_name: str,
        model_version: str | None = None,
        *,
        max_workers: int | None = None,
        max_queue_size: int | None = None,
        non_blocking: bool = False,
        init_timeout_s: float | None = None,
        inference_timeout_s: float | None = None,
    ) -> None:
        """Create the client; no thread or connection starts before the first request.

        Args:
            url: as for :class:`ModelClient`.
            model_name: the model's name on the server.
            model_version: a version number, or ``None`` for the server's choice.
            max_workers: the number of worker threads (requests in flight); ``None`` for
                ``ThreadPoolExecutor``'s default.
            max_queue_size: how many requests may wait for a free worker; ``None`` for no limit.
            non_blocking: when the queue is full, raise :class:`PyTritonClientQueueFullError`
                instead of blocking until a request completes.
            init_timeout_s: as for :class:`ModelClient` (default 300 s).
            inference_timeout_s: as for :class:`ModelClient` (default 60 s).

        Raises:
            PyTritonClientInvalidUrlError: the URL is not understood.
            PyTritonClientValueError: another argument is wrong.
        """
        parse_url(url)  # fail here, not in a worker thread
        model_args(model_name, model_version)
        pool_arg("max_workers", max_workers, 1)
        pool_arg("max_queue_size", max_queue_size, 0)
        self._client_args: dict[str, Any] = {
            "url": url,
            "model_name": model_name,
            "model_version": model_version,
            "init_timeout_s": timeout_arg("init_timeout_s", init_timeout_s, DEFAULT_INIT_TIMEOUT_S),
            "inference_timeout_s": timeout_arg("inference_timeout_s", inference_timeout_s, DEFAULT_INFERENCE_TIMEOUT_S),
        }
        workers = max_workers if max_workers is not None else _default_max_workers()
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=workers, thread_name_prefix="pytriton-client"
        )
        # Counts requests not yet finished: the running ones plus those waiting in the queue.
        self._slots = threading.Semaphore(workers + max_queue_size) if max_queue_size is not None else None
        self._max_queue_size = max_queue_size
        self._non_blocking = non_blocking
        self._local = threading.local()
        self._lock = threading.Lock()
        self._clients: list[ModelClient] = []
        self._shared_config: ClientModelConfig | None = None
        self._closed = False

    def infer_sample(
        self,
        *inputs: np.ndarray,
        parameters: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        **named_inputs: np.ndarray,
    ) -> concurrent.futures.Future[dict[str, np.ndarray]]:
        """Queue :meth:`ModelClient.infer_sample`; the future holds its result or error."""
        return self._submit(
            lambda client: client.infer_sample(*inputs, parameters=parameters, headers=headers, **named_inputs)
        )

    def infer_batch(
        self,
        *inputs: np.ndarray,
        parameters: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        **named_inputs: np.ndarray,
    ) -> concurrent.futures.Future[dict[str, np.ndarray]]:
        """Queue :meth:`ModelClient.infer_batch`; the future holds its result or error."""
        return self._submit(
            lambda client: client.infer_batch(*inputs, parameters=parameters, headers=headers, **named_inputs)
        )

    def model_config(self) -> concurrent.futures.Future[ClientModelConfig]:
        """The model's configuration, as a future (a worker waits for the server and model)."""
        return self._submit(lambda client: client.model_config)

    def close(self, wait: bool = True) -> None:
        """Stop taking requests; later calls raise :class:`PyTritonClientClosedError`. Idempotent.

        Args:
            wait: block until the queued and running requests are done and the connections
                closed; when False, that happens in the background.
        """
        with self._lock:
            if self._closed:
                return
            self._closed = True
        if wait:
            self._shutdown()
        else:
            threading.Thread(target=self._shutdown, name="pytriton-client-close", daemon=True).start()

    def __enter__(self) -> FuturesModelClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _shutdown(self) -> None:
        self._executor.shutdown(wait=True)
        # Workers are gone, so no connection is in use while it is closed.
        with self._lock:
            clients, self._clients = self._clients, []
        for client in clients:
            client.close()

    def _closed_error(self) -> PyTritonClientClosedError:
        return PyTritonClientClosedError(
            f"The futures client of model {self._client_args['model_name']!r} at {self._client_args['url']} is closed"
        )

    def _submit(self, call: Callable[[ModelClient], _T]) -> concurrent.futures.Future[_T]:
        if self._closed:
            raise self._closed_error()
        if self._slots is not None and not self._slots.acquire(blocking=not self._non_blocking):
            raise PyTritonClientQueueFullError(
                f"{self._max_queue_size} request(s) already wait for a worker; retry later or use non_blocking=False"
            )
        try:
            future = self._executor.submit(self._run, call)
        except RuntimeError as exc:  # shut down between the check above and the submit
            if self._slots is not None:
                self._slots.release()
            raise self._closed_error() from exc
        if self._slots is not None:
            slots = self._slots
            future.add_done_callback(lambda _: slots.release())
        return future

    def _run(self, call: Callable[[ModelClient], _T]) -> _T:
        client = self._thread_client()
        result = call(client)
        if self._shared_config is None:
            self._shared_config = client.model_config  # known after a successful call: no network
        return result

    def _thread_client(self) -> ModelClient:
        client = getattr(self._local, "client", None)
        if client is None:
            with self._lock:
                shared = self._shared_config
                client = ModelClient(**self._client_args, model_config=shared, ensure_model_is_ready=shared is None)
                self._clients.append(client)
            self._local.client = client
        return client
