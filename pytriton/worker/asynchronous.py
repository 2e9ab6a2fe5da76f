"""The asyncio loop: coroutine and async generator callables, whose batches overlap.

The loop of every handler whose callable is async (`asynchronous=True`). One thread runs an
asyncio event loop that watches the handler's sockets (`loop.add_reader`); each batch becomes
a task, so batches of one instance overlap wherever the callable awaits, and a `Cancel` from
the proxy cancels the batch's task. The proxy of such a model relays (see
`pytriton.proxy.relay`), so it keeps sending batches while earlier ones run; every message is
therefore read into memory of its own.

`finish` turns what a call returned (a coroutine, an async generator, a generator or a plain
list) into the answer messages; the blocking loop uses it too, for a coroutine it finds only at
call time.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import io
import logging
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Set, Tuple

import zmq

from pytriton.ipc import protocol
from pytriton.ipc.channel import ChannelClosed
from pytriton.ipc.shm import SegmentReader
from pytriton.metrics import set_current_registry
from pytriton.worker import tracing
from pytriton.worker.batches import BatchCalls, NotDecoupled, runs_on
from pytriton.worker.context import set_current_context
from pytriton.worker.endpoint import Connection, HandlerEndpoint
from pytriton.worker.outcomes import Expected, Failure

logger = logging.getLogger("pytriton.worker")

_TICK_S = 0.1
"""How often the loop looks at the stop and end-of-streams flags (and greetings, as a safety net)."""

Send = Callable[[protocol.Message, List[Any]], None]
"""Sends one answer message with its payload to the batch's proxy."""


async def finish(
    calls: BatchCalls,
    send: Send,
    batch_id: int,
    count: int,
    outcome: Any,
    batch_sizes: Expected,
    ending_streams: threading.Event,
    on_unrecoverable: Callable[[str], None],
) -> None:
    """Await a coroutine, or run an async generator (or a plain outcome), and send the answer."""
    started = time.perf_counter()
    measured = runs_on(outcome)  # a plain outcome was measured when the callable returned it
    if not calls.decoupled and (inspect.isasyncgen(outcome) or inspect.isgenerator(outcome)):
        outcome = Failure(calls.not_decoupled_message())
    if not calls.decoupled:
        if inspect.iscoroutine(outcome):
            try:
                outcome = await outcome
            except asyncio.CancelledError:
                calls.measures.batch_done(started)
                raise
            except Exception as exc:  # noqa: BLE001
                outcome = Failure(calls.callable_error(exc)[0])
        if measured:
            calls.measures.batch_done(started, count if isinstance(outcome, Failure) else 0)
        if isinstance(outcome, Failure):
            send(protocol.BatchResult(batch_id, (outcome.message,) * count, (), ""), [])
            return
        result, payload = calls.result(batch_id, count, outcome, batch_sizes, None)
        if result.unrecoverable:
            on_unrecoverable(calls.model_name)
        send(result, payload)
        return
    errors: Tuple[Optional[str], ...] = (None,) * count
    unrecoverable = False
    failed = 0
    try:
        if isinstance(outcome, Failure):
            raise NotDecoupled(outcome.message)
        if inspect.iscoroutine(outcome):
            outcome = await outcome
        if inspect.isasyncgen(outcome):
            try:
                async for step in outcome:
                    send(*calls.part(batch_id, count, step, batch_sizes))
            finally:
                await outcome.aclose()  # on cancellation too: the generator's finally blocks run
        elif inspect.isgenerator(outcome):
            for step in outcome:
                send(*calls.part(batch_id, count, step, batch_sizes))
        else:  # a plain list: one response per request, then the end
            send(*calls.part(batch_id, count, outcome, batch_sizes))
    except asyncio.CancelledError:
        if ending_streams.is_set():
            errors = (calls.cut_message(),) * count
        else:
            logger.debug("Model '%s': batch %d cancelled by its requesters", calls.model_name, batch_id)
    except Exception as exc:  # noqa: BLE001 - the callable's error goes to this batch's requesters only
        error, unrecoverable = calls.callable_error(exc)
        errors = (error,) * count
        failed = count
    if measured:
        calls.measures.batch_done(started, failed)
    if unrecoverable:
        on_unrecoverable(calls.model_name)
    send(protocol.StreamEnd(batch_id, errors, unrecoverable), [])


class AsyncLoop:
    """Serves one handler's proxies from an asyncio loop in one thread (see the module docstring).

    `busy_since`'s ``value`` is the start of the oldest batch being served, 0.0 for none (see
    `InstanceHandler.idle` and `InstanceHandler.busy_for`).
    """

    def __init__(
        self,
        endpoint: HandlerEndpoint,
        calls: BatchCalls,
        *,
        stop: threading.Event,
        ending_streams: threading.Event,
        on_unrecoverable: Callable[[str], None],
        busy_since: Any,
    ) -> None:
        self._endpoint = endpoint
        self._busy_since = busy_since
        self._started: Dict[Tuple[int, int], float] = {}  # each batch's start, for `busy_since`
        self._calls = calls
        self._stop = stop
        self._ending_streams = ending_streams
        self._on_unrecoverable = on_unrecoverable
        self._tasks: Dict[Tuple[int, int], asyncio.Task[None]] = {}  # by (connection fd, batch id)
        self._watched: Dict[int, Connection] = {}
        self._metrics_watched: Set[int] = set()
        self.reader = SegmentReader()  # a relaying proxy sends inline; kept for the shape of the calls

    def run(self) -> None:
        set_current_context(self._calls.context)
        set_current_registry(self._calls.measures.registry)  # the callable's own metrics go there
        loop = asyncio.new_event_loop()
        try:
            loop.run_until_complete(self._serve())
        finally:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    def close(self) -> None:
        """Release the mappings (none in practice: a relaying proxy sends everything inline)."""
        self.reader.close()

    async def _serve(self) -> None:
        loop = asyncio.get_running_loop()
        endpoint = self._endpoint
        control_fd = endpoint.control.getsockopt(zmq.FD)
        loop.add_reader(control_fd, endpoint.answer_greetings)
        loop.add_reader(endpoint.listener.fileno(), self._accept)
        loop.add_reader(endpoint.metrics_listener.fileno(), self._accept_metrics)
        try:
            cut = False
            while not self._stop.is_set():
                if self._ending_streams.is_set() and not cut and self._calls.decoupled:
                    cut = True  # the tasks see ending_streams when cancelled: cut, not a requester's Cancel
                    for task in self._tasks.values():
                        task.cancel()
                endpoint.answer_greetings()  # the control socket's descriptor is edge-triggered
                await asyncio.sleep(_TICK_S)
        finally:
            loop.remove_reader(control_fd)
            loop.remove_reader(endpoint.listener.fileno())
            loop.remove_reader(endpoint.metrics_listener.fileno())
            for fd in self._metrics_watched:
                loop.remove_reader(fd)
            for fd in list(self._watched):
                loop.remove_reader(fd)
            tasks = list(self._tasks.values())
            for task in tasks:
                task.cancel()
            if tasks:
                await asyncio.gather(*tasks, return_exceptions=True)

    def _accept(self) -> None:
        self._endpoint.accept()
        self._watch_connections()

    def _watch_connections(self) -> None:
        """Watch the endpoint's connections, and only those (a greeting drops older ones)."""
        loop = asyncio.get_running_loop()
        connections = self._endpoint.connections
        for fd in [fd for fd, connection in self._watched.items() if connections.get(fd) is not connection]:
            del self._watched[fd]
            loop.remove_reader(fd)
        for fd, connection in self._endpoint.connections.items():
            if fd not in self._watched:
                self._watched[fd] = connection
                loop.add_reader(fd, self._readable, connection)

    def _accept_metrics(self) -> None:
        loop = asyncio.get_running_loop()
        for fd in self._endpoint.accept_metrics():
            self._metrics_watched.add(fd)
            loop.add_reader(fd, self._answer_metrics, fd)

    def _answer_metrics(self, fd: int) -> None:
        if not self._endpoint.answer_metrics(fd):
            self._metrics_watched.discard(fd)
            asyncio.get_running_loop().remove_reader(fd)

    def _readable(self, connection: Connection) -> None:
        try:
            received = connection.channel.receive(keep=True)  # batches overlap: each keeps its own memory
        except ChannelClosed:
            self._forget(connection)
            return
        if received is None:
            return
        header, payload = received
        try:
            message = protocol.decode(header)
        except ValueError:
            logger.exception("Model '%s': dropped an unreadable message", self._calls.model_name)
            return
        key = (connection.channel.fileno(), getattr(message, "batch_id", -1))
        if isinstance(message, protocol.InferBatch):
            task = asyncio.ensure_future(self._serve_batch(connection, message, payload))
            self._tasks[key] = task
            self._started[key] = time.monotonic()
            self._busy_since.value = min(self._started.values())
            task.add_done_callback(functools.partial(self._forget_task, key))
        elif isinstance(message, protocol.Cancel) and key in self._tasks:
            self._tasks[key].cancel()
        elif isinstance(message, protocol.Hello):  # the backend greets on its data connection
            self._endpoint.greet(connection, message)
            self._watch_connections()

    def _forget_task(self, key: Tuple[int, int], _task: Any) -> None:
        self._tasks.pop(key, None)
        self._started.pop(key, None)
        self._busy_since.value = min(self._started.values(), default=0.0)

    def oldest_task_stack(self) -> str:
        """Where the longest-running batch's coroutine waits ("" when none runs)."""
        if not self._started:
            return ""
        key = min(self._started, key=self._started.__getitem__)
        task = self._tasks.get(key)
        if task is None:
            return ""
        text = io.StringIO()
        task.print_stack(file=text)
        return text.getvalue()

    def _forget(self, connection: Connection) -> None:
        fd = connection.channel.fileno()
        if self._watched.pop(fd, None) is not None:
            asyncio.get_running_loop().remove_reader(fd)
        self._endpoint.drop(connection)

    async def _serve_batch(self, connection: Connection, batch: protocol.InferBatch, payload: Any) -> None:
        calls = self._calls
        count = len(batch.parameters)

        def send(message: protocol.Message, answer: List[Any]) -> None:
            if not connection.channel.closed and not self._endpoint.send(connection, protocol.encode(message),
                                                                          answer):
                self._forget(connection)

        try:
            batch_sizes, outcome = calls.call(batch, payload, self.reader)
            await finish(calls, send, batch.batch_id, count, outcome, batch_sizes, self._ending_streams,
                         self._on_unrecoverable)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - a bug of ours must not leave requesters waiting (logged)
            error = calls.internal_error(exc)
            end: Any = (protocol.StreamEnd(batch.batch_id, (error,) * count) if calls.decoupled
                        else protocol.BatchResult(batch.batch_id, (error,) * count, (), ""))
            send(end, [])
        finally:
            if batch.traces:  # the answer went (or the batch was cancelled): its spans end
                tracing.end()


