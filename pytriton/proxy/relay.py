"""The proxy's relay thread, for models whose `execute` returns before the answers exist.

A decoupled (streaming) model sends any number of responses per request, and a model whose
callable is a coroutine may have several batches in flight on one instance. For both, the
proxy's `execute` sends the batch on the data channel itself and returns None at once, so
Triton can pass the instance its next batch; this thread receives the worker's `StreamPart`,
`StreamEnd` and `BatchResult` messages and turns them into responses on each request's response
sender, the last one carrying the final flag.

It also watches the requesters: a request Triton marks cancelled (the client went away) gets a
final CANCELLED response, and when every request of a batch is gone the worker gets `Cancel` so
it stops generating. When the worker goes away, every batch in flight fails at once, and the
next `submit` greets whatever worker serves the endpoint next.

Imports only the standard library, numpy, zmq and `pytriton.ipc`.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Dict, List, Optional, Sequence

from pytriton.ipc import codec, protocol, stopping
from pytriton.ipc.channel import Channel, ChannelClosed
from pytriton.ipc.shm import SegmentReader
from pytriton.proxy.ledger import InflightLedger
from pytriton.proxy.link import Link, LinkError

_CANCEL_CHECK_S = 0.1
_LIVENESS_CHECK_S = 1.0


def triton_code(pb: Any, code: int) -> Optional[int]:
    """The stub's `TritonError` code for a worker's `protocol.ErrorCode` (None: the default, internal)."""
    if code == protocol.ErrorCode.INVALID_ARG:
        return getattr(pb.TritonError, "INVALID_ARG", None)
    return None


class _Batch:
    """What the relay keeps of a batch in flight."""

    __slots__ = ("requests", "senders", "open", "cancel_sent", "ledger_slots")

    def __init__(self, requests: Sequence[Any], senders: Sequence[Any]) -> None:
        self.requests = requests
        self.senders = senders
        self.open = [True] * len(requests)
        self.cancel_sent = False
        self.ledger_slots: List[int] = []


class Relay:
    """Answers the requests of relayed batches as the worker's messages arrive.

    Args:
        pb_utils: Triton's ``triton_python_backend_utils`` module (only importable in the stub).
        link: the proxy's link to its worker, connected; the relay receives on its data channel.
        model_name: for error messages.
        reconnect_s: how long `submit` waits for a worker to answer again after one was gone.
        watch_cancellation: poll ``request.is_cancelled()`` (decoupled models).
        one_at_a_time: `submit` waits until the previous batch is answered in full (a plain
            generator callable, which the worker runs one batch at a time anyway): meanwhile
            requests wait in Triton's queue, so the next batch gathers them and every streamed
            step carries the responses of all of them in one message.
        ledger: where the ids of the requests not answered in full are kept while they are open
            (`pytriton.proxy.ledger`), so that a death of this stub can name them.
        abandoned: whether a second signal gave up the requests in flight
            (`pytriton.ipc.stopping.FlagView.abandoned`): they are then answered UNAVAILABLE.
    """

    RECEIVE_TIMEOUT_S = _CANCEL_CHECK_S
    """The data channel's receive timeout while relaying: how often the thread looks at cancellations."""

    def __init__(
        self,
        pb_utils: Any,
        link: Link,
        model_name: str,
        reconnect_s: float,
        watch_cancellation: bool,
        one_at_a_time: bool = False,
        ledger: Optional[InflightLedger] = None,
        abandoned: Optional[Callable[[], bool]] = None,
    ) -> None:
        self._pb = pb_utils
        self._abandoned = abandoned
        self._ledger = ledger
        self._final = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
        self._link = link
        self._model_name = model_name
        self._reconnect_s = reconnect_s
        self._watch_cancellation = watch_cancellation
        self._reader = SegmentReader()
        self._pending: Dict[int, _Batch] = {}
        self._lock = threading.Lock()  # guards _pending and the channel swap
        self._connected = threading.Condition(self._lock)
        self._turn: Optional[threading.Semaphore] = threading.Semaphore(1) if one_at_a_time else None
        self._closing = False
        self._thread = threading.Thread(target=self._run, name=f"pytriton-relay-{model_name}", daemon=True)
        self._thread.start()

    def submit(self, batch_id: int, header: bytes, payload: Sequence[Any], requests: Sequence[Any],
               senders: Sequence[Any], request_ids: Sequence[str] = ()) -> None:
        """Send one encoded `InferBatch` (called from `execute`); its requests are answered later.

        `request_ids` (Triton's ids of `requests`) go to the ledger until the batch is answered.
        """
        if self._turn is not None:
            self._turn.acquire()
        batch = _Batch(requests, senders)
        with self._lock:
            if self._ledger is not None and request_ids:
                batch.ledger_slots = self._ledger.add(request_ids)
            channel = self._link.channel
            if channel is None:
                try:
                    channel = self._link.connect(self._reconnect_s, self.RECEIVE_TIMEOUT_S)
                except LinkError as exc:
                    channel = None
                    reason = str(exc)
                self._connected.notify_all()
            self._pending[batch_id] = batch
        if channel is None:
            self._fail_batch(batch_id, reason, prefixed=True)
            return
        try:
            while True:
                try:
                    channel.send(header, payload)
                    return
                except BlockingIOError:  # the worker's queue stayed full for a receive period
                    if not self._link.worker_alive():
                        break
        except ChannelClosed:
            pass
        self._fail_batch(batch_id, self._gone())

    def close(self) -> None:
        """Stop the thread; requests still open get an error (the model is being unloaded)."""
        with self._lock:
            self._closing = True
            self._connected.notify_all()
        self._thread.join(5.0)
        if self._ledger is not None:  # every request was answered (or failed) above: nothing lost
            with self._lock:
                self._ledger.close()

    def _gone(self) -> str:
        return self._link.worker_gone()

    # --- the relay thread ------------------------------------------------------------------

    def _run(self) -> None:
        last_heard = time.monotonic()
        next_cancel_check = last_heard + _CANCEL_CHECK_S
        try:
            while not self._closing:
                channel = self._current_channel()
                if channel is None:
                    continue
                try:
                    received = channel.receive()
                except ChannelClosed:
                    self._worker_gone(channel)
                    continue
                now = time.monotonic()
                if received is not None:
                    last_heard = now
                    self._receive(*received)
                if self._watch_cancellation and now >= next_cancel_check:
                    next_cancel_check = now + _CANCEL_CHECK_S
                    self._check_cancellations(channel)
                if self._pending and self._abandoned is not None and self._abandoned():
                    self._fail_all(stopping.abandoned(self._model_name), prefixed=True,
                                   code=getattr(self._pb.TritonError, "UNAVAILABLE", None))
                if self._pending and now - last_heard > _LIVENESS_CHECK_S:
                    last_heard = now
                    if not self._link.worker_alive():
                        self._worker_gone(channel)
        finally:
            self._fail_all("the model was unloaded before its responses were complete")
            self._reader.close()

    def _current_channel(self) -> Optional[Channel]:
        """The data channel to receive on; waits (briefly) while there is none."""
        with self._lock:
            if self._link.channel is None and not self._closing:
                self._connected.wait(self.RECEIVE_TIMEOUT_S)
            return self._link.channel

    def _worker_gone(self, channel: Channel) -> None:
        with self._lock:
            if self._link.channel is channel:
                self._link.drop()
        self._fail_all(self._gone())

    def _receive(self, header: Any, payload: Any) -> None:
        try:
            message = protocol.decode(header)
        except ValueError:
            return  # no batch to tell: the decoding error names none
        try:
            self._on_message(message, payload)
        except Exception as exc:  # noqa: BLE001 - one bad answer must not stop the relay
            self._fail_batch(getattr(message, "batch_id", -1), f"internal error in the pytriton proxy: {exc}")

    def _on_message(self, message: protocol.Message, payload: Any) -> None:
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
            codes = message.codes
            for index, (error, arrays) in enumerate(zip(message.errors, groups)):
                if error is not None:
                    self._finish(batch, index, error, triton_code(self._pb, codes[index]) if codes else None)
                else:
                    batch.senders[index].send(self._response(arrays), flags=self._final)
                    batch.open[index] = False
            self._forget(message.batch_id)

    def open_requests(self) -> int:
        """How many requests of the batches in flight are not answered in full (a metric)."""
        with self._lock:
            batches = list(self._pending.values())
        return sum(sum(batch.open) for batch in batches)

    def _forget(self, batch_id: int) -> None:
        """Drop a batch answered in full; the next batch may go (`one_at_a_time`)."""
        with self._lock:
            forgotten = self._pending.pop(batch_id, None)
            if forgotten is not None and forgotten.ledger_slots and self._ledger is not None:
                self._ledger.remove(forgotten.ledger_slots)
        if forgotten is not None and self._turn is not None:
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

    def _check_cancellations(self, channel: Channel) -> None:
        cancelled_code = getattr(self._pb.TritonError, "CANCELLED", None)
        for batch_id, batch in list(self._pending.items()):
            for index, request in enumerate(batch.requests):
                if batch.open[index] and request.is_cancelled():
                    self._finish(batch, index, f"Model '{self._model_name}': the request was cancelled",
                                 cancelled_code)
            if not batch.cancel_sent and not any(batch.open):
                batch.cancel_sent = True
                try:
                    channel.send(protocol.encode(protocol.Cancel(batch_id)))
                except (ChannelClosed, BlockingIOError):
                    pass  # the worker is gone (the receive sees it) or stuck: the batch ends either way

    def _fail_batch(self, batch_id: int, reason: str, prefixed: bool = False, code: Optional[int] = None) -> None:
        batch = self._pending.get(batch_id)
        if batch is None:
            return
        message = reason if prefixed else f"Model '{self._model_name}': {reason}"
        for index, is_open in enumerate(batch.open):
            if is_open:
                try:
                    self._finish(batch, index, message, code)
                except Exception:  # noqa: BLE001 - the sender itself is broken; nothing more to tell
                    pass
        self._forget(batch_id)

    def _fail_all(self, reason: str, prefixed: bool = False, code: Optional[int] = None) -> None:
        for batch_id in list(self._pending):
            self._fail_batch(batch_id, reason, prefixed, code)
