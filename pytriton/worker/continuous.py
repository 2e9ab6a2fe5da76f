"""Continuous batching: one step at a time over the streams active now, which join and leave between steps.

The loop of a handler whose callable is a step function marked by
``@pytriton.decorators.continuous`` (a `ContinuousStep`). A streaming model that generates piece by
piece (tokens, frames, denoising steps) serves many streams at once best when they share each step;
a generator bound the usual way yields for a whole batch, which lives until its longest stream ends,
so a request arriving a moment after the batch began waits for the next one. Here the unit is the
step: between two steps the loop reads what arrived, lets new streams join (up to the instance's
capacity, `ModelConfig.max_batch_size`; the rest wait their turn in arrival order), drops the streams
whose requesters went away or whose deadline passed, calls the step function once on the streams
active now, and sends each its piece. A stream the function finishes (`Stream.finish`, or the step
limit) gets its last piece and leaves at once; the others go on.

What crosses the wire is the decoupled models' (`pytriton.ipc.protocol`): each request comes in an
`InferBatch` from pytriton's backend, which hands the instance a batch whenever it holds fewer
than twice its capacity (those running and as many waiting to join: one joins at the very step
after another leaves; ``relay.c``), and each step answers with one `StreamPart` per batch the
step's streams came in, its `final` flags ending the streams that finish; a batch whose streams
have all ended gets its `StreamEnd`. The backend tells the loop of each requester that went away
(a `Cancel` with its position).

Failures stay where they belong: an exception from the step function fails the streams of that
step with the function's message, and the loop goes on with the streams that join next; a stream
the function fails (`Stream.fail`) or whose piece is malformed ends alone.
"""

from __future__ import annotations

import asyncio
import collections
import inspect
import logging
import threading
import time
from typing import Any, Callable, Deque, Dict, List, Mapping, Optional, Sequence, Tuple

from pytriton.exceptions import PyTritonModelConfigError
from pytriton.ipc import protocol
from pytriton.ipc.channel import ChannelClosed
from pytriton.ipc.shm import SegmentReader
from pytriton.metrics import set_current_registry
from pytriton.model_config.instances import InstanceSetup
from pytriton.worker.batches import BatchCalls, batch_size, pop_expired
from pytriton.worker.context import set_current_context
from pytriton.worker.endpoint import Connection, HandlerEndpoint
from pytriton.worker.outcomes import Expected, Failure, WholeOutputs
from pytriton.worker.request import Request
from pytriton.worker.responses import per_request, step_outputs, step_part

logger = logging.getLogger("pytriton.worker")

POLL_MS = 100
"""How long the loop waits for a request while it runs no stream (and how soon it then sees a stop)."""


class Stream:
    """One request's stream, as a continuous step function sees it.

    The same object comes back at every step of the stream, so the function may keep what it
    needs in `state` (a token list, a cache index, a generator of its own).

    Attributes:
        inputs: the request's input arrays by name (with the batch axis, as a plain callable gets
            them: a `Request`, which also carries `parameters`).
        parameters: the request's parameters (what its client sent, e.g. a token limit).
        state: the step function's own; None when the stream joins.
        steps: how many steps the stream took part in before this one (0 on its first).
    """

    __slots__ = ("inputs", "parameters", "state", "steps", "_batch", "_position", "_deadline_ms", "_arrived",
                 "_ending", "_error", "_gone", "_wrapper", "_key", "_size", "_asked", "_fd")
    _batch: Any  # the loop's _Batch it came in (None for a warm-up's)
    _wrapper: Any  # what a wrapper between pytriton and the user's function keeps (`bind_chat`'s)

    def __init__(self, request: Request, batch: Optional[_Batch] = None, position: int = 0,
                 deadline_ms: Optional[float] = None) -> None:
        self.inputs = request
        self.parameters = request.parameters
        self.state: Any = None
        self.steps = 0
        self._batch = batch
        self._position = position
        self._deadline_ms = deadline_ms
        # When it reached the worker (the backend's send); None once its first piece went.
        self._arrived: Optional[int] = (batch and batch.sent_ns) or time.monotonic_ns()
        self._ending = False
        self._error: Optional[str] = None
        self._gone = False
        self._wrapper: Any = None
        # What each step's message needs of it, read once here (the step's path is per stream).
        self._key = (batch.batch_id, position) if batch is not None else (0, position)
        self._size: Optional[int] = batch.sizes[position] if batch is not None else None
        self._asked: Tuple[str, ...] = (batch.sizes.asked(position) or ()) if batch is not None else ()
        self._fd = batch.connection.channel.fileno() if batch is not None else -1

    def finish(self) -> None:
        """End the stream after this step: the piece returned for it now (if any) is its last."""
        self._ending = True

    def fail(self, message: str) -> None:
        """End the stream with an error its requester gets (instead of this step's piece); the
        other streams go on."""
        self._error = str(message)

    @property
    def finished(self) -> bool:
        """Whether `finish` or `fail` was called on it."""
        return self._ending or self._error is not None

    def __repr__(self) -> str:
        batch = self._batch.batch_id if self._batch is not None else "-"
        return f"<Stream {batch}:{self._position} step {self.steps}>"


class ContinuousStep:
    """A step function marked for continuous batching (see the module docstring).

    Args:
        function: ``step(streams) -> pieces``: one entry per stream of the list, in its order: a
            mapping of output name to array (the stream's piece at this step) or None (no piece
            this step); or one mapping of output name to array with one row per stream, in the
            list's order (what a batched forward pass gives: sent as it is, no per-stream split).
            May be a coroutine function.
        max_steps: end every stream after this many steps (None: only the function ends them).
    """

    def __init__(self, function: Callable[[List[Stream]], Any], max_steps: Optional[int] = None) -> None:
        if not callable(function):
            raise TypeError(f"@continuous needs a callable step function, got {function!r}")
        if max_steps is not None and (not isinstance(max_steps, int) or isinstance(max_steps, bool) or max_steps < 1):
            raise ValueError(f"@continuous(max_steps={max_steps!r}): expected an int >= 1, or None")
        self.function = function
        self.max_steps = max_steps
        self.__name__ = getattr(function, "__name__", type(function).__name__)
        self.__doc__ = getattr(function, "__doc__", None)

    def __call__(self, streams: List[Stream]) -> Any:
        return self.function(streams)

    def __repr__(self) -> str:
        return f"continuous({self.__name__})"


def is_continuous(func: Any) -> bool:
    """Whether `func` is a step function marked with ``@continuous`` (an `InstanceSetup` that builds
    one in a worker process says so itself: ``InstanceSetup(..., continuous=True)``)."""
    return bool(func.continuous) if isinstance(func, InstanceSetup) else isinstance(func, ContinuousStep)


WARMUP_STEPS = 64
"""The most steps a warm-up stream runs, when neither the function nor ``max_steps`` ends it sooner."""


def warm_up(step: ContinuousStep, request: Request) -> None:
    """Run `step` over one stream of `request`, as a warm-up: step after step until the function
    finishes it (or ``max_steps``, at most `WARMUP_STEPS`). Raises what the function raises, or
    the error it failed the stream with."""
    stream = Stream(request)
    for _ in range(min(step.max_steps or WARMUP_STEPS, WARMUP_STEPS)):
        outcome = step([stream])
        if inspect.iscoroutine(outcome):
            asyncio.run(outcome)
        stream.steps += 1
        if stream._error is not None:
            raise RuntimeError(stream._error)
        if stream._ending:
            return


class _Batch:
    """The requests that came in one `InferBatch`: where their parts go, and how many still stream."""

    __slots__ = ("connection", "batch_id", "count", "open", "sizes", "streams", "sent_ns")

    def __init__(self, connection: Connection, batch_id: int, count: int, sizes: Expected, sent_ns: int) -> None:
        self.connection = connection
        self.batch_id = batch_id
        self.count = count
        self.open = count
        self.sizes = sizes
        self.streams: List[Optional[Stream]] = [None] * count
        self.sent_ns = sent_ns


class ContinuousLoop:
    """Serves one handler's streams a step at a time, on one thread (see the module docstring).

    Args:
        endpoint: the handler's sockets.
        calls: the instance's batch steps (requests, error messages, measures, output checks).
        step: the marked step function.
        capacity: the streams one step may hold (`ModelConfig.max_batch_size`).
        stop: set to end the loop.
        ending_streams: set to cut the streams in flight short (the server stops).
        on_unrecoverable: called when the function declared the model dead.
        busy_since: the start of the step being run, or of the last one while streams are open
            (0.0 while none is): `InstanceHandler.idle` and the hang watch read it.
    """

    def __init__(
        self,
        endpoint: HandlerEndpoint,
        calls: BatchCalls,
        *,
        step: ContinuousStep,
        capacity: int,
        stop: threading.Event,
        ending_streams: threading.Event,
        on_unrecoverable: Callable[[str], None],
        busy_since: Any,
    ) -> None:
        self._endpoint = endpoint
        self._calls = calls
        self._step = step
        self._capacity = max(1, int(capacity))
        self._stop = stop
        self._ending_streams = ending_streams
        self._on_unrecoverable = on_unrecoverable
        self._busy_since = busy_since
        self._waiting: Deque[Stream] = collections.deque()
        self._active: List[Stream] = []
        self._batches: Dict[Tuple[int, int], _Batch] = {}  # by (connection fd, batch id)
        self._private_loop: Optional[asyncio.AbstractEventLoop] = None
        # What spares each step a pass over its streams: the connection the batches came on (and
        # whether any came on another since: the backend reconnected), how many streams asked for
        # some outputs only, and how many still wait for their first piece (the last two may
        # overcount after a connection is forgotten, which only costs that pass).
        self._fd: Optional[int] = None
        self._mixed = False
        self._asking = 0
        self._fresh = 0
        self.reader = SegmentReader()  # relayed batches travel inline; kept for the handler's calls

    def run(self) -> None:
        set_current_context(self._calls.context)
        set_current_registry(self._calls.measures.registry)
        while not self._stop.is_set():
            self._read(0 if self._active or self._waiting else POLL_MS)
            if self._ending_streams.is_set() and self._batches:
                self._cut_all()
            self._admit()
            if self._active:
                self._run_step()
            else:
                self._busy_since.value = 0.0

    def close(self) -> None:
        self.reader.close()
        if self._private_loop is not None:
            self._private_loop.close()

    # ---- what arrives ----------------------------------------------------------------------------

    def _read(self, timeout_ms: int) -> None:
        """Take every message that arrived (waiting up to `timeout_ms` for the first)."""
        endpoint = self._endpoint
        ready = endpoint.wait(timeout_ms)
        while ready:
            for connection in ready:
                try:
                    received = connection.channel.receive(keep=True)  # streams outlive the channel's buffer
                except ChannelClosed:
                    self._forget_connection(connection)
                    continue
                if received is not None:
                    self._on_message(connection, *received)
            ready = endpoint.wait(0)

    def _on_message(self, connection: Connection, header: Any, payload: Any) -> None:
        try:
            message = protocol.decode(header)
        except ValueError:
            logger.exception("Model '%s': dropped an unreadable message", self._calls.model_name)
            return
        if isinstance(message, protocol.InferBatch):
            self._join(connection, message, payload)
        elif isinstance(message, protocol.Cancel):
            self._cancel(connection, message)
        elif isinstance(message, protocol.Hello):  # the backend greets on its data connection
            self._endpoint.greet(connection, message)

    def _join(self, connection: Connection, message: protocol.InferBatch, payload: Any) -> None:
        calls = self._calls
        count = len(message.parameters)
        batch = _Batch(connection, message.batch_id, count, Expected([None] * count, message.requested),
                       message.sent_ns)
        fd = connection.channel.fileno()
        if fd != self._fd:
            self._mixed = self._mixed or self._fd is not None
            self._fd = fd
        self._batches[(fd, message.batch_id)] = batch
        try:
            requests = calls.requests(message, payload, self.reader)
        except Exception as exc:  # noqa: BLE001 - a bad batch fails its own requesters only
            self._end_batch(batch, calls.callable_error(exc)[0])
            return
        if calls.strict and calls.context.config.batching:
            batch.sizes[:] = [batch_size(request) for request in requests]
        pop_expired(requests, time.time())  # keeps each deadline on its request; judged at admission
        for position, request in enumerate(requests):
            stream = Stream(request, batch, position, getattr(request, "_deadline_ms", None))
            batch.streams[position] = stream
            self._waiting.append(stream)
            self._fresh += 1
            if stream._asked:
                self._asking += 1

    def _cancel(self, connection: Connection, message: protocol.Cancel) -> None:
        """Requesters went away: their streams leave before the next step (the backend has
        answered them already)."""
        batch = self._batches.get((connection.channel.fileno(), message.batch_id))
        if batch is None:
            return
        positions = message.requests or range(batch.count)
        emptied = False
        for position in positions:
            stream = batch.streams[position] if 0 <= position < batch.count else None
            if stream is not None and not stream._gone:
                logger.debug("Model '%s': stream %r cancelled by its requester", self._calls.model_name, stream)
                emptied = self._leave(stream) or emptied
        if emptied:  # nothing more will come of it: the backend may forget it now
            self._send_end(batch, None)

    def _leave(self, stream: Stream) -> bool:
        """`stream` ends; whether that was the last open stream of its batch (then forgotten here)."""
        if stream._gone:
            return False
        stream._gone = True
        if stream._arrived is not None:
            self._fresh -= 1
        if stream._asked:
            self._asking -= 1
        batch = stream._batch
        batch.open -= 1
        if batch.open > 0:
            return False
        key = (stream._fd, batch.batch_id)
        if self._batches.get(key) is batch:
            del self._batches[key]
        return True

    def _forget_connection(self, connection: Connection) -> None:
        """The backend's connection closed: its streams have nobody to answer."""
        fd = connection.channel.fileno()
        for key in [key for key, batch in self._batches.items() if batch.connection is connection]:
            for stream in self._batches.pop(key).streams:
                if stream is not None:
                    stream._gone = True
        self._active = [stream for stream in self._active if not stream._gone]
        self._waiting = collections.deque(stream for stream in self._waiting if not stream._gone)
        self._endpoint.drop(connection)
        logger.debug("Model '%s': connection %d closed", self._calls.model_name, fd)

    # ---- the steps -------------------------------------------------------------------------------

    def _admit(self) -> None:
        """Let waiting streams join, in arrival order, while the step has room; drop those gone."""
        now_ms = time.time() * 1000
        active = [stream for stream in self._active if not stream._gone]
        expired = [stream for stream in active if _past(stream, now_ms)]
        if expired:
            self._fail(expired, self._deadline_message())
            active = [stream for stream in active if not stream._gone]
        while self._waiting and len(active) < self._capacity:
            stream = self._waiting.popleft()
            if stream._gone:
                continue
            if _past(stream, now_ms):
                self._fail([stream], self._deadline_message())
                continue
            active.append(stream)
        self._active = active

    def _run_step(self) -> None:
        calls = self._calls
        streams = self._active
        measures = calls.measures
        started = time.monotonic()
        self._busy_since.value = started
        began = measures.batch_started(len(streams), 0, 0)
        try:
            outcome = self._step(streams)
            if inspect.iscoroutine(outcome):
                outcome = self._await(outcome)
        except Exception as exc:  # noqa: BLE001 - the function's error goes to the streams of this step only
            error, unrecoverable = calls.callable_error(exc)
            measures.batch_done(began, len(streams))
            if unrecoverable:
                self._on_unrecoverable(calls.model_name)
            self._fail(list(streams), error)
            self._active = []
            self._busy_since.value = time.monotonic() if self._waiting else 0.0
            return
        measures.batch_done(began)
        if isinstance(outcome, Mapping):  # every stream's piece as one row of each output
            outcome = step_outputs(calls.context, outcome, len(streams))
        entries = outcome if type(outcome) is WholeOutputs else per_request(calls.context, len(streams), outcome,
                                                                             "returned")
        self._answer(streams, entries)
        self._active = [stream for stream in streams if not stream._gone]
        self._busy_since.value = time.monotonic() if self._active or self._waiting else 0.0

    def _await(self, coroutine: Any) -> Any:
        if self._private_loop is None:
            self._private_loop = asyncio.new_event_loop()
        return self._private_loop.run_until_complete(coroutine)

    def _answer(self, streams: List[Stream], entries: Any) -> None:
        """Send the step's pieces (a list of one entry per stream, or a `WholeOutputs`), one
        `StepPart` for all its streams; end the finished."""
        limit = self._step.max_steps
        final = []
        failed = False
        for stream in streams:
            stream.steps += 1
            if stream._error is not None:
                failed = True
            elif limit is not None and stream.steps >= limit:
                stream._ending = True
            final.append(stream._ending or stream._error is not None)
        if failed:
            entries = _each(entries)
            for index, stream in enumerate(streams):
                if stream._error is not None:
                    entries[index] = Failure(stream._error)
        self._send_step(streams, entries, final)

    def _fail(self, streams: List[Stream], error: str) -> None:
        """End `streams` with `error`."""
        self._send_step(streams, [Failure(error)] * len(streams), [True] * len(streams))

    def _send_step(self, streams: List[Stream], entries: Any, final: List[bool]) -> None:
        """One `StepPart` for the streams' pieces (one per connection their batches came on: one,
        but for the moment a new connection replaces the backend's old one); end the finished."""
        fd = streams[0]._fd
        if self._mixed and any(stream._fd != fd for stream in streams):
            entries = _each(entries)
            by_fd: Dict[int, List[int]] = {}
            for index, stream in enumerate(streams):
                by_fd.setdefault(stream._fd, []).append(index)
            for indices in by_fd.values():
                self._send_step([streams[i] for i in indices], [entries[i] for i in indices],
                                [final[i] for i in indices])
            return
        calls = self._calls
        sizes = Expected([stream._size for stream in streams],
                         tuple([stream._asked for stream in streams]) if self._asking else ())
        batch_ids, positions = zip(*[stream._key for stream in streams])
        message, payload = step_part(calls.context, batch_ids, positions, entries, sizes, calls.strict, tuple(final))
        self._record_pieces(streams, message.present)
        connection = streams[0]._batch.connection
        if not self._endpoint.send(connection, protocol.encode(message), payload):
            self._forget_connection(connection)
            return
        for stream, last, error in zip(streams, final, message.errors):
            if last or error is not None:  # the backend ended it with this message (and its batch, if the last)
                self._leave(stream)

    def _send_end(self, batch: _Batch, error: Optional[str]) -> None:
        end = protocol.StreamEnd(batch.batch_id, (error,) * batch.count)
        if not batch.connection.channel.closed and not self._endpoint.send(batch.connection, protocol.encode(end)):
            self._forget_connection(batch.connection)

    def _end_batch(self, batch: _Batch, error: Optional[str]) -> None:
        """End every stream of `batch` at once (`error` for those still open, None for a clean end)."""
        for stream in batch.streams:
            if stream is not None:
                self._leave(stream)
        key = (batch.connection.channel.fileno(), batch.batch_id)
        if self._batches.get(key) is batch:
            del self._batches[key]
        self._send_end(batch, error)

    def _cut_all(self) -> None:
        """The server stops: every stream still open ends with the cut's message."""
        message = self._calls.cut_message()
        for batch in list(self._batches.values()):
            self._end_batch(batch, message)
        self._active = []
        self._waiting.clear()

    def _record_pieces(self, streams: List[Stream], present: Tuple[bool, ...]) -> None:
        firsts = []
        if self._fresh > 0:  # some stream may get its first piece now
            now = time.monotonic_ns()
            for stream, here in zip(streams, present):
                if here and stream._arrived is not None:
                    firsts.append((now - stream._arrived) / 1e9)
                    stream._arrived = None
                    self._fresh -= 1
        self._calls.measures.pieces_sent(present.count(True), firsts)

    def _deadline_message(self) -> str:
        return (f"Model '{self._calls.model_name}': the request's deadline (its client's inference timeout) passed; "
                "its stream was ended")


def _each(entries: Any) -> List[Any]:
    """A step's entries as a list of one per stream (a `WholeOutputs` split into its rows)."""
    return list(entries.responses()) if type(entries) is WholeOutputs else entries


def _past(stream: Stream, now_ms: float) -> bool:
    return stream._deadline_ms is not None and stream._deadline_ms < now_ms


def continuous_capacity(model_name: str, funcs: Sequence[Any], config: Any) -> int:
    """The streams one instance runs at once when the model's callables are ``@continuous`` step
    functions (its ``max_batch_size``); 0 when none is. The checks `bind` makes of such a model.

    Raises:
        PyTritonModelConfigError: some instances' callables are step functions and others not, or
            the model's configuration does not fit continuous batching.
    """
    marked = [is_continuous(func) for func in funcs]
    if not any(marked):
        return 0
    model = f"model '{model_name}'"
    if not all(marked):
        raise PyTritonModelConfigError(
            f"{model}: some of its instances' callables are @continuous step functions and others not; give every "
            "instance a @continuous step function, or none")
    if not config.decoupled:
        raise PyTritonModelConfigError(
            f"{model}: a @continuous step function streams its pieces; bind it with "
            "config=ModelConfig(decoupled=True, max_batch_size=N), N the streams one instance runs at once")
    if type(config.batcher).__name__ == "SequenceBatcher":
        raise PyTritonModelConfigError(
            f"{model}: a @continuous step function keeps each stream's state itself; it cannot serve a sequence "
            "batcher's requests (leave ModelConfig.batcher at its default)")
    asked = [name for name, value in (("isolate_failures", config.isolate_failures),
                                      ("execution_timeout_s", config.execution_timeout_s)) if value]
    if asked:
        raise PyTritonModelConfigError(
            f"{model}: ModelConfig({', '.join(f'{name}=...' for name in asked)}) does not apply to a @continuous "
            "step function: a step's exception fails the streams of that step only; use Stream.fail for one stream")
    return max(1, int(config.max_batch_size))
