"""The proxy model: runs inside Triton's Python backend stub, one instance per stub process.

Each `execute` call carries the batch Triton's dynamic batcher formed to the worker in the user's
process (one round trip per batch, on the data channel of `pytriton.proxy.link`) and turns the
worker's answer into Triton responses; the thread that runs `execute` sends the batch and is the
one the kernel wakes with the answer. The model is reported ready only after the handshake with
its worker succeeded, so readiness tells the truth.

Imports only the standard library, numpy, zmq and `pytriton.ipc` (plus Triton's own
`triton_python_backend_utils`, present in the stub).
"""

from __future__ import annotations

import faulthandler
import json
import os
import threading
import time
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

import triton_python_backend_utils as pb_utils  # type: ignore[import-not-found]  # provided by the stub

from pytriton.ipc import codec, protocol, shm, stopping
from pytriton.ipc.channel import ChannelClosed
from pytriton.ipc.shm import Arena, SegmentReader
from pytriton.proxy.ledger import InflightLedger
from pytriton.proxy.link import Link, LinkError
from pytriton.proxy.metrics import PERIOD_S as METRICS_PERIOD_S
from pytriton.proxy.metrics import MetricsExporter
from pytriton.proxy.relay import Relay, triton_code
from pytriton.proxy.waiting import AnswerWait, spin_window_us

_LIVENESS_CHECK_S = 1.0
"""How often a wait for the worker's answer looks whether the worker lives."""
_CANCEL_CHECK_S = 0.1
"""The data channel's receive and send timeout: how often a wait for the worker's answer looks
whether the batch's requests were cancelled (and tells the worker)."""
_QUEUED_CANCEL_CHECK_S = 0.05
"""Batches of a model usually this slow or slower are checked for requests cancelled in the queue."""
_RECONNECT_S = 5.0
"""How long a batch waits for a worker to answer again after the last one was found gone."""
_PARENT_CHECK_S = 0.5
_IDLE_CHECK_S = 1.0
"""How often a proxy looks whether its arena has been idle for `shm.IDLE_RELEASE_S`."""
_OUTPUT_CHECK_BYTES = 1 << 20
"""Batches with more output bytes than this check /dev/shm's free space before answering (the
pool grows in 1 MiB steps; smaller outputs are left to Triton)."""


def _exit_with_parent(parent_pid: int, period_s: float = _PARENT_CHECK_S) -> None:
    """End this stub process soon after tritonserver (its parent) is gone.

    Triton's stub outlives a killed server: reparented, it keeps polling and ignores SIGTERM.
    ``PR_SET_PDEATHSIG`` cannot help here, since it fires when the server's *thread* that
    forked the stub ends (a model-load thread), not the server.
    """

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(period_s)
        os._exit(1)

    threading.Thread(target=watch, name="pytriton-parent-watch", daemon=True).start()


def _server_pid(cmdline: Sequence[str]) -> int:
    """The pid of the tritonserver that started this stub.

    Triton passes it as the stub's sixth argument (``stub model.py region default growth
    <server pid> ...``); reading it there, rather than ``os.getppid()``, also catches a server
    that died before this stub got as far as ``initialize`` (the stub was then adopted already).
    """
    if len(cmdline) > 5 and cmdline[5].isdigit():
        return int(cmdline[5])
    return os.getppid()


def _own_cmdline() -> List[str]:
    try:
        with open("/proc/self/cmdline", "rb") as handle:
            return [part.decode(errors="replace") for part in handle.read().split(b"\0") if part]
    except OSError:
        return []


def _parameters(model_config: Dict[str, Any]) -> Dict[str, str]:
    return {key: value.get("string_value", "") for key, value in model_config.get("parameters", {}).items()}


def _read_requests(requests: List[Any]) -> Tuple[Dict[str, List[Any]], Tuple[str, ...]]:
    """Each input's arrays across the requests (None where a request lacks it), and each
    request's parameters as JSON text ("" when it has none): what `codec.pack_columns` takes."""
    count = len(requests)
    columns: Dict[str, List[Any]] = {}
    parameters = []
    for index, request in enumerate(requests):
        for tensor in request.inputs():
            column = columns.get(name := tensor.name())
            if column is None:
                column = columns[name] = [None] * count
            column[index] = tensor.as_numpy()
        text = request.parameters()
        parameters.append("" if text in ("", "{}") else text)
    return columns, tuple(parameters)


def _requested(requests: List[Any], output_count: int) -> Tuple[Tuple[str, ...], ...]:
    """Per request, the outputs it asked for when fewer than all (``()`` for all); ``()`` when
    every request wants every output, the usual case, which then costs nothing further."""
    if output_count < 2:
        return ()
    asked = [request.requested_output_names() for request in requests]
    if all(len(names) >= output_count for names in asked):
        return ()
    return tuple(() if len(names) >= output_count else tuple(names) for names in asked)


def _is_null(request: Any) -> bool:
    """A null request of Triton's direct sequence batcher, which fills idle batch slots with them
    (correlation id 0): it is answered in the proxy and never reaches the callable."""
    return request.correlation_id() in (0, "")


def _sequences(requests: List[Any]) -> Tuple[Tuple[Any, int], ...]:
    """Each request's Triton correlation id and flags (a sequence-batched model's)."""
    return tuple((request.correlation_id(), request.flags()) for request in requests)


def _traces(requests: List[Any]) -> Tuple[str, ...]:
    """Each request's W3C ``traceparent`` ("" when Triton did not sample it), or ``()`` when none
    was sampled: what the worker continues the traces from (`protocol.InferBatch.traces`).

    In OpenTelemetry mode the Python backend gives a sampled request's context as JSON text
    holding the ``traceparent`` of Triton's span; an unsampled request has none.
    """
    traces = []
    for request in requests:
        try:
            text = request.trace().get_context()
            context = json.loads(text) if text else None
        except (AttributeError, ValueError):  # an older stub, or a context that is not JSON
            context = None
        traceparent = context.get("traceparent") if isinstance(context, dict) else None
        traces.append(traceparent if isinstance(traceparent, str) else "")
    return tuple(traces) if any(traces) else ()


def _record_fatal_signals(path: Optional[str]) -> Optional[Any]:
    """Have `faulthandler` write a fatal signal of this stub to `path` (see
    `protocol.fault_trace_path`); the open file stays referenced by the caller."""
    if path is None:
        return None
    try:
        trace = open(path, "w")  # kept open for the life of the stub
    except OSError:
        return None
    faulthandler.enable(file=trace, all_threads=False)
    return trace


class _Abandoned(Exception):
    """A second signal gave up the batch in flight (`pytriton.ipc.stopping.ABANDONED`)."""


class TritonPythonModel:
    """The Python-backend model Triton loads for every model bound with pytriton."""

    _refusing = False

    def initialize(self, args: Dict[str, str]) -> None:
        _exit_with_parent(_server_pid(_own_cmdline()))
        config = json.loads(args["model_config"])
        params = _parameters(config)
        self._model_name = args["model_name"]
        if params.get(protocol.PARAM_REFUSE) == "1":
            # What a stop reloads the model as where pytriton's backend is not built
            # (`pytriton.ipc.stopping.refusing_config`): no worker, every request refused.
            self._refusing = True
            decoupled = bool(config.get("model_transaction_policy", {}).get("decoupled", False))
            self.execute = self._refuse_streams if decoupled else self._refuse  # type: ignore[method-assign,assignment]
            return
        self._sequences = "sequence_batching" in config  # each request then tells its sequence
        # With one output a request cannot ask for fewer; with several, each request says which.
        self._output_count = len(config.get("output", ()))
        names = json.loads(params.get(protocol.PARAM_INSTANCE_NAMES, "[]"))
        self._instance = protocol.instance_index(args["model_instance_name"], names)  # also the handler's number
        # The configuration names the model, shared by its versions: this version's worker and
        # segment names follow from the version Triton loads this instance for.
        version = int(args.get("model_version") or 1)
        shm_prefix = protocol.model_shm_prefix(params[protocol.PARAM_SHM_PREFIX], self._model_name, version)
        endpoint = protocol.instance_endpoint(
            protocol.version_endpoint(params[protocol.PARAM_ENDPOINT], version), self._instance)
        socket_path = protocol.ipc_socket_path(endpoint)
        self._fault_trace = _record_fatal_signals(
            protocol.fault_trace_path(os.path.dirname(socket_path), os.getpid()) if socket_path else None
        )
        # Before any arena exists, the one /dev/shm segment this process maps is Triton's pool.
        pools = shm.mapped_segments()
        self._pool = pools[0] if len(pools) == 1 else ""
        self._input_columns: Sequence[protocol.TensorColumn] = ()
        self._arena = Arena(lambda generation: protocol.segment_name(shm_prefix, self._instance, "in", generation))
        self._reader = SegmentReader()
        self._batch_id = 0
        self._arena_lock = threading.Lock()  # held through each batch; the idle watch takes it only when free
        self._last_batch = time.monotonic()
        self._idle_released = True
        self._closing = threading.Event()
        self._stamps = params.get(protocol.PARAM_STAMPS) == "1"
        self._tracing = params.get(protocol.PARAM_TRACING) == "1"  # each request's trace context then goes along
        self._stopping = stopping.FlagView.open(params.get(protocol.PARAM_STOPPING))
        self._answer_wait = AnswerWait(spin_window_us(params.get(protocol.PARAM_SPIN_US)))
        self._last_stamps: Tuple[int, ...] = ()  # the previous batch's record, sent with the next batch
        timeout_s = float(params.get(protocol.PARAM_HANDSHAKE_TIMEOUT_S, "60"))
        hello = protocol.Hello(protocol.PROTOCOL_VERSION, self._instance, os.getpid())
        self._link = Link(self._model_name, endpoint, hello, int(params[protocol.PARAM_WORKER_PID]))
        decoupled = bool(config.get("model_transaction_policy", {}).get("decoupled", False))
        relayed = decoupled or params.get(protocol.PARAM_RELAYED) == "1"
        try:
            self._link.connect(timeout_s, Relay.RECEIVE_TIMEOUT_S if relayed else _CANCEL_CHECK_S)
        except LinkError as exc:
            self._link.close()
            raise pb_utils.TritonModelException(str(exc)) from None
        self._relay: Optional[Relay] = None
        self._in_flight = 0  # requests sent to the worker and not answered (non-relayed models)
        self._metrics: Optional[MetricsExporter] = None
        if params.get(protocol.PARAM_METRICS) != "0":
            labels = (("model", self._model_name), ("version", str(args.get("model_version", ""))),
                      ("instance", str(self._instance)))
            self._metrics = MetricsExporter(
                pb_utils, self._link.zmq_context, endpoint, self._instance, labels, self._requests_in_flight,
                float(params.get(protocol.PARAM_METRICS_PERIOD_S) or METRICS_PERIOD_S),
            )
        if relayed:
            # A plain generator streams one batch at a time in the worker: holding the next batch in
            # Triton's queue until then lets the batcher gather the requests that arrive meanwhile.
            one_at_a_time = params.get(protocol.PARAM_RELAYED) != "1"
            ledger = None
            if socket_path:
                try:
                    ledger = InflightLedger(protocol.inflight_ledger_path(os.path.dirname(socket_path), os.getpid()))
                except OSError:
                    ledger = None  # no record of lost requests: their clients wait for their own timeout
            self._relay = Relay(pb_utils, self._link, self._model_name, _RECONNECT_S,
                                watch_cancellation=decoupled, one_at_a_time=one_at_a_time, ledger=ledger,
                                abandoned=self._stopping.abandoned if self._stopping is not None else None)
            self.execute = self._execute_relayed  # type: ignore[method-assign,assignment]
        else:
            threading.Thread(target=self._release_when_idle, name="pytriton-idle-arena", daemon=True).start()

    def _requests_in_flight(self) -> int:
        return self._relay.open_requests() if self._relay is not None else self._in_flight

    def _release_when_idle(self) -> None:
        """After `shm.IDLE_RELEASE_S` without a batch, give the input arena back and unmap the
        worker's answers. The stub runs none of our code between batches, so a thread looks,
        taking the arena only when no batch holds it."""
        while not self._closing.wait(_IDLE_CHECK_S):
            if self._idle_released or not self._arena_lock.acquire(blocking=False):
                continue
            try:
                now = time.monotonic()
                if not self._closing.is_set() and now - self._last_batch >= shm.IDLE_RELEASE_S:
                    self._arena.release_if_idle(now)
                    self._reader.close()
                    self._idle_released = True
            finally:
                self._arena_lock.release()

    def _reconnect(self) -> Optional[str]:
        """After the worker was found gone: greet whatever worker now serves the endpoint (a
        worker process forked anew). None when one answered, else why the batch fails."""
        try:
            self._link.connect(_RECONNECT_S, _CANCEL_CHECK_S)
        except LinkError as exc:
            return str(exc)
        return None

    def _refusal(self) -> Any:
        """The retryable error of a request that arrives while the server stops (`pytriton.ipc.stopping`)."""
        return pb_utils.TritonError(stopping.refusal(self._model_name), getattr(pb_utils.TritonError, "UNAVAILABLE", 0))

    def _refused_here(self) -> bool:
        """Whether a batch is refused where it starts: the fallback where a stop could not reload the
        model as a refusing one, or a second signal (a sequence's later requests are answered)."""
        return self._stopping is not None and not self._sequences and self._stopping.raised()

    def _refuse(self, requests: List[Any]) -> List[Any]:
        """The refusing model's `execute`: each request refused at once, retryable."""
        return [pb_utils.InferenceResponse(error=self._refusal()) for _ in requests]

    def _refuse_streams(self, requests: List[Any]) -> None:
        """The refusing model's `execute` for a decoupled model: each stream ends with the refusal."""
        for request in requests:
            request.get_response_sender().send(pb_utils.InferenceResponse(error=self._refusal()),
                                               flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    def execute(self, requests: List[Any]) -> List[Any]:
        if self._refused_here():
            return self._refuse(requests)
        with self._arena_lock:
            self._last_batch = time.monotonic()
            self._idle_released = False
            if not self._sequences and self._answer_wait.typical_s < _QUEUED_CANCEL_CHECK_S:
                return self._execute(requests)
            skipped = self._skipped(requests)
            if not skipped:
                return self._execute(requests)
            responses = [skipped.get(index) for index in range(len(requests))]
            live = [index for index in range(len(requests)) if index not in skipped]
            if live:
                for index, response in zip(live, self._execute([requests[index] for index in live])):
                    responses[index] = response
            return responses

    def _skipped(self, requests: List[Any]) -> Dict[int, Any]:
        """The requests answered here without reaching the callable, with their answers.

        - The null requests Triton's direct sequence batcher puts in idle batch slots
          (correlation id 0): an empty answer.
        - For a model whose batches take `_QUEUED_CANCEL_CHECK_S` or more, the requests their
          clients cancelled while they waited in Triton's queue (Triton 2.51 still hands them
          over): a cancelled error. Asking costs the stub a round trip to the server per request,
          nothing next to such a batch, too much for a fast one.
        """
        skipped: Dict[int, Any] = {}
        if self._sequences:
            for index, request in enumerate(requests):
                if _is_null(request):
                    skipped[index] = pb_utils.InferenceResponse(output_tensors=[])
        if self._answer_wait.typical_s >= _QUEUED_CANCEL_CHECK_S:
            for index, request in enumerate(requests):
                if index not in skipped and request.is_cancelled():
                    error = pb_utils.TritonError(
                        f"Model '{self._model_name}': the request was cancelled while it waited",
                        getattr(pb_utils.TritonError, "CANCELLED", 0),
                    )
                    skipped[index] = pb_utils.InferenceResponse(error=error)
        return skipped

    def _execute(self, requests: List[Any]) -> List[Any]:
        started = time.monotonic_ns() if self._stamps else 0
        if self._link.channel is None and (reason := self._reconnect()) is not None:
            return [pb_utils.InferenceResponse(error=pb_utils.TritonError(reason)) for _ in requests]
        inputs, parameters = _read_requests(requests)
        columns, segment, payload = codec.pack_columns(inputs, len(requests), self._arena)
        self._input_columns = columns  # sized only when the outputs may not fit
        self._batch_id += 1
        stamps = (*self._last_stamps, started, time.monotonic_ns()) if self._stamps else ()
        sequences = _sequences(requests) if self._sequences else ()
        requested = _requested(requests, self._output_count)
        header = protocol.infer_batch_header(
            batch_id=self._batch_id, parameters=parameters, columns=columns, segment=segment, stamps=stamps,
            sequences=sequences, requested=requested, traces=_traces(requests) if self._tracing else (),
        )
        self._in_flight = len(requests)
        try:
            result, answer = self._round_trip(header, payload, requests)
        except _Abandoned:  # the server ends now: the clients hear it from the server, not a closed connection
            error = pb_utils.TritonError(stopping.abandoned(self._model_name),
                                         getattr(pb_utils.TritonError, "UNAVAILABLE", 0))
            return [pb_utils.InferenceResponse(error=error) for _ in requests]
        finally:
            self._in_flight = 0
        if result is None:
            self._link.drop()
            error = pb_utils.TritonError(f"Model '{self._model_name}': {self._link.worker_gone()}")
            return [pb_utils.InferenceResponse(error=error) for _ in requests]
        if result.inputs_kept:  # the callable kept views of this arena: the next batch takes a new one
            self._arena.close()
        received = time.monotonic_ns() if self._stamps else 0
        groups = codec.unpack(result.columns, result.segment, answer, self._reader, len(requests))
        responses = []
        codes = result.codes
        for index, (arrays, error) in enumerate(zip(groups, result.errors)):
            if error is not None:
                code = triton_code(pb_utils, codes[index]) if codes else None
                triton_error = pb_utils.TritonError(error) if code is None else pb_utils.TritonError(error, code)
                responses.append(pb_utils.InferenceResponse(error=triton_error))
            else:
                responses.append(pb_utils.InferenceResponse([pb_utils.Tensor(n, a) for n, a in arrays.items()]))
        responses = self._refuse_what_cannot_fit(requests, result, responses)
        if self._stamps:
            self._last_stamps = (*result.stamps, received, time.monotonic_ns())
        return responses

    def _round_trip(
        self, header: bytes, payload: Sequence[Any], requests: List[Any]
    ) -> Tuple[Optional[protocol.BatchResult], Any]:
        """Send the batch and wait for its answer; (None, None) when the worker is gone.

        Waits as long as the worker lives: a slow callable is the worker's business (it has
        ``execution_timeout_s``); a dead one shows as the connection's end, or at the latest
        at the next liveness check. Every `_CANCEL_CHECK_S` of the wait, requests their clients
        cancelled are told to the worker (``request.is_cancelled()`` of a running callable).

        Raises:
            _Abandoned: a second signal gave the batch up (`pytriton.ipc.stopping.ABANDONED`).
        """
        count = len(requests)
        cancelled: Set[int] = set()
        sent = time.perf_counter()
        try:
            channel = self._send(header, payload)
            if channel is None:
                return None, None
            next_liveness = time.monotonic() + _LIVENESS_CHECK_S
            while True:
                received = self._answer_wait.receive(channel, count, sent)
                if received is None:  # no answer yet: cancelled requests? is the worker still there?
                    if self._stopping is not None and self._stopping.abandoned():
                        raise _Abandoned
                    self._tell_cancelled(channel, requests, cancelled)
                    if time.monotonic() >= next_liveness:
                        if not self._link.worker_alive():
                            return None, None
                        next_liveness = time.monotonic() + _LIVENESS_CHECK_S
                    continue
                message = protocol.decode(received[0])
                if isinstance(message, protocol.BatchResult) and message.batch_id == self._batch_id:
                    if len(message.errors) != count:
                        raise pb_utils.TritonModelException(
                            f"Model '{self._model_name}': worker answered {len(message.errors)} responses "
                            f"for {count} requests"
                        )
                    return message, received[1]
                # otherwise: a late answer to an abandoned batch
        except ChannelClosed:
            return None, None

    def _send(self, header: bytes, payload: Sequence[Any]) -> Optional[Any]:
        """Send the batch; the channel it went on, or None when the worker is gone.

        A connection that had ended before the batch went out (a worker process that died while
        this instance was idle) means the batch reached nobody: it goes to the fresh worker that
        takes its place, once. A worker that dies holding it fails it (`_round_trip`).

        Raises:
            ChannelClosed: the fresh worker's connection ended too.
        """
        channel = self._link.channel
        assert channel is not None
        retried = False
        while True:
            try:
                channel.send(header, payload)
                return channel
            except BlockingIOError:  # its queue stayed full for a while
                if not self._link.worker_alive():
                    return None
            except ChannelClosed:
                if retried:
                    raise
                retried = True
                self._link.drop()
                if self._reconnect() is not None:
                    return None
                channel = self._link.channel
                assert channel is not None

    def _tell_cancelled(self, channel: Any, requests: List[Any], cancelled: Set[int]) -> None:
        """Send the worker the positions of the batch's requests cancelled since the last look."""
        newly = [index for index, request in enumerate(requests)
                 if index not in cancelled and request.is_cancelled()]
        if newly:
            cancelled.update(newly)
            try:
                channel.send(protocol.encode(protocol.Cancel(self._batch_id, tuple(sorted(cancelled)))), ())
            except BlockingIOError:
                cancelled.difference_update(newly)  # told at the next look

    def _refuse_what_cannot_fit(self, requests: List[Any], result: protocol.BatchResult,
                                responses: List[Any]) -> List[Any]:
        """Replace the responses that cannot fit in Triton's pool with an error that says why.

        Triton's stub copies every output into its shared-memory pool after `execute` returns,
        while the batch's inputs are still there; when the pool cannot grow, the whole batch
        fails with Triton's terse pool error. Only a response larger than all the room there
        could be (free space plus the pool's own, less the inputs) is refused here: that one
        cannot fit whatever the pool's layout, and its requester learns what to change.
        """
        total = sum(sum(column.sizes) for column in result.columns)
        if total <= _OUTPUT_CHECK_BYTES or total <= (usage := shm.shm_usage()).free:
            return responses
        sizes = codec.group_sizes(result.columns, len(requests))
        input_sizes = codec.group_sizes(self._input_columns, len(requests))
        room = shm.output_room(usage.free, shm.segment_size(self._pool), sum(input_sizes))
        for index, (nbytes, error) in enumerate(zip(sizes, result.errors)):
            if error is not None or nbytes <= _OUTPUT_CHECK_BYTES:
                continue
            if nbytes <= room:
                room -= nbytes
            else:
                message = shm.shortage_message(self._model_name, input_sizes[index], nbytes, usage)
                responses[index] = pb_utils.InferenceResponse(error=pb_utils.TritonError(message))
        return responses

    def _execute_relayed(self, requests: List[Any]) -> None:
        """Send the batch through the relay and return at once; the relay answers each request."""
        if self._refused_here():
            for request in requests:
                request.get_response_sender().send(pb_utils.InferenceResponse(error=self._refusal()),
                                                   flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            return None
        if self._sequences:
            live = []
            for request in requests:
                if _is_null(request):
                    request.get_response_sender().send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
                else:
                    live.append(request)
            if not live:
                return None
            requests = live
        inputs, parameters = _read_requests(requests)
        columns, segment, payload = codec.pack_columns(inputs, len(requests), None)  # inline: batches overlap
        self._batch_id += 1
        sequences = _sequences(requests) if self._sequences else ()
        requested = _requested(requests, self._output_count)
        header = protocol.infer_batch_header(
            batch_id=self._batch_id, parameters=parameters, columns=columns, segment=segment, sequences=sequences,
            requested=requested, traces=_traces(requests) if self._tracing else (),
        )
        senders = [request.get_response_sender() for request in requests]
        assert self._relay is not None
        self._relay.submit(self._batch_id, header, payload, requests, senders,
                           [request.request_id() for request in requests])
        return None

    def finalize(self) -> None:
        if self._refusing:
            return
        self._closing.set()
        if self._metrics is not None:  # its socket goes before the link ends the ZeroMQ context
            self._metrics.close()
        if self._relay is not None:
            self._relay.close()
        self._link.close()
        with self._arena_lock:
            self._arena.close()
            self._reader.close()
        if self._fault_trace is not None:  # a clean unload: no fatal signal to tell of
            faulthandler.disable()
            self._fault_trace.close()
            try:
                os.unlink(self._fault_trace.name)
            except OSError:
                pass
