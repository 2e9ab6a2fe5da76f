"""One handler thread per model instance: receive a batch, run the callable, send the responses.

The thread owns its ZeroMQ ROUTER socket, its output arena and its reader of the proxy's input
arena, so the hot path takes no lock and hands nothing to another thread.

What the callable returns decides how the answer travels:

- a list (one response per request): one `BatchResult`;
- a generator (decoupled models): a `StreamPart` per value it yields, then a `StreamEnd`; the
  socket is checked between values, so a `Cancel` from the proxy closes the generator;
- a coroutine or an async generator: the same, awaited. When the callable is async
  (`asynchronous=True`), the thread runs an asyncio loop instead of the blocking loop, and
  every batch becomes a task, so batches of one instance overlap wherever the callable awaits.

Two opt-in steps sit between the handler and a plain callable (`ModelConfig`):
``isolate_failures`` calls it again on parts of a batch it raised on (`isolation`), and
``execution_timeout_s`` runs it on a thread the handler can abandon (`timed`). Without them
the handler calls the callable directly, in its own thread.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import inspect
import json
import logging
import os
import threading
import time
from typing import Any, Callable, Deque, Dict, Generator, List, Optional, Sequence, Tuple

import numpy as np
import zmq
import zmq.asyncio

from pytriton.exceptions import PyTritonModelConfigError, PyTritonUnrecoverableError
from pytriton.ipc import codec, protocol
from pytriton.ipc.shm import IDLE_RELEASE_S, Arena, SegmentReader
from pytriton.worker.context import TritonContext, set_current_context
from pytriton.worker.deadline import expired_message, pop_expired
from pytriton.worker.isolation import isolate
from pytriton.worker.request import Request
from pytriton.worker.responses import Failure, batch_result, per_request, stream_part
from pytriton.worker.timed import ExecutionTimeout, TimedCaller

logger = logging.getLogger("pytriton.worker")

_POLL_MS = 100


def is_async_callable(func: Callable[..., Any]) -> bool:
    """Whether `func` is a coroutine function or an async generator function (seen through
    `wrapt` decorators, and on an object's ``__call__``)."""
    for candidate in (func, getattr(func, "__call__", None)):  # noqa: B004 - the method, not callable()
        if inspect.iscoroutinefunction(candidate) or inspect.isasyncgenfunction(candidate):
            return True
    return False


def is_generator_callable(func: Callable[..., Any]) -> bool:
    """Whether `func` is a generator or async generator function (seen like `is_async_callable`)."""
    for candidate in (func, getattr(func, "__call__", None)):  # noqa: B004
        if inspect.isgeneratorfunction(candidate) or inspect.isasyncgenfunction(candidate):
            return True
    return False


class InstanceHandler:
    """Serves model instance `instance` of one model with one inference callable.

    Args:
        context: the model served (name, version, tensors, config).
        infer_func: the user's callable for this instance.
        endpoint: the ZeroMQ endpoint to bind (see `protocol.instance_endpoint`).
        instance: the instance number.
        shm_prefix: prefix of this model's shared-memory segments.
        strict: validate output dtypes and shapes.
        zmq_context: the process's ZeroMQ context.
        on_unrecoverable: called (from this thread) after a callable raised
            `PyTritonUnrecoverableError` and its requesters got their errors.
        asynchronous: run an asyncio loop in the thread (for coroutine and async generator
            callables); the proxy then relays, so batches may overlap.
        pipelined: the model's callables are all plain, so each of the handler's proxies (see
            `protocol.PIPELINE_LANES`) waits for its answer before it sends another batch: large
            outputs then travel in one arena per proxy. False when the proxies relay (some
            callable of the model is async), so their batches overlap: outputs then go inline.

    Raises:
        PyTritonModelConfigError: ``isolate_failures`` or ``execution_timeout_s`` asked of an
            async callable (they apply to plain callables only).
    """

    def __init__(
        self,
        *,
        context: TritonContext,
        infer_func: Callable[[List[Request]], Any],
        endpoint: str,
        instance: int,
        shm_prefix: str,
        strict: bool,
        zmq_context: zmq.Context[zmq.Socket[bytes]],
        on_unrecoverable: Callable[[str], None],
        asynchronous: bool = False,
        pipelined: bool = True,
    ) -> None:
        self._context = context
        self._infer_func = infer_func
        self._instance = instance
        self._strict = strict
        self._on_unrecoverable = on_unrecoverable
        self._asynchronous = asynchronous
        self._decoupled = bool(getattr(context.config, "decoupled", False))
        self._isolate_failures = bool(getattr(context.config, "isolate_failures", False))
        timeout_s: Optional[float] = getattr(context.config, "execution_timeout_s", None)
        if asynchronous and (self._isolate_failures or timeout_s is not None):
            asked = ", ".join(f"{name}={value!r}" for name, value in (
                ("isolate_failures", self._isolate_failures), ("execution_timeout_s", timeout_s)) if value)
            raise PyTritonModelConfigError(
                f"model '{context.model_name}': ModelConfig({asked}) applies to plain callables only, but the "
                f"inference callable of instance {instance} is async; leave it unset, or handle failures and time "
                "limits inside the coroutine (e.g. with asyncio.wait_for)"
            )
        self._stop = threading.Event()
        self._timed: Optional[TimedCaller] = None
        self._run_callable: Callable[[List[Request]], Any] = infer_func  # the hot path: a direct call
        if timeout_s is not None:
            self._timed = TimedCaller(infer_func, timeout_s, context=context, instance=instance, stopping=self._stop)
            self._run_callable = self._timed
        # One output arena per proxy (lane): one proxy may still read its answer while this thread
        # writes the other's (see protocol.PIPELINE_LANES).
        self._shm_prefix = shm_prefix
        self._arenas: Dict[int, Arena] = {}
        self._lanes: Dict[bytes, int] = {}  # proxy socket identity -> its lane
        self._use_arenas = pipelined and not self._decoupled and not asynchronous
        self._reader = SegmentReader()
        self._bytes_inputs = {t.name: np.dtype(t.dtype).kind for t in context.inputs if np.dtype(t.dtype).kind == "S"}
        self._socket = zmq_context.socket(zmq.ROUTER)
        self._socket.setsockopt(zmq.LINGER, 0)
        self._socket.setsockopt(zmq.RCVTIMEO, _POLL_MS)
        self._socket.bind(endpoint)
        self._socket_path = protocol.ipc_socket_path(endpoint)
        if self._socket_path is not None:
            # ZeroMQ creates the socket file with the process umask; only this user may connect.
            os.chmod(self._socket_path, 0o600)
        self._backlog: Deque[Tuple[bytes, List[Any]]] = collections.deque()  # arrived during a stream
        self._private_loop: Optional[asyncio.AbstractEventLoop] = None  # for a coroutine in blocking mode
        self._ending_streams = threading.Event()
        self._released = False
        self._last_message = time.monotonic()
        self._idle_released = True  # nothing is held before the first message
        self.proxy_pids: Dict[int, int] = {}
        """Per lane, the pid of the stub process whose proxy last connected on it."""
        self._thread = threading.Thread(
            target=self._serve_async_main if asynchronous else self._serve,
            name=f"pytriton-{context.model_name}-{instance}",
            daemon=True,
        )

    def start(self) -> None:
        self._thread.start()

    def is_serving(self) -> bool:
        """Whether the handler's thread still runs (it ends only on stop)."""
        return self._thread.is_alive()

    def end_streams(self) -> None:
        """Cut the streams in flight short (the server is stopping): each gets an error and its end.

        Triton does not unload a decoupled model while a stream is open, so a stop would otherwise
        wait for every generator to finish on its own.
        """
        self._ending_streams.set()

    def _cut_message(self) -> str:
        return f"Model '{self._context.model_name}': the server is stopping; the stream was cut short"

    def stop(self, timeout_s: float = 5.0) -> bool:
        """Stop serving and release the socket and shared memory.

        Returns:
            False when the thread is still inside the callable after `timeout_s`.
        """
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)
        if self._thread.is_alive():
            return False
        if not self._released:
            self._released = True
            self._release()
        return True

    def _release(self) -> None:
        self._socket.close(linger=0)
        for arena in self._arenas.values():
            arena.close()
        self._reader.close()
        if self._private_loop is not None:
            self._private_loop.close()
        if self._timed is not None:
            self._timed.close()
        if self._socket_path is not None:
            try:
                os.unlink(self._socket_path)
            except FileNotFoundError:
                pass

    # --- the blocking loop (plain callables) ---------------------------------------------------

    def _serve(self) -> None:
        set_current_context(self._context)
        socket = self._socket
        while not self._stop.is_set():
            if self._backlog:
                identity, frames = self._backlog.popleft()
            else:
                try:
                    identity, *frames = socket.recv_multipart()
                except zmq.Again:
                    self._release_if_idle()
                    continue  # the receive timeout lets the loop see stop()
                except zmq.ContextTerminated:
                    return
            self._last_message = time.monotonic()
            self._idle_released = False
            try:
                message, payload = protocol.decode(frames)
            except Exception:
                logger.exception("Model '%s': dropped an unreadable message", self._context.model_name)
                continue
            if isinstance(message, protocol.Hello):
                socket.send_multipart([identity, *protocol.encode(self._welcome(message, identity))])
            elif isinstance(message, protocol.InferBatch):
                self._serve_batch(identity, message, payload)
            # a Cancel for a batch that already ended needs nothing

    def _release_if_idle(self) -> None:
        """After `IDLE_RELEASE_S` without a message, hold no shared memory: the output arenas go
        (unlinked) and so do the mappings of the proxies' input arenas (their owners unlink those
        at their next message; a later batch maps them again). Once per quiet spell."""
        if self._idle_released:
            return
        now = time.monotonic()
        if now - self._last_message < IDLE_RELEASE_S:
            return
        for arena in self._arenas.values():
            arena.release_if_idle(now)
        self._reader.close()
        self._idle_released = True

    def _serve_batch(self, identity: bytes, batch: protocol.InferBatch, payload: Sequence[Any]) -> None:
        count = len(batch.parameters)
        try:
            batch_sizes, outcome = self._call(batch, payload)
            if inspect.isgenerator(outcome):
                self._stream(identity, batch.batch_id, count, outcome, batch_sizes)
                return
            if inspect.iscoroutine(outcome) or inspect.isasyncgen(outcome):
                # Found only at call time (e.g. an async callable behind a plain wrapper): run it
                # to the end here; batches of this instance then do not overlap.
                if self._private_loop is None:
                    self._private_loop = asyncio.new_event_loop()
                self._private_loop.run_until_complete(
                    self._finish_async(identity, batch.batch_id, count, outcome, batch_sizes, _BlockingSender(self))
                )
                return
            arena = self._arena_for(identity)
            result, out_frames = self._result(batch.batch_id, count, outcome, batch_sizes, arena)
        except Exception as exc:  # a bug of ours must not leave requesters waiting
            logger.exception("Model '%s': the worker failed to process a batch", self._context.model_name)
            error = f"Model '{self._context.model_name}': internal error in the pytriton worker: {exc}"
            result, out_frames = protocol.BatchResult(batch.batch_id, (error,) * count, (), ""), []
        if result.unrecoverable:  # before the reply, so is_alive() is false once a client sees it
            self._on_unrecoverable(self._context.model_name)
        self._socket.send_multipart([identity, *protocol.encode(result, out_frames)])

    def _stream(
        self, identity: bytes, batch_id: int, count: int, generator: Generator[Any, Any, Any],
        batch_sizes: List[Optional[int]],
    ) -> None:
        """Send each value the generator yields as a `StreamPart`, then a `StreamEnd`."""
        errors: Tuple[Optional[str], ...] = (None,) * count
        unrecoverable = False
        try:
            if not self._decoupled:
                raise _NotDecoupled(self._not_decoupled_message())
            for step in generator:
                part, frames = self._part(batch_id, count, step, batch_sizes)
                self._socket.send_multipart([identity, *protocol.encode(part, frames)])
                if self._ending_streams.is_set():
                    generator.close()  # runs the generator's finally blocks now
                    errors = (self._cut_message(),) * count
                    break
                if self._cancelled(batch_id):
                    generator.close()
                    logger.debug("Model '%s': batch %d cancelled by its requesters", self._context.model_name,
                                 batch_id)
                    break
        except Exception as exc:  # noqa: BLE001 - the callable's error goes to this batch's requesters only
            error, unrecoverable = self._callable_error(exc)
            errors = (error,) * count
        if unrecoverable:
            self._on_unrecoverable(self._context.model_name)
        self._socket.send_multipart([identity, *protocol.encode(protocol.StreamEnd(batch_id, errors, unrecoverable))])

    def _cancelled(self, batch_id: int) -> bool:
        """Read what arrived while streaming: a `Cancel` of this batch, or work kept for later."""
        cancelled = False
        while self._socket.poll(0):
            identity, *frames = self._socket.recv_multipart()
            try:
                message, _ = protocol.decode(frames)
            except Exception:
                logger.exception("Model '%s': dropped an unreadable message", self._context.model_name)
                continue
            if isinstance(message, protocol.Cancel):
                cancelled = cancelled or message.batch_id == batch_id
            else:
                self._backlog.append((identity, frames))
        return cancelled

    # --- the asyncio loop (coroutine and async generator callables) -----------------------------

    def _serve_async_main(self) -> None:
        set_current_context(self._context)
        loop = asyncio.new_event_loop()
        self._private_loop = loop
        try:
            loop.run_until_complete(self._serve_async())
        finally:
            loop.run_until_complete(loop.shutdown_asyncgens())

    async def _serve_async(self) -> None:
        self._socket.setsockopt(zmq.RCVTIMEO, -1)  # asyncio's poll times out by itself; a socket timeout breaks it
        socket = zmq.asyncio.Socket.from_socket(self._socket)
        sender = _AsyncSender(socket)
        tasks: Dict[int, asyncio.Task[None]] = {}
        try:
            cut = False
            while not self._stop.is_set():
                if self._ending_streams.is_set() and not cut and self._decoupled:
                    cut = True  # the tasks see _ending_streams when cancelled: cut, not a requester's Cancel
                    for task in tasks.values():
                        task.cancel()
                if not await socket.poll(_POLL_MS):
                    continue
                identity, *frames = await socket.recv_multipart()
                try:
                    message, payload = protocol.decode(frames)
                except Exception:
                    logger.exception("Model '%s': dropped an unreadable message", self._context.model_name)
                    continue
                if isinstance(message, protocol.Hello):
                    await socket.send_multipart([identity, *protocol.encode(self._welcome(message, identity))])
                elif isinstance(message, protocol.InferBatch):
                    task = asyncio.ensure_future(self._serve_async_batch(identity, message, payload, sender))
                    tasks[message.batch_id] = task
                    task.add_done_callback(functools.partial(_forget, tasks, message.batch_id))
                elif isinstance(message, protocol.Cancel) and message.batch_id in tasks:
                    tasks[message.batch_id].cancel()
        finally:
            for task in list(tasks.values()):
                task.cancel()
            if tasks:
                await asyncio.gather(*tasks.values(), return_exceptions=True)

    async def _serve_async_batch(
        self, identity: bytes, batch: protocol.InferBatch, payload: Sequence[Any], sender: _Sender
    ) -> None:
        count = len(batch.parameters)
        try:
            batch_sizes, outcome = self._call(batch, payload)
            await self._finish_async(identity, batch.batch_id, count, outcome, batch_sizes, sender)
        except Exception as exc:  # a bug of ours must not leave requesters waiting
            logger.exception("Model '%s': the worker failed to process a batch", self._context.model_name)
            error = f"Model '{self._context.model_name}': internal error in the pytriton worker: {exc}"
            end: Any = (protocol.StreamEnd(batch.batch_id, (error,) * count) if self._decoupled
                        else protocol.BatchResult(batch.batch_id, (error,) * count, (), ""))
            await sender.send([identity, *protocol.encode(end)])

    async def _finish_async(
        self,
        identity: bytes,
        batch_id: int,
        count: int,
        outcome: Any,
        batch_sizes: List[Optional[int]],
        sender: _Sender,
    ) -> None:
        """Await a coroutine, or run an async generator (or a plain outcome), and send the answer."""
        if not self._decoupled and (inspect.isasyncgen(outcome) or inspect.isgenerator(outcome)):
            outcome = Failure(self._not_decoupled_message())
        if not self._decoupled:
            if inspect.iscoroutine(outcome):
                try:
                    outcome = await outcome
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # noqa: BLE001
                    outcome = Failure(self._callable_error(exc)[0])
            if isinstance(outcome, Failure):
                result = protocol.BatchResult(batch_id, (outcome.message,) * count, (), "")
                await sender.send([identity, *protocol.encode(result)])
                return
            result, frames = self._result(batch_id, count, outcome, batch_sizes, None)
            if result.unrecoverable:
                self._on_unrecoverable(self._context.model_name)
            await sender.send([identity, *protocol.encode(result, frames)])
            return
        errors: Tuple[Optional[str], ...] = (None,) * count
        unrecoverable = False
        try:
            if isinstance(outcome, Failure):
                raise _NotDecoupled(outcome.message)
            if inspect.iscoroutine(outcome):
                outcome = await outcome
            if inspect.isasyncgen(outcome):
                try:
                    async for step in outcome:
                        part, frames = self._part(batch_id, count, step, batch_sizes)
                        await sender.send([identity, *protocol.encode(part, frames)])
                finally:
                    await outcome.aclose()  # on cancellation too: the generator's finally blocks run
            elif inspect.isgenerator(outcome):
                for step in outcome:
                    part, frames = self._part(batch_id, count, step, batch_sizes)
                    await sender.send([identity, *protocol.encode(part, frames)])
            else:  # a plain list: one response per request, then the end
                part, frames = self._part(batch_id, count, outcome, batch_sizes)
                await sender.send([identity, *protocol.encode(part, frames)])
        except asyncio.CancelledError:
            if self._ending_streams.is_set():
                errors = (self._cut_message(),) * count
            else:
                logger.debug("Model '%s': batch %d cancelled by its requesters", self._context.model_name, batch_id)
        except Exception as exc:  # noqa: BLE001 - the callable's error goes to this batch's requesters only
            error, unrecoverable = self._callable_error(exc)
            errors = (error,) * count
        if unrecoverable:
            self._on_unrecoverable(self._context.model_name)
        await sender.send([identity, *protocol.encode(protocol.StreamEnd(batch_id, errors, unrecoverable))])

    # --- shared steps ---------------------------------------------------------------------------

    def _arena_for(self, identity: bytes) -> Optional[Arena]:
        """The output arena of the proxy behind `identity` (None: answers go inline)."""
        if not self._use_arenas:
            return None
        lane = self._lanes.get(identity, 0)
        arena = self._arenas.get(lane)
        if arena is None:
            arena = self._arenas[lane] = _output_arena(self._shm_prefix, self._instance, lane)
        return arena

    def _welcome(self, hello: protocol.Hello, identity: bytes) -> protocol.Welcome:
        error = None
        if hello.protocol != protocol.PROTOCOL_VERSION:
            error = (
                f"protocol mismatch: proxy speaks version {hello.protocol}, worker {protocol.PROTOCOL_VERSION}; "
                "the server and the library come from different pytriton installations"
            )
        elif hello.instance != self._instance:
            error = f"instance {hello.instance} connected to the handler of instance {self._instance}"
        if error is None and hello.proxy_pid != self.proxy_pids.get(hello.lane):
            if hello.lane in self.proxy_pids:
                # A new stub replaces a dead one and reuses its segment names: drop the old mappings.
                self._reader.close()
            self.proxy_pids[hello.lane] = hello.proxy_pid
        if error is None:
            self._lanes[identity] = hello.lane
        logger.debug("Model '%s' instance %d: proxy pid %d connected on lane %d", self._context.model_name,
                     self._instance, hello.proxy_pid, hello.lane)
        return protocol.Welcome(protocol.PROTOCOL_VERSION, os.getpid(), error)

    def _requests(self, batch: protocol.InferBatch, payload: Sequence[Any]) -> List[Request]:
        groups = codec.unpack(batch.columns, batch.segment, payload, self._reader, len(batch.parameters))
        requests = []
        for arrays, parameters in zip(groups, batch.parameters):
            for name in self._bytes_inputs.keys() & arrays.keys():
                arrays[name] = arrays[name].astype(np.bytes_)
            requests.append(Request(arrays, json.loads(parameters) if parameters else {}))
        return requests

    def _call(self, batch: protocol.InferBatch, payload: Sequence[Any]) -> Tuple[List[Optional[int]], Any]:
        """Run the callable on the batch: its result (list, generator, coroutine...) or a `Failure`.

        Requests whose deadline passed are answered with an error and left out of the call (for
        plain callables of non-decoupled models, whose answers are one list per batch).
        """
        batch_sizes: List[Optional[int]] = [None] * len(batch.parameters)
        try:
            requests = self._requests(batch, payload)
            if self._strict and self._context.config.batching:  # before the callable may change the requests
                batch_sizes = [_batch_size(request) for request in requests]
        except Exception as exc:  # noqa: BLE001 - a bad batch fails its own requesters only
            error, unrecoverable = self._callable_error(exc)
            return batch_sizes, Failure(error, unrecoverable)
        expired = pop_expired(requests, time.time())
        if not expired or self._decoupled or self._asynchronous:
            return batch_sizes, self._call_requests(requests)
        answers: List[Any] = [Failure(expired_message(self._context.model_name))] * len(requests)
        live = [index for index in range(len(requests)) if index not in set(expired)]
        logger.debug("Model '%s': %d of %d requests expired before the call", self._context.model_name, len(expired),
                     len(requests))
        if live:
            outcome = self._call_requests([requests[index] for index in live])
            for index, entry in zip(live, per_request(self._context, len(live), outcome)):
                answers[index] = entry
        return batch_sizes, answers

    def _call_requests(self, requests: List[Request]) -> Any:
        """The callable's result for `requests`, or a `Failure` (after isolating failures if asked)."""
        try:
            return self._run_callable(requests)
        except Exception as exc:  # noqa: BLE001 - the callable's error goes to this batch's requesters only
            if not (self._isolate_failures and len(requests) > 1 and _may_split(exc) and not _must_stop(exc)):
                error, unrecoverable = self._callable_error(exc)
                return Failure(error, unrecoverable)
            failed = exc
        # Outside the except block, so the retries' errors do not chain (and log) this one.
        return self._isolate(requests, failed)

    def _isolate(self, requests: List[Request], error: Exception) -> List[Any]:
        """Per request, its response or its `Failure`, after calling the callable again on parts
        of the batch it raised `error` on (see `isolation.isolate`)."""
        logger.warning("Model '%s': the inference callable raised on a batch of %d requests (%s: %s); calling it "
                       "on parts of the batch to find the failing requests", self._context.model_name, len(requests),
                       type(error).__name__, error)
        calls = [0]

        def call(indices: Sequence[int]) -> Any:
            calls[0] += 1
            return self._run_callable([requests[i] for i in indices])

        answers: List[Any] = [None] * len(requests)
        for indices, answer, failure in isolate(len(requests), call, error, may_split=_may_split,
                                                 must_stop=_must_stop):
            if failure is not None:
                entries: List[Any] = [Failure(*self._callable_error(failure))] * len(indices)
            else:
                if inspect.iscoroutine(answer):
                    answer.close()  # a plain callable returned an awaitable for a part only: not awaited
                entries = per_request(self._context, len(indices), answer)
            for index, entry in zip(indices, entries):
                answers[index] = entry
        failed = sum(1 for answer in answers if isinstance(answer, Failure))
        logger.warning("Model '%s': %d of %d requests failed on their own (%d extra calls)", self._context.model_name,
                       failed, len(requests), calls[0])
        return answers

    def _callable_error(self, exc: Exception) -> Tuple[str, bool]:
        """The message a requester gets for the callable's exception, and whether it is unrecoverable."""
        model = self._context.model_name
        if isinstance(exc, (_NotDecoupled, ExecutionTimeout)):  # already logged where it happened
            return str(exc), False
        if isinstance(exc, PyTritonUnrecoverableError):
            logger.error("Model '%s': unrecoverable error, the server shuts down", model, exc_info=exc)
            return f"Model '{model}' failed: PyTritonUnrecoverableError: {exc}", True
        logger.error("Model '%s': the inference callable raised", model, exc_info=exc)
        return f"Model '{model}' failed: {type(exc).__name__}: {exc}", False

    def _not_decoupled_message(self) -> str:
        return (f"Model '{self._context.model_name}': the inference callable yields responses (it is a generator), "
                "but the model is not decoupled; bind it with ModelConfig(decoupled=True) to stream responses")

    def _result(
        self, batch_id: int, count: int, results: Any, batch_sizes: List[Optional[int]], arena: Optional[Arena]
    ) -> Tuple[protocol.BatchResult, List[Any]]:
        return batch_result(self._context, batch_id, count, results, batch_sizes, self._strict, arena)

    def _part(
        self, batch_id: int, count: int, step: Any, batch_sizes: List[Optional[int]]
    ) -> Tuple[protocol.StreamPart, List[Any]]:
        return stream_part(self._context, batch_id, count, step, batch_sizes, self._strict)


class _NotDecoupled(Exception):
    """A generator callable bound to a model without ModelConfig(decoupled=True)."""


class _Sender:
    async def send(self, frames: List[Any]) -> None:
        raise NotImplementedError


class _AsyncSender(_Sender):
    def __init__(self, socket: Any) -> None:
        self._socket = socket

    async def send(self, frames: List[Any]) -> None:
        await self._socket.send_multipart(frames)


class _BlockingSender(_Sender):
    """Sends on the handler's blocking socket from a coroutine run to completion in its thread."""

    def __init__(self, handler: InstanceHandler) -> None:
        self._handler = handler

    async def send(self, frames: List[Any]) -> None:
        self._handler._socket.send_multipart(frames)


def _may_split(exc: Exception) -> bool:
    """A timeout says nothing about which requests are at fault; retrying parts would only hang again."""
    return not isinstance(exc, ExecutionTimeout)


def _must_stop(exc: Exception) -> bool:
    """An unrecoverable error is never retried: the callable says it cannot serve anymore."""
    return isinstance(exc, PyTritonUnrecoverableError)


def _forget(tasks: Dict[int, Any], batch_id: int, _task: Any) -> None:
    tasks.pop(batch_id, None)


def _output_arena(shm_prefix: str, instance: int, lane: int) -> Arena:
    return Arena(lambda generation: protocol.segment_name(shm_prefix, instance, "out", generation, lane))


def _batch_size(request: Request) -> Optional[int]:
    for array in request.values():
        if array.ndim:
            return int(array.shape[0])
    return None
