"""The proxy's relay thread, for models whose `execute` returns before the answers exist.

A decoupled (streaming) model sends any number of responses per request, and a model whose
callable is a coroutine may have several batches in flight on one instance. For both, the
proxy's `execute` hands the batch to this thread and returns None at once, so Triton can pass
the instance its next batch; this thread forwards the batch to the worker and turns the
worker's `StreamPart`, `StreamEnd` and `BatchResult` messages into responses on each request's
response sender, the last one carrying the final flag.

It also watches the requesters: a request Triton marks cancelled (the client went away) gets a
final CANCELLED response, and when every request of a batch is gone the worker gets `Cancel` so
it stops generating. The thread owns the DEALER socket from here on; `execute` reaches it
through an inproc pipe, because a ZeroMQ socket must not be used from two threads.

Imports only the standard library, numpy, zmq and `pytriton.ipc`.
"""

from __future__ import annotations

import itertools
import os
import queue
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Sequence

import zmq

from pytriton.ipc import codec, protocol
from pytriton.ipc.shm import SegmentReader

_POLL_MS = 50
_CANCEL_CHECK_S = 0.1
_LIVENESS_CHECK_S = 1.0
_relay_ids = itertools.count()


class _Batch:
    """What the relay keeps of a batch in flight."""

    __slots__ = ("requests", "senders", "open", "cancel_sent")

    def __init__(self, requests: Sequence[Any], senders: Sequence[Any]) -> None:
        self.requests = requests
        self.senders = senders
        self.open = [True] * len(requests)
        self.cancel_sent = False


class Relay:
    """Forwards batches to the worker and answers their requests as the worker's messages arrive.

    Args:
        pb_utils: Triton's ``triton_python_backend_utils`` module (only importable in the stub).
        context: the proxy's ZeroMQ context.
        socket: the DEALER connected to the worker; owned by the relay thread from now on.
        model_name: for error messages.
        worker_pid: to notice a worker that died.
        watch_cancellation: poll ``request.is_cancelled()`` (decoupled models).
        one_at_a_time: `submit` waits until the previous batch is answered in full (a plain
            generator callable, which the worker runs one batch at a time anyway): meanwhile
            requests wait in Triton's queue, so the next batch gathers them and every streamed
            step carries the responses of all of them in one message.
    """

    def __init__(
        self,
        pb_utils: Any,
        context: zmq.Context[Any],
        socket: zmq.Socket[Any],
        model_name: str,
        worker_pid: int,
        pid_alive: Callable[[int], bool],
        watch_cancellation: bool,
        one_at_a_time: bool = False,
    ) -> None:
        self._pb = pb_utils
        self._final = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
        self._socket = socket
        self._model_name = model_name
        self._worker_pid = worker_pid
        self._pid_alive = pid_alive
        self._watch_cancellation = watch_cancellation
        self._reader = SegmentReader()
        self._pending: Dict[int, _Batch] = {}
        self._turn: Optional[threading.Semaphore] = threading.Semaphore(1) if one_at_a_time else None
        self._arrivals: queue.SimpleQueue[tuple[int, _Batch]] = queue.SimpleQueue()
        address = f"inproc://pytriton-relay-{os.getpid()}-{next(_relay_ids)}"
        self._pipe_in = context.socket(zmq.PAIR)
        self._pipe_in.setsockopt(zmq.LINGER, 0)
        self._pipe_in.bind(address)
        self._pipe_out = context.socket(zmq.PAIR)  # used by the thread that calls execute
        self._pipe_out.setsockopt(zmq.LINGER, 0)
        self._pipe_out.connect(address)
        self._thread = threading.Thread(target=self._run, name=f"pytriton-relay-{model_name}", daemon=True)
        self._thread.start()

    def submit(self, batch_id: int, frames: List[Any], requests: Sequence[Any], senders: Sequence[Any]) -> None:
        """Hand one encoded `InferBatch` to the relay (called from `execute`)."""
        if self._turn is not None:
            self._turn.acquire()
        self._arrivals.put((batch_id, _Batch(requests, senders)))
        self._pipe_out.send_multipart(frames, copy=False)

    def close(self) -> None:
        """Stop the thread; requests still open get an error (the model is being unloaded)."""
        self._pipe_out.send(b"")  # an empty frame: stop
        self._thread.join(5.0)
        self._pipe_out.close(linger=0)

    # --- the relay thread ------------------------------------------------------------------

    def _run(self) -> None:
        poller = zmq.Poller()
        poller.register(self._pipe_in, zmq.POLLIN)
        poller.register(self._socket, zmq.POLLIN)
        last_heard = time.monotonic()
        next_cancel_check = last_heard + _CANCEL_CHECK_S
        try:
            while True:
                events = dict(poller.poll(_POLL_MS))
                if self._pipe_in in events:
                    frames = self._pipe_in.recv_multipart(copy=False)
                    if len(frames) == 1 and not frames[0].bytes:
                        break
                    batch_id, batch = self._arrivals.get_nowait()
                    self._pending[batch_id] = batch
                    self._socket.send_multipart(frames, copy=False)
                if self._socket in events:
                    last_heard = time.monotonic()
                    message, payload = protocol.decode(self._socket.recv_multipart())
                    try:
                        self._on_message(message, payload)
                    except Exception as exc:  # noqa: BLE001 - one bad answer must not stop the relay
                        reason = f"internal error in the pytriton proxy: {exc}"
                        self._fail_batch(getattr(message, "batch_id", -1), reason)
                now = time.monotonic()
                if self._watch_cancellation and now >= next_cancel_check:
                    next_cancel_check = now + _CANCEL_CHECK_S
                    self._check_cancellations()
                if self._pending and now - last_heard > _LIVENESS_CHECK_S:
                    last_heard = now
                    if not self._pid_alive(self._worker_pid):
                        self._fail_all(f"the pytriton worker process (pid {self._worker_pid}) is gone")
        finally:
            self._fail_all("the model was unloaded before its responses were complete")
            self._pipe_in.close(linger=0)
            self._socket.close(linger=0)
            self._reader.close()

    def _on_message(self, message: protocol.Message, payload: Sequence[Any]) -> None:
        batch = self._pending.get(getattr(message, "batch_id", -1))
        if batch is None:
            return  # a batch already failed (worker declared gone) or an unknown message
        if isinstance(message, protocol.StreamPart):
            groups = codec.unpack(message.columns, "", payload, self._reader, len(message.present))
            for index, (present, error, arrays) in enumerate(zip(message.present, message.errors, groups)):
                if not (present and batch.open[index]):
                    continue
                if error is not None:
                    self._finish(batch, index, error)
                else:
                    batch.senders[index].send(self._response(arrays))
        elif isinstance(message, protocol.StreamEnd):
            for index, error in enumerate(message.errors):
                if batch.open[index]:
                    self._finish(batch, index, error)
            self._forget(message.batch_id)
        elif isinstance(message, protocol.BatchResult):
            groups = codec.unpack(message.columns, message.segment, payload, self._reader, len(message.errors))
            for index, (error, arrays) in enumerate(zip(message.errors, groups)):
                if error is not None:
                    self._finish(batch, index, error)
                else:
                    batch.senders[index].send(self._response(arrays), flags=self._final)
                    batch.open[index] = False
            self._forget(message.batch_id)

    def _forget(self, batch_id: int) -> None:
        """Drop a batch answered in full; the next batch may go (`one_at_a_time`)."""
        if self._pending.pop(batch_id, None) is not None and self._turn is not None:
            self._turn.release()

    def _response(self, arrays: Dict[str, Any]) -> Any:
        return self._pb.InferenceResponse([self._pb.Tensor(name, array) for name, array in arrays.items()])

    def _finish(self, batch: _Batch, index: int, error: Optional[str], code: Optional[int] = None) -> None:
        """Close request `index`'s stream: with an error response, or with the final flag alone."""
        batch.open[index] = False
        sender = batch.senders[index]
        if error is None:
            sender.send(flags=self._final)
        else:
            triton_error = self._pb.TritonError(error) if code is None else self._pb.TritonError(error, code)
            sender.send(self._pb.InferenceResponse(error=triton_error), flags=self._final)

    def _check_cancellations(self) -> None:
        cancelled_code = getattr(self._pb.TritonError, "CANCELLED", None)
        for batch_id, batch in self._pending.items():
            for index, request in enumerate(batch.requests):
                if batch.open[index] and request.is_cancelled():
                    self._finish(batch, index, f"Model '{self._model_name}': the request was cancelled",
                                 cancelled_code)
            if not batch.cancel_sent and not any(batch.open):
                batch.cancel_sent = True
                self._socket.send_multipart(protocol.encode(protocol.Cancel(batch_id)))

    def _fail_batch(self, batch_id: int, reason: str) -> None:
        batch = self._pending.get(batch_id)
        if batch is None:
            return
        for index, is_open in enumerate(batch.open):
            if is_open:
                try:
                    self._finish(batch, index, f"Model '{self._model_name}': {reason}")
                except Exception:  # noqa: BLE001 - the sender itself is broken; nothing more to tell
                    pass
        self._forget(batch_id)

    def _fail_all(self, reason: str) -> None:
        for batch_id in list(self._pending):
            self._fail_batch(batch_id, reason)
