"""The ``concurrent.futures`` client: many requests in flight from synchronous code.

Still the client step of a request. :class:`FuturesModelClient` runs one
:class:`~pytriton.client.client.ModelClient` per worker thread, because ``tritonclient`` clients
must not be shared between threads; it adds no inference logic of its own, only the pool, the
bounded queue, and :meth:`~FuturesModelClient.infer_batch_chunked`, which spreads a batch larger
than the model's ``max_batch_size`` over the workers.
"""

from __future__ import annotations

import concurrent.futures
import functools
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Dict, TypeVar

import numpy as np

from pytriton.client._args import client_args, pool_arg, timeout_arg
from pytriton.client.client import ModelClient
from pytriton.client.codec import chunked_request, concat_batches
from pytriton.client.exceptions import (
    PyTritonClientClosedError,
    PyTritonClientInferenceServerError,
    PyTritonClientQueueFullError,
)
from pytriton.client.infer_calls import InferCall, InferCalls, call_priority
from pytriton.client.model_config import ClientModelConfig
from pytriton.client.shm_regions import ShmMode, shm_arg

_T = TypeVar("_T")
_Outputs = Dict[str, np.ndarray]

#: The published defaults: up to 128 requests in flight, 128 more waiting for a worker.
DEFAULT_MAX_WORKERS = 128
DEFAULT_MAX_QUEUE_SIZE = 128


def _default_max_workers() -> int:
    # ThreadPoolExecutor's own default, computed here because the queue bound needs the number.
    return min(32, (os.cpu_count() or 1) + 4)


class FuturesModelClient(InferCalls["concurrent.futures.Future[_Outputs]"]):
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
        max_workers: int | None = DEFAULT_MAX_WORKERS,
        max_queue_size: int | None = DEFAULT_MAX_QUEUE_SIZE,
        non_blocking: bool = False,
        init_timeout_s: float | None = None,
        inference_timeout_s: float | None = None,
        access_token: str | None = None,
        shared_memory: ShmMode = False,
        priority: int = 0,
    ) -> None:
        """Create the client; no thread or connection starts before the first request.

        Args:
            url: as for :class:`ModelClient`.
            model_name: the model's name on the server.
            model_version: a version number, or ``None`` for the server's choice.
            max_workers: the most worker threads (requests in flight), each with its own
                connection; threads start only as requests need them. ``None`` for
                ``ThreadPoolExecutor``'s default (``min(32, CPUs + 4)``).
            max_queue_size: how many more requests may wait for a free worker; ``None`` for no
                limit (memory then bounds a caller that submits faster than the server answers).
            non_blocking: when the queue is full, raise :class:`PyTritonClientQueueFullError`
                at once; otherwise wait for a request to complete, at most ``inference_timeout_s``,
                then raise it.
            init_timeout_s: as for :class:`ModelClient` (default 300 s).
            inference_timeout_s: as for :class:`ModelClient` (default 60 s).
            access_token: as for :class:`ModelClient`.
            shared_memory: as for :class:`ModelClient`; each worker has its own regions, and a
                refusal found by one worker sends every worker's tensors through the socket.
            priority: as for :class:`ModelClient`: the priority level of the requests whose call
                gives none.

        Raises:
            PyTritonClientInvalidUrlError: the URL is not understood.
            PyTritonClientValueError: another argument is wrong.
        """
        # Checked here, so that a wrong argument fails in the caller, not in a worker thread.
        self._args = client_args(url, model_name, model_version, init_timeout_s=init_timeout_s,
                                 inference_timeout_s=inference_timeout_s, access_token=access_token,
                                 priority=priority)
        self._shm_choice = shm_arg(shared_memory, self._args.url.hostname)
        pool_arg("max_workers", max_workers, 1)
        pool_arg("max_queue_size", max_queue_size, 0)
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

    def _request(self, call: InferCall) -> concurrent.futures.Future[dict[str, np.ndarray]]:
        # The requests of one sequence must be sent in order: the caller waits for each future.
        return self._submit(lambda client: client._request(call))

    def infer_batch_chunked(
        self,
        *inputs: np.ndarray,
        chunk_size: int | None = None,
        parameters: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        priority: int | None = None,
        **named_inputs: np.ndarray,
    ) -> concurrent.futures.Future[dict[str, np.ndarray]]:
        """Run a batch of any size: split along the batch axis, sent concurrently, joined in order.

        The way to send more samples than the model's ``max_batch_size`` (Triton refuses such a
        request). Each chunk is one :meth:`infer_batch` on the pool, so chunks run in parallel
        on up to ``max_workers`` connections and obey ``max_queue_size``. The first call waits
        for the model configuration (to learn ``max_batch_size``); the client keeps it.

        Args:
            *inputs: arrays in the order of the model's inputs, all with the same first axis.
            chunk_size: samples per request; ``None`` for the model's ``max_batch_size``.
            parameters: custom request parameters, sent with every chunk.
            headers: extra HTTP headers or gRPC metadata, sent with every chunk.
            priority: the priority level of every chunk, as for :meth:`infer_batch`.
            **named_inputs: arrays by input name (not together with positional ones).

        Returns:
            A future of the outputs of the whole batch, in the order of the inputs. If a chunk
            fails, the future holds the error of the first failed chunk.

        Raises:
            PyTritonClientModelDoesntSupportBatchingError: the model does not batch.
            PyTritonClientValueError: the inputs disagree on the batch size, or a wrong argument.
            PyTritonClientClosedError, PyTritonClientQueueFullError: as for :meth:`infer_batch`.
        """
        pool_arg("chunk_size", chunk_size, 1)
        level = call_priority(priority, named_inputs)
        config = self._shared_config or self.model_config().result()
        chunks = chunked_request(config, inputs, named_inputs, chunk_size)
        futures: list[concurrent.futures.Future[dict[str, np.ndarray]]] = []
        try:
            for chunk in chunks:
                call = InferCall(False, (), chunk, parameters, headers, {}, level)
                futures.append(self._submit(functools.partial(_infer_chunk, call)))
        except BaseException:
            for future in futures:
                future.cancel()
            raise
        return join_chunk_futures(futures)

    def model_config(self) -> concurrent.futures.Future[ClientModelConfig]:
        """The model's configuration, as a future (a worker waits for the server and model)."""
        return self._submit(lambda client: client.model_config)

    def wait_for_model(self, timeout_s: float | None = None) -> concurrent.futures.Future[None]:
        """Wait on a worker until the server and the model are ready; the future's result is None then.

        Args:
            timeout_s: the longest to wait, counted from when a worker starts; ``None`` means
                ``init_timeout_s``.

        Returns:
            A future holding None once ready, or :class:`PyTritonClientTimeoutError`.

        Raises:
            PyTritonClientValueError: ``timeout_s`` is not a positive number.
            PyTritonClientClosedError, PyTritonClientQueueFullError: as for :meth:`infer_batch`.
        """
        timeout_arg("timeout_s", timeout_s, self._args.init_timeout_s)  # refused here, not in a worker
        # A worker's client has no configuration after a wait; reading it would be a request of
        # its own (and refuse a decoupled model), so the wait shares none. It gets `timeout_s` as
        # given: None is its init_timeout_s, this client's, and its notices say which it waits for.
        return self._submit(lambda client: client.wait_for_model(timeout_s), shares_config=False)

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
        with self._lock:
            workers = len(self._clients)
        if workers:
            # One release task per worker thread that made a client: each waits for the others at
            # the barrier, so no thread takes two and every one cleans up after itself.
            barrier = threading.Barrier(workers)
            for _ in range(workers):
                self._executor.submit(self._release_thread, barrier)
        self._executor.shutdown(wait=True)
        # Workers are gone, so no connection is in use while it is closed.
        with self._lock:
            clients, self._clients = self._clients, []
        for client in clients:
            client.close()

    def _release_thread(self, barrier: threading.Barrier) -> None:
        """In a worker thread: close its client and the gevent hub that tritonclient.http made in it.

        A thread's gevent hub (an event loop with its own file descriptors) is not freed when the
        thread ends; without this, each worker of a closed client would keep two descriptors.
        """
        client = getattr(self._local, "client", None)
        if client is not None:
            self._local.client = None
            with self._lock:
                if client in self._clients:
                    self._clients.remove(client)
            client.close()
        release_gevent_hub()
        try:
            barrier.wait(timeout=5.0)
        except threading.BrokenBarrierError:
            pass

    def _closed_error(self) -> PyTritonClientClosedError:
        return PyTritonClientClosedError(
            f"The futures client of model {self._args.model_name!r} at {self._args.url} is closed"
        )

    def _submit(self, call: Callable[[ModelClient], _T], shares_config: bool = True) -> concurrent.futures.Future[_T]:
        if self._closed:
            raise self._closed_error()
        if self._slots is not None:
            # Blocking waits at most inference_timeout_s for a place, as the published client does:
            # a caller that submits faster than the server answers gets an error, not a hang.
            if self._non_blocking:
                placed = self._slots.acquire(blocking=False)
            else:
                placed = self._slots.acquire(timeout=self._args.inference_timeout_s)
            if not placed:
                timeout_s = self._args.inference_timeout_s
                waited = "" if self._non_blocking else f" for {timeout_s:g} s (inference_timeout_s)"
                raise PyTritonClientQueueFullError(
                    f"{self._max_queue_size} request(s) already wait for a worker of the futures client of model "
                    f"{self._args.model_name!r}; no place freed{waited}; retry later"
                    + ("" if self._non_blocking else " or raise max_queue_size")
                )
        try:
            future = self._executor.submit(self._run, call, shares_config)
        except RuntimeError as exc:  # shut down between the check above and the submit
            if self._slots is not None:
                self._slots.release()
            raise self._closed_error() from exc
        if self._slots is not None:
            slots = self._slots
            future.add_done_callback(lambda _: slots.release())
        return future

    def _run(self, call: Callable[[ModelClient], _T], shares_config: bool) -> _T:
        client = self._thread_client()
        result = call(client)
        if shares_config and self._shared_config is None:
            self._shared_config = client.model_config  # known after a successful call: no network
        return result

    def _thread_client(self) -> ModelClient:
        client = getattr(self._local, "client", None)
        if client is None:
            with self._lock:
                shared = self._shared_config
                client = ModelClient(
                    str(self._args.url),
                    self._args.model_name,
                    self._args.model_version or None,
                    init_timeout_s=self._args.init_timeout_s,
                    inference_timeout_s=self._args.inference_timeout_s,
                    access_token=self._args.access_token,
                    model_config=shared,
                    ensure_model_is_ready=shared is None,
                    shared_memory=self._shm_choice.mode,
                    priority=self._args.priority,
                )
                client._transport.choice = self._shm_choice  # one decision for every worker
                self._clients.append(client)
            self._local.client = client
        return client


def release_gevent_hub() -> None:
    """Destroy the calling thread's gevent hub, if tritonclient.http made one in it."""
    try:
        from gevent._hub_local import get_hub_if_exists  # type: ignore[import-untyped,unused-ignore]
    except ImportError:  # no gevent (a gRPC-only install), or a gevent without it
        return
    hub = get_hub_if_exists()
    if hub is not None:
        hub.destroy(destroy_loop=True)


def _infer_chunk(call: InferCall, client: ModelClient) -> dict[str, np.ndarray]:
    # The call as made, not through infer_batch's keywords: an input may be named like one of them.
    return client._request(call)


def join_chunk_futures(
    futures: Sequence[concurrent.futures.Future[dict[str, np.ndarray]]],
) -> concurrent.futures.Future[dict[str, np.ndarray]]:
    """One future of the chunks' outputs joined in order, done when every chunk is done.

    Waiting for all (rather than failing at the first error) means no chunk is still running
    when the caller sees the result, and the error reported is the first in batch order.
    """
    joined: concurrent.futures.Future[dict[str, np.ndarray]] = concurrent.futures.Future()
    joined.set_running_or_notify_cancel()
    pending = [len(futures)]
    lock = threading.Lock()

    def chunk_done(_: concurrent.futures.Future[dict[str, np.ndarray]]) -> None:
        with lock:
            pending[0] -= 1
            if pending[0]:
                return
        for future in futures:
            if future.cancelled():
                joined.set_exception(concurrent.futures.CancelledError("a chunk of the batch was cancelled"))
                return
            error = future.exception()
            if error is not None:
                joined.set_exception(error)
                return
        try:
            joined.set_result(concat_batches([future.result() for future in futures]))
        except ValueError as exc:  # outputs whose shapes cannot be joined
            joined.set_exception(
                PyTritonClientInferenceServerError(f"The outputs of the chunks cannot be joined into one batch: {exc}")
            )

    for future in futures:
        future.add_done_callback(chunk_done)
    return joined
