"""The blocking loop: one thread receives a batch, runs a plain callable on it and sends the answer.

The loop of every handler whose callable is a plain function (or a generator, for a decoupled
model). Its thread sleeps in `HandlerEndpoint.wait` and is the one the kernel wakes when a
proxy sends a batch; it reads the batch into its connection's buffer, calls the callable on
arrays that view that buffer (or the proxy's arena), and sends the answer before it reads
anything else. No other thread and no lock is on this path. The batch goes to
`pytriton.worker.batches.BatchCalls.serve` once, which gives back its answer (taking a plain
``@batch`` function's batch the whole-batch lane's way when it fits, as most do) or what the call
left running.

What the callable returns decides how the answer travels:

- a list (one response per request): one `BatchResult`, large outputs in the handler's arena;
- a generator (decoupled models): a `StreamPart` per value it yields, then a `StreamEnd`; what
  arrived meanwhile is read between values, so a `Cancel` from the proxy closes the generator
  (other messages wait their turn);
- a coroutine (an async callable behind a plain wrapper, found only at call time): run to its
  end here, by `pytriton.worker.asynchronous.finish`.

Timing stamps of the hop, for the benchmark's breakdown (``bench/run.py --breakdown``), are off
unless the serving process has ``PYTRITON_HOP_STAMPS`` set to a folder. Then every model of
plain callables records, for each batch, the eight `time.monotonic_ns` stamps of
`pytriton.ipc.protocol.Stamp`: the proxy takes two before sending and two after the answer, this
loop four in between (one host, one monotonic clock, so the differences are the stages'
durations). The proxy sends each batch's complete record with its next batch, and the loop
keeps the records in memory (a bounded number, `StampLog`) until its handler stops, when it
writes them as one JSON file per handler: ``<folder>/<model>-<instance>-<pid>.json``.
"""

from __future__ import annotations

import asyncio
import collections
import inspect
import json
import logging
import os
import re
import threading
import time
from typing import Any, Callable, Deque, Generator, List, Optional, Sequence, Tuple

from pytriton.environment import HOP_STAMPS
from pytriton.ipc import protocol
from pytriton.ipc.channel import ChannelClosed
from pytriton.ipc.protocol import Stamp
from pytriton.ipc.shm import IDLE_RELEASE_S, Arena, SegmentReader
from pytriton.metrics import set_current_registry
from pytriton.worker import tracing
from pytriton.worker.asynchronous import finish
from pytriton.worker.batches import BatchCalls, NotDecoupled
from pytriton.worker.context import set_current_context
from pytriton.worker.endpoint import Connection, HandlerEndpoint
from pytriton.worker.instance import InstanceSpec
from pytriton.worker.outcomes import Expected, Running

logger = logging.getLogger("pytriton.worker")

POLL_MS = 100
"""How long the loop sleeps at most: how soon it sees a stop, and looks whether it is idle."""

MAX_RECORDS = 200_000
"""How many stamp records a handler keeps (the oldest go first)."""


def stamps_folder() -> Optional[str]:
    """The folder of the stamp files, when recording is on."""
    return os.environ.get(HOP_STAMPS) or None


class StampLog:
    """The stamp records of one handler, written to its file by `write`."""

    def __init__(self, folder: str, model_name: str, instance: int) -> None:
        safe = re.sub(r"[^A-Za-z0-9_.-]", "_", model_name)
        self.path = os.path.join(folder, f"{safe}-{instance}-{os.getpid()}.json")
        self._model_name = model_name
        self._records: Deque[Tuple[int, ...]] = collections.deque(maxlen=MAX_RECORDS)

    def add_previous(self, stamps: Sequence[int]) -> Tuple[int, ...]:
        """Keep the previous batch's record carried by an `InferBatch`; this batch's first stamps."""
        if len(stamps) == Stamp.COUNT + 2:
            self._records.append(tuple(stamps[: Stamp.COUNT]))
        return tuple(stamps[-2:])

    def write(self) -> None:
        if not self._records:
            return
        with open(self.path, "w", encoding="utf-8") as handle:
            json.dump({"model": self._model_name, "records": list(self._records)}, handle)


class BlockingLoop:
    """Serves one handler's proxies from one thread (see the module docstring).

    Args:
        endpoint: the handler's sockets.
        calls: runs the callable on a batch.
        spec: the instance (its segments' prefix and number name the output arena).
        use_arenas: large outputs travel in arenas (False: inline, as for decoupled models).
        stop: set to end the loop.
        ending_streams: set to cut the streams in flight short.
        on_unrecoverable: called before the answer goes when the callable declared the model dead.
        stamp_log: where the batches' timing stamps go (None: not recorded).
        busy_since: set to the `time.monotonic` start of the batch being served (0.0: none): what
            `InstanceHandler.idle` and `InstanceHandler.busy_for` read.
    """

    def __init__(
        self,
        endpoint: HandlerEndpoint,
        calls: BatchCalls,
        *,
        spec: InstanceSpec,
        use_arenas: bool,
        stop: threading.Event,
        ending_streams: threading.Event,
        on_unrecoverable: Callable[[str], None],
        stamp_log: Optional[StampLog],
        busy_since: Any,
    ) -> None:
        self._endpoint = endpoint
        self._busy_since = busy_since
        self._calls = calls
        self._stop = stop
        self._ending_streams = ending_streams
        self._on_unrecoverable = on_unrecoverable
        self._stamp_log = stamp_log
        self._shm_prefix = spec.shm_prefix
        self._instance = spec.instance
        self._use_arenas = use_arenas
        self._arena: Optional[Arena] = None
        self.reader = SegmentReader()
        """Maps the proxies' input arenas."""
        self._backlog: Deque[Tuple[Connection, Any, Any]] = collections.deque()  # arrived during a stream
        self._serving: Tuple[Optional[Connection], int] = (None, 0)
        """The connection and id of the batch being served (see `_read_serving_cancels`)."""
        self._serving_cancels = self._read_serving_cancels  # bound once, not once per batch
        self._private_loop: Optional[asyncio.AbstractEventLoop] = None
        self._last_message = time.monotonic()
        self._idle_released = True  # nothing is held before the first message

    def run(self) -> None:
        set_current_context(self._calls.context)
        set_current_registry(self._calls.measures.registry)  # the callable's own metrics go there
        endpoint = self._endpoint
        while not self._stop.is_set():
            if self._backlog:
                self._on_message(*self._backlog.popleft())
                continue
            ready = endpoint.wait(POLL_MS)
            if not ready:
                self._release_if_idle()
                continue
            for connection in ready:
                try:
                    received = connection.channel.receive()
                except ChannelClosed:
                    endpoint.drop(connection)  # its stub died or was unloaded
                    continue
                if received is not None:
                    self._on_message(connection, *received)

    def close(self) -> None:
        """Release the arenas and mappings (after the thread ended)."""
        if self._arena is not None:
            self._arena.close()
        self.reader.close()
        if self._private_loop is not None:
            self._private_loop.close()
        if self._stamp_log is not None:
            self._stamp_log.write()

    def _release_if_idle(self) -> None:
        """After `IDLE_RELEASE_S` without a message, hold no shared memory: the output arena goes
        (unlinked) and so do the mappings of the proxies' input arenas (their owners unlink those
        at their next message; a later batch maps them again). Once per quiet spell."""
        if self._idle_released:
            return
        now = time.monotonic()
        if now - self._last_message < IDLE_RELEASE_S:
            return
        if self._arena is not None and self._arena.capacity and not self._arena.release_if_idle(now):
            return  # the last answer was written after the last message came: look again later
        self.reader.close()
        self._idle_released = True

    def _on_message(self, connection: Connection, header: Any, payload: Any) -> None:
        received = time.monotonic_ns() if self._stamp_log is not None else 0
        now = self._last_message = time.monotonic()
        self._idle_released = False
        try:
            message = protocol.decode(header)
        except ValueError:
            logger.exception("Model '%s': dropped an unreadable message", self._calls.model_name)
            return
        if type(message) is protocol.InferBatch:
            busy_since = self._busy_since
            busy_since.value = now
            try:
                self._serve_batch(connection, message, payload, received)
            finally:
                busy_since.value = 0.0
                if message.traces:  # the answer went: the batch's spans end
                    tracing.end()
        elif isinstance(message, protocol.Hello):  # the backend greets on its data connection
            self._endpoint.greet(connection, message)
        # a Cancel for a batch that already ended needs nothing

    def _serve_batch(self, connection: Connection, batch: protocol.InferBatch, payload: Any, received: int) -> None:
        """Hand the batch to `BatchCalls.serve` (its one way in and out), and send the answer it
        gives; or run what the call left running (a generator, a coroutine) to its end."""
        calls = self._calls
        marks: Optional[List[int]] = None
        if self._stamp_log is not None:
            marks = [*self._stamp_log.add_previous(batch.stamps), received]
        self._serving = (connection, batch.batch_id)
        try:
            answer = calls.serve(batch, payload, self.reader, self._output_arena(), marks, self._serving_cancels)
            if type(answer) is Running:
                self._run(connection, batch, answer)
                return
            result, parts = answer
        except Exception as exc:  # noqa: BLE001 - a bug of ours must not leave requesters waiting (logged)
            calls.probe.end()  # the batch is given up: let go of its requests
            result, parts = protocol.BatchResult(batch.batch_id, (calls.internal_error(exc),) * len(batch.parameters),
                                                 (), ""), []
        if result.unrecoverable:  # before the reply, so is_alive() is false once a client sees it
            self._on_unrecoverable(calls.model_name)
        if marks is not None and len(marks) == protocol.Stamp.CALLED + 1:
            result = result._replace(stamps=(*marks, time.monotonic_ns()))
        self._endpoint.send(connection, protocol.encode(result), parts)

    def _run(self, connection: Connection, batch: protocol.InferBatch, running: Running) -> None:
        """Run what a batch's call left running to its end: a generator streams its values, a
        coroutine (an async callable behind a plain wrapper) is awaited here."""
        count = len(batch.parameters)
        try:
            if inspect.isgenerator(running.outcome):
                self._stream(connection, batch.batch_id, count, running.outcome, running.batch_sizes)
            else:
                self._run_coroutine(connection, batch.batch_id, count, running.outcome, running.batch_sizes)
        finally:
            self._calls.probe.end()  # its requests learn nothing more

    def _run_coroutine(self, connection: Connection, batch_id: int, count: int, outcome: Any,
                       batch_sizes: Expected) -> None:
        """Run a coroutine found at call time to its end here; batches of this instance then do not overlap."""
        if self._private_loop is None:
            self._private_loop = asyncio.new_event_loop()

        def send(message: protocol.Message, payload: List[Any]) -> None:
            self._endpoint.send(connection, protocol.encode(message), payload)

        self._private_loop.run_until_complete(
            finish(self._calls, send, batch_id, count, outcome, batch_sizes, self._ending_streams,
                   self._on_unrecoverable)
        )

    def _stream(
        self, connection: Connection, batch_id: int, count: int, generator: Generator[Any, Any, Any],
        batch_sizes: Expected,
    ) -> None:
        """Send each value the generator yields as a `StreamPart`, then a `StreamEnd`."""
        calls = self._calls
        errors: Tuple[Optional[str], ...] = (None,) * count
        unrecoverable = False
        started = time.perf_counter()
        failed = 0
        try:
            if not calls.decoupled:
                raise NotDecoupled(calls.not_decoupled_message())
            for step in generator:
                part, payload = calls.part(batch_id, count, step, batch_sizes)
                if not self._endpoint.send(connection, protocol.encode(part), payload):
                    generator.close()  # its proxy is gone: nobody reads the rest
                    calls.measures.batch_done(started)
                    return
                if self._ending_streams.is_set():
                    generator.close()  # runs the generator's finally blocks now
                    errors = (calls.cut_message(),) * count
                    break
                if self._cancelled(connection, batch_id):
                    generator.close()
                    logger.debug("Model '%s': batch %d cancelled by its requesters", calls.model_name, batch_id)
                    break
        except Exception as exc:  # noqa: BLE001 - the callable's error goes to this batch's requesters only
            error, unrecoverable = calls.callable_error(exc)
            errors = (error,) * count
            failed = count
        calls.measures.batch_done(started, failed)
        if unrecoverable:
            self._on_unrecoverable(calls.model_name)
        end = protocol.StreamEnd(batch_id, errors, unrecoverable)
        self._endpoint.send(connection, protocol.encode(end))

    def _read_serving_cancels(self) -> Optional[Tuple[int, ...]]:
        """`_read_cancels` for the batch being served: what its requests' ``is_cancelled()`` reads."""
        connection, batch_id = self._serving
        assert connection is not None, "no batch is being served"
        return self._read_cancels(connection, batch_id)

    def _cancelled(self, streaming: Connection, batch_id: int) -> bool:
        """Whether every requester of the stream `batch_id` has gone (see `_read_cancels`)."""
        return self._read_cancels(streaming, batch_id) == ()

    def _read_cancels(self, current: Connection, batch_id: int) -> Optional[Tuple[int, ...]]:
        """Read what arrived while a batch runs: `Cancel`s of this batch, or work kept for later.

        Returns the positions of the latest `Cancel` of `batch_id` (``()``: all of them), or
        None when none arrived. Kept messages are read into memory of their own: the running
        batch's inputs still view the connection's buffer.
        """
        cancelled: Optional[Tuple[int, ...]] = None
        while ready := self._endpoint.wait(0):
            for connection in ready:
                try:
                    received = connection.channel.receive(keep=True)
                except ChannelClosed:
                    self._endpoint.drop(connection)  # the streaming one too: its next send ends the stream
                    continue
                if received is None:
                    continue
                try:
                    message = protocol.decode(received[0])
                except ValueError:
                    logger.exception("Model '%s': dropped an unreadable message", self._calls.model_name)
                    continue
                if isinstance(message, protocol.Cancel):
                    if connection is current and message.batch_id == batch_id and cancelled != ():
                        cancelled = message.requests
                else:
                    self._backlog.append((connection, *received))
        return cancelled

    def _output_arena(self) -> Optional[Arena]:
        """The arena of large outputs (None: answers go inline)."""
        if not self._use_arenas:
            return None
        if self._arena is None:
            prefix, instance = self._shm_prefix, self._instance
            self._arena = Arena(lambda generation: protocol.segment_name(prefix, instance, "out", generation))
        return self._arena
