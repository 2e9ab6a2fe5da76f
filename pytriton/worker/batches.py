"""A batch in: one batch's way through the worker, whatever loop serves it: requests, the call.

Step of the request flow: the loop that received it (`pytriton.worker.blocking`,
`pytriton.worker.asynchronous`) -> here -> the user's callable -> `pytriton.worker.responses`
(the answer) -> the loop, which sends it.

`BatchCalls` holds what every loop kind does the same way for a batch: build the `Request`
objects from the wire's columns, leave out the requests whose deadline passed, call the callable
(through the opt-in steps ``isolate_failures`` (`isolation`) and ``execution_timeout_s``
(`timed`), or directly), turn the callable's exceptions into the messages its requesters get,
and hand the outcome to `pytriton.worker.responses`. It owns no socket and no thread.

The blocking loop, which serves every plain callable, makes one call per batch:
`BatchCalls.serve` takes the batch as it came and gives back its answer (the `BatchResult`, saying
too whether the function kept a lent input, and its payload), or what the call left running (`Running`: a generator or
a coroutine, which the loop runs to its end). The batch goes the whole-batch lane's way or the
general one inside it, and comes back out from the same place. The types the steps hand each
other live in `pytriton.worker.outcomes`.

Deadlines travel with requests: pytriton's clients send their inference timeout as an absolute
deadline (the request parameter `pytriton.ipc.protocol.DEADLINE_PARAMETER`). A request that
waited in Triton's queue past it has no one waiting for its answer any more; computing it would
only delay the requests behind it, so it is answered with an error and left out of the call.

The whole-batch lane (`WholeLane`): `BatchCalls.serve` offers every batch of a plain ``@batch``
function to it first; a batch it does not take goes the general way above, untouched.

The common model is a function under ``@batch`` alone: all it reads is each input of the batch
as one array, and all it returns is each output as one array. For such a callable
(`pytriton.worker.outcomes.WholeBatch`, when `BatchCalls.whole` says its model fits) the lane
builds exactly that from the wire's columns (one writeable array per input, as ``@batch`` gives
it), calls the function, and checks its answer once for the batch. No request objects, no
per-request checks, no parameters parsed.

A batch the lane does not take, before anything is called: a BYTES input, requests with different
inputs or trailing shapes, request parameters (anything a decorator might read, or a deadline that
passed; the deadlines pytriton's clients send with every request are no obstacle while they lie
ahead), a subset of outputs asked for, trace contexts. The general path gives the same callable
the same arrays through ``@batch``.

The answer: a dict holding every declared output, each a C-ordered array of the declared
(numeric) dtype with the batch's rows, small enough to travel in the message, and (with
``strict``) of the declared trailing shape, is packed by the lane at once (`Packed`), one buffer per
output. Anything else (a list, a cast to make, an output for the arena, a generator) goes through
``@batch``'s own checks (`WholeBatch.answer`) and `pytriton.worker.responses.batch_result`, so
errors read the same on both paths. This is the path of every small request, so it is kept to the
few steps it needs (docs/design/hop.md has the figures).

A large input (one the sender laid out in its arena) is handed over without a copy: a writeable
view of the arena, which holds this batch alone until it is answered. Only a function that keeps
such an array past its answer (a cache, a queue for later) could see the next batch's bytes
arrive in it; `LentInputs` notices that (a weak reference per array still alive once the answer
is packed) and the answer tells the sender (`protocol.BatchResult.inputs_kept`), who then lays
the next batch out in a new segment and leaves the old one to the kept arrays. Small inputs
travel inline in the channel's buffer, which the next message reuses: those are copied.
"""

from __future__ import annotations

import inspect
import json
import logging
import time
import weakref
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from pytriton.exceptions import PyTritonModelConfigError, PyTritonUnrecoverableError
from pytriton.ipc import codec, protocol
from pytriton.ipc.protocol import DEADLINE_PARAMETER, INLINE_MAX_BYTES
from pytriton.ipc.shm import Arena, SegmentReader
from pytriton.worker import tracing
from pytriton.worker.context import TritonContext
from pytriton.worker.instance import InstanceSpec
from pytriton.worker.isolation import isolate
from pytriton.worker.measures import Measures
from pytriton.worker.outcomes import Expected, Failure, Packed, Running, WholeBatch, WholeOutputs
from pytriton.worker.request import CancelProbe, CancelReader, Request, Requests
from pytriton.worker.responses import batch_result, per_request, shape_matches, stream_part
from pytriton.worker.timed import ExecutionTimeout, TimedCaller

logger = logging.getLogger("pytriton.worker")


class NotDecoupled(Exception):
    """A generator callable bound to a model without ModelConfig(decoupled=True)."""


class BatchCalls:
    """Runs one model instance's callable on the batches of the wire.

    Args:
        spec: the instance (`InstanceSpec`): its model, callable, number (for messages and the
            time-limit thread's name), ``strict``, ``asynchronous`` and ``whole``.
        stopping: set when the handler stops (a timed call stops waiting).
        measures: where the instance's own metrics are recorded.

    Raises:
        PyTritonModelConfigError: ``isolate_failures`` or ``execution_timeout_s`` asked of an
            async callable (they apply to plain callables only).
    """

    def __init__(self, spec: InstanceSpec, stopping: Any, measures: Measures) -> None:
        context, asynchronous = spec.context, spec.asynchronous
        self.context = context
        self.measures = measures
        self.model_name = context.model_name
        self.strict = spec.strict
        self.asynchronous = asynchronous
        config = context.config
        self.decoupled = bool(config.decoupled)
        self._isolate_failures = bool(config.isolate_failures)
        timeout_s: Optional[float] = config.execution_timeout_s
        if asynchronous and (self._isolate_failures or timeout_s is not None):
            asked = ", ".join(f"{name}={value!r}" for name, value in (
                ("isolate_failures", self._isolate_failures), ("execution_timeout_s", timeout_s)) if value)
            raise PyTritonModelConfigError(
                f"model '{context.model_name}': ModelConfig({asked}) applies to plain callables only, but the "
                f"inference callable of instance {spec.instance} is async; leave it unset, or handle failures and "
                "time limits inside the coroutine (e.g. with asyncio.wait_for)"
            )
        self._timed: Optional[TimedCaller] = None
        self._run_callable: Callable[[List[Request]], Any] = spec.infer_func  # the hot path: a direct call
        if timeout_s is not None:
            self._timed = TimedCaller(spec.infer_func, timeout_s, context=context, instance=spec.instance,
                                      stopping=stopping)
            self._run_callable = self._timed
        self._bytes_inputs = {t.name for t in context.inputs if np.dtype(t.dtype).kind == "S"}
        self._batching = bool(config.batching)
        self._strict_sizes = spec.strict and self._batching
        self._traced = context.tracing is not None
        """The server traces with OpenTelemetry: batches may carry trace contexts (`tracing`)."""
        self.probe = CancelProbe()
        """The cancellations of the batch being served (a handler serves one at a time)."""
        self.whole = spec.whole if serves_whole(context, spec.whole, asynchronous=asynchronous,
                                                isolate_failures=self._isolate_failures,
                                                timed=timeout_s is not None) else None
        """The plain ``@batch`` function taken apart, when the model's batches may take the
        whole-batch lane (`WholeLane`); else None."""
        self._lane = WholeLane(self) if self.whole is not None else None

    def close(self) -> None:
        if self._timed is not None:
            self._timed.close()

    def requests(self, batch: protocol.InferBatch, payload: Any, reader: SegmentReader) -> Requests:
        """The batch's requests: input arrays viewing `payload` (or the proxy's arena), and parameters.

        For a batching model whose requests all carry the same numeric inputs, the list also
        holds each input of the whole batch as one array (`Requests.whole`).
        """
        count = len(batch.parameters)
        whole = self._whole(batch, payload, reader) if count > 1 else None  # one request: nothing to gather
        groups = None
        if whole is None:
            groups = codec.unpack(batch.columns, batch.segment, payload, reader, count)
            if self._bytes_inputs:  # never gathered
                for arrays in groups:
                    for name in self._bytes_inputs & arrays.keys():
                        arrays[name] = arrays[name].astype(np.bytes_)
        requests = Requests.of_batch(batch, groups, whole)
        if batch.traces:  # Triton traces with OpenTelemetry: the sampled requests get their spans
            tracing.begin(self.context.tracing, batch.traces, batch.sent_ns, requests)
        return requests

    def _whole(self, batch: protocol.InferBatch, payload: Any, reader: SegmentReader) -> Optional[Dict[str, Any]]:
        """Each input of the batch as one array (`codec.gathered`), or None where one cannot be."""
        if not self._batching or not batch.columns or self._bytes_inputs:
            return None
        whole: Dict[str, Any] = {}
        for column in batch.columns:
            array = codec.gathered(column, batch.segment, payload, reader)
            if array is None or column.name in whole:
                return None
            whole[column.name] = array
        return whole

    def serve(
        self, batch: protocol.InferBatch, payload: Any, reader: SegmentReader, arena: Optional[Arena],
        marks: Optional[List[int]], cancels: CancelReader,
    ) -> Union[Tuple[protocol.BatchResult, List[Any]], Running]:
        """One batch of the blocking loop, from its message to its answer, in one call: the
        whole-batch lane's way when it takes the batch, else the general one (`call`, `result`).

        `arena` carries large outputs (None: inline). `marks`, when given, gets the
        `protocol.Stamp.DECODED` and `protocol.Stamp.CALLED` stamps. `cancels` reads the proxy's
        `Cancel` messages for ``request.is_cancelled()``.

        Returns:
            The answer: its `BatchResult`, which also says whether the function kept an input lent
            from the sender's arena, and its payload (a `Packed` where the lane packed it, a plain
            pair otherwise: no object made only to be taken apart). Or what the call left running
            (`Running`: a generator or a coroutine): the loop runs it to its end, and ends the
            probe once it has (its requests may ask whether they were cancelled until then).
        """
        lane = self._lane
        served = None if lane is None else lane.serve(batch, payload, reader, arena, marks)
        took = served is not None
        if served is None:  # the general way: request objects, deadlines, the callable as it is
            served = self.call(batch, payload, reader, marks, cancels)
        batch_sizes, outcome = served
        served = None  # `outcome` alone holds the answer now (see `WholeLane.inputs_kept`)
        kind = type(outcome)
        if kind is not Packed and kind is not WholeOutputs and runs_on(outcome):
            return Running(outcome, batch_sizes)
        if marks is not None:
            marks.append(time.monotonic_ns())
        answer = outcome if kind is Packed else self.result(batch.batch_id, len(batch.parameters), outcome,
                                                            batch_sizes, arena)
        outcome = None  # packed: what still views the batch's inputs now is the function's own
        if not took:
            self.probe.end()  # answered: let go of the requests, whose arrays may view shared memory
        elif lane is not None and lane.inputs_kept():
            answer = (answer[0]._replace(inputs_kept=True), answer[1])
        return answer

    def call(self, batch: protocol.InferBatch, payload: Any, reader: SegmentReader,
             marks: Optional[List[int]] = None, cancels: Optional[CancelReader] = None) -> Tuple[Expected, Any]:
        """Run the callable on the batch: its result (list, generator, coroutine...) or a `Failure`.

        Requests whose deadline passed are answered with an error and left out of the call (for
        plain callables of non-decoupled models, whose answers are one list per batch). `marks`,
        when given, gets the `protocol.Stamp.DECODED` stamp. `cancels` reads the proxy's
        `Cancel` messages for ``request.is_cancelled()`` (None: requests never learn it).

        Returns:
            Per request its batch size (when `strict` checks shapes, else None), and the outcome.
        """
        try:
            requests = self.requests(batch, payload, reader)
            if cancels is not None:  # the handler reads cancellations while this batch runs
                self.probe.begin(requests, cancels)
            # the sizes before the callable may change the requests
            batch_sizes = Expected([batch_size(request) for request in requests] if self._strict_sizes else
                                   [None] * len(requests), batch.requested)
        except Exception as exc:  # noqa: BLE001 - a bad batch fails its own requesters only
            error, unrecoverable = self.callable_error(exc)
            return Expected([None] * len(batch.parameters), batch.requested), Failure(error, unrecoverable)
        if marks is not None:
            marks.append(time.monotonic_ns())
        expired = pop_expired(requests, time.time())
        measures = self.measures
        if not expired or self.decoupled or self.asynchronous:
            started = measures.batch_started(len(requests), batch.sent_ns, 0)
            outcome = self.call_requests(requests)
            if not runs_on(outcome):  # else the loop that runs it to its end tells when it is done
                measures.batch_done(started, len(requests) if isinstance(outcome, Failure) else 0)
            return batch_sizes, outcome
        answers: List[Any] = [Failure(expired_message(self.model_name))] * len(requests)
        live = [index for index in range(len(requests)) if index not in set(expired)]
        logger.debug("Model '%s': %d of %d requests expired before the call", self.model_name, len(expired),
                     len(requests))
        started = measures.batch_started(len(live), batch.sent_ns, len(expired))
        if live:
            outcome = self.call_requests([requests[index] for index in live])
            measures.batch_done(started, len(live) if isinstance(outcome, Failure) else 0)
            entries = per_request(self.context, len(live), outcome)
            for index, entry in zip(live, entries):
                answers[index] = entry
        return batch_sizes, answers

    def call_requests(self, requests: List[Request]) -> Any:
        """The callable's result for `requests`, or a `Failure` (after isolating failures if asked)."""
        try:
            return self._run_callable(requests)
        except Exception as exc:  # noqa: BLE001 - the callable's error goes to this batch's requesters only
            if not (self._isolate_failures and len(requests) > 1 and _may_split(exc) and not _must_stop(exc)):
                error, unrecoverable = self.callable_error(exc, requests)
                return Failure(error, unrecoverable)
            failed = exc
        # Outside the except block, so the retries' errors do not chain (and log) this one.
        return self._isolate(requests, failed)

    def _isolate(self, requests: List[Request], error: Exception) -> List[Any]:
        """Per request, its response or its `Failure`, after calling the callable again on parts
        of the batch it raised `error` on (see `isolation.isolate`)."""
        logger.warning("Model '%s': the inference callable raised on a batch of %d requests (%s: %s); calling it "
                       "on parts of the batch to find the failing requests", self.model_name, len(requests),
                       type(error).__name__, error)
        calls = [0]

        def call(indices: Sequence[int]) -> Any:
            calls[0] += 1
            return self._run_callable([requests[i] for i in indices])

        answers: List[Any] = [None] * len(requests)
        for indices, answer, failure in isolate(len(requests), call, error, may_split=_may_split,
                                                 must_stop=_must_stop):
            if failure is not None:
                part = [requests[i] for i in indices]
                entries: List[Any] = [Failure(*self.callable_error(failure, part))] * len(indices)
            else:
                if inspect.iscoroutine(answer):
                    answer.close()  # a plain callable returned an awaitable for a part only: not awaited
                entries = per_request(self.context, len(indices), answer)
            for index, entry in zip(indices, entries):
                answers[index] = entry
        failed = sum(1 for answer in answers if isinstance(answer, Failure))
        self.measures.callable_failed(failed)  # the batch counts as done, without errors, in `call`
        logger.warning("Model '%s': %d of %d requests failed on their own (%d extra calls)", self.model_name,
                       failed, len(requests), calls[0])
        return answers

    def callable_error(self, exc: Exception, requests: Optional[Sequence[Request]] = None) -> Tuple[str, bool]:
        """The message a requester gets for the callable's exception, and whether it is unrecoverable.

        `requests`: those it raised for, when only some of the batch's (their spans say so)."""
        model = self.model_name
        if self._traced:
            tracing.failed(exc, requests)
        if isinstance(exc, (NotDecoupled, ExecutionTimeout)):  # already logged where it happened
            return str(exc), False
        if isinstance(exc, PyTritonUnrecoverableError):
            logger.error("Model '%s': unrecoverable error, the server shuts down", model, exc_info=exc)
            return f"Model '{model}' failed: PyTritonUnrecoverableError: {exc}", True
        logger.error("Model '%s': the inference callable raised", model, exc_info=exc)
        return f"Model '{model}' failed: {type(exc).__name__}: {exc}", False

    def internal_error(self, exc: Exception) -> str:
        """The message for a bug of ours while serving a batch (logged with its traceback)."""
        logger.exception("Model '%s': the worker failed to process a batch", self.model_name)
        return f"Model '{self.model_name}': internal error in the pytriton worker: {exc}"

    def not_decoupled_message(self) -> str:
        return (f"Model '{self.model_name}': the inference callable yields responses (it is a generator), "
                "but the model is not decoupled; bind it with ModelConfig(decoupled=True) to stream responses")

    def cut_message(self) -> str:
        return f"Model '{self.model_name}': the server is stopping; the stream was cut short"

    def result(
        self, batch_id: int, count: int, results: Any, batch_sizes: Expected, arena: Optional[Arena]
    ) -> Tuple[protocol.BatchResult, List[Any]]:
        """The `BatchResult` of a batch and its payload; large outputs in `arena` (None: inline)."""
        if self._traced:  # the callable's answers are in: its span ends here
            tracing.called()
        return batch_result(self.context, batch_id, count, results, batch_sizes, self.strict, arena)

    def part(
        self, batch_id: int, count: int, step: Any, batch_sizes: Expected
    ) -> Tuple[protocol.StreamPart, List[Any]]:
        """The `StreamPart` of one step of a streaming callable, and its payload."""
        return stream_part(self.context, batch_id, count, step, batch_sizes, self.strict)


def runs_on(outcome: Any) -> bool:
    """Whether the callable's work goes on after it returned `outcome` (a generator or a coroutine)."""
    return inspect.isgenerator(outcome) or inspect.iscoroutine(outcome) or inspect.isasyncgen(outcome)


def _may_split(exc: Exception) -> bool:
    """A timeout says nothing about which requests are at fault; retrying parts would only hang again."""
    return not isinstance(exc, ExecutionTimeout)


def _must_stop(exc: Exception) -> bool:
    """An unrecoverable error is never retried: the callable says it cannot serve anymore."""
    return isinstance(exc, PyTritonUnrecoverableError)


def batch_size(request: Request) -> Optional[int]:
    """The request's batch size: the leading dim of its first input with one (None: none has)."""
    for array in request.values():
        if array.ndim:
            return int(array.shape[0])
    return None


def pop_expired(requests: Sequence[Request], now_s: float) -> List[int]:
    """Indices of the requests whose deadline passed by `now_s` (Unix seconds).

    The deadline parameter is removed from every request's parameters, so the callable sees only
    the parameters its client chose, and kept on the request for `Request.is_cancelled`. A value
    that is not a number is ignored (not pytriton's).
    """
    expired = []
    now_ms = now_s * 1000
    for index, request in enumerate(requests):
        deadline = request.parameters.pop(DEADLINE_PARAMETER, None)
        if isinstance(deadline, (int, float)) and not isinstance(deadline, bool):
            request._deadline_ms = deadline  # past it, request.is_cancelled() says True: nobody waits
            if deadline < now_ms:
                expired.append(index)
    return expired


def only_live_deadlines(parameters: Sequence[str]) -> bool:
    """Whether a batch's request parameters (JSON text per request, "" for none) hold nothing but
    pytriton's deadlines, none of them passed: what pytriton's own clients send. Such a batch
    needs no request objects (the whole-batch lane, `WholeLane`); any other parameter, or a passed
    deadline, goes the general way, which hands parameters over and answers the expired."""
    now_ms = time.time() * 1000
    for text in parameters:
        if not text:
            continue
        try:
            values = json.loads(text)
        except ValueError:
            return False
        if type(values) is not dict or len(values) != 1:
            return False
        deadline = values.get(DEADLINE_PARAMETER)
        if not isinstance(deadline, (int, float)) or isinstance(deadline, bool) or deadline < now_ms:
            return False
    return True


def expired_message(model_name: str) -> str:
    return (f"Model '{model_name}': the request's deadline (its client's inference timeout) passed while it "
            "waited in the server's queue; it was not computed")


def serves_whole(context: TritonContext, whole: Optional[WholeBatch], *, asynchronous: bool,
                 isolate_failures: bool, timed: bool) -> bool:
    """Whether the model's batches may take the whole-batch lane (`WholeLane`) at all.

    Not for a model without batching (no batch axis to gather), a decoupled or async one (their
    results stream or overlap), one whose callable is retried on parts (``isolate_failures``) or
    timed on a thread (``execution_timeout_s``), nor a sequence model (its requests carry ids).
    """
    config = context.config
    if whole is None or asynchronous or isolate_failures or timed or not config.batching or config.decoupled:
        return False
    return type(config.batcher).__name__ != "SequenceBatcher"


class LentInputs:
    """The inputs a batch handed over as views of the sender's arena (see the module docstring):
    whether the function kept any of them once its answer is packed."""

    __slots__ = ("_refs",)

    def __init__(self, arrays: List[np.ndarray]) -> None:
        self._refs = [weakref.ref(array) for array in arrays]

    def kept(self) -> bool:
        """Whether any of the arrays is still referenced (a view of one holds it too)."""
        return any(ref() is not None for ref in self._refs)


def whole_inputs(batch: protocol.InferBatch, payload: Any, reader: SegmentReader) -> Optional[Tuple[
        Dict[str, np.ndarray], List[int], Optional[LentInputs]]]:
    """Each input of `batch` as one writeable array, each request's row count, and the inputs
    lent from the sender's arena (None when all were copied); None when the batch does not fit
    the lane (see the module docstring)."""
    if batch.traces or batch.requested or batch.sequences or not batch.columns:
        return None
    if any(batch.parameters) and not only_live_deadlines(batch.parameters):
        return None  # parameters go to the requests, and a passed deadline decides a request's fate
    segment = batch.segment
    if not segment:
        reader.forget_gone()  # as `codec.unpack`: an arena the proxy gave up lives while mapped here
    inputs: Dict[str, np.ndarray] = {}
    lent: List[np.ndarray] = []
    for column in batch.columns:
        in_arena = column.in_shm[0]
        array = codec.gathered(column, segment, payload, reader, writable=in_arena)
        if array is None or column.name in inputs:
            return None
        if in_arena:
            lent.append(array)  # this batch's own bytes until it is answered: no copy
        else:
            array = array.copy()  # the channel's buffer, which the next message reuses
        inputs[column.name] = array
    rows = [shape[0] for shape in batch.columns[0].shapes]  # type: ignore[index]  # no None: gathered
    return inputs, rows, LentInputs(lent) if lent else None


class WholeLane:
    """Serves the batches of one instance's plain ``@batch`` function that fit the lane.

    Args:
        calls: the instance's batch steps (`BatchCalls.whole` must be set): its measures, its
            strictness and its error messages are the lane's too.
    """

    __slots__ = ("_calls", "_whole", "_measures", "_strict_sizes", "_outputs", "_unsized", "lent")

    def __init__(self, calls: BatchCalls) -> None:
        assert calls.whole is not None, "a model the whole-batch lane does not serve"
        self._calls = calls
        self._whole = calls.whole
        self._measures = calls.measures
        self._strict_sizes = calls.strict  # BatchCalls.whole is set for batching models only
        context = calls.context
        numeric = all(dtype.kind not in ("O", "S", "U") for dtype in context.output_dtypes)
        self._outputs: Optional[Tuple[Tuple[str, np.dtype, Optional[Tuple[int, ...]]], ...]] = tuple(
            (tensor.name, dtype, tuple(tensor.shape) if calls.strict else None)
            for tensor, dtype in zip(context.outputs, context.output_dtypes)
        ) if numeric and context.outputs else None
        """Per declared output: its name, dtype and (with ``strict``) trailing shape; None when
        some output is BYTES, which only the general packing writes."""
        self._unsized: Dict[int, Expected] = {}
        self.lent: Optional[LentInputs] = None
        """The current batch's inputs lent from the sender's arena."""

    def serve(self, batch: protocol.InferBatch, payload: Any, reader: SegmentReader, arena: Optional[Arena],
              marks: Optional[List[int]]) -> Optional[Tuple[Expected, Any]]:
        """Run the function on `batch` when it fits the lane (else None, and nothing was called).

        `arena` is the loop's output arena (None while it has none). `marks`, when given, gets
        the `protocol.Stamp.DECODED` stamp.

        Returns:
            As `BatchCalls.call`: per request its batch size (when `strict` checks shapes, else
            None), and the outcome: the `Packed` answer, or what the general answer is built
            from (`WholeOutputs`, a `Failure`, a generator or coroutine of @batch's).
        """
        taken = whole_inputs(batch, payload, reader)
        if taken is None:
            return None
        inputs, rows, self.lent = taken
        count = len(rows)
        if self._strict_sizes:
            batch_sizes = Expected(list(rows))
        else:  # one per count, kept (it is only read): building one costs as much as a step of the lane
            batch_sizes = self._unsized.get(count) or self._unsized.setdefault(count, Expected([None] * count))
        if marks is not None:
            marks.append(time.monotonic_ns())
        measures = self._measures
        started = measures.batch_started(count, batch.sent_ns, 0)
        try:
            result = self._whole.function(**inputs)
            outcome: Any = self._pack(batch.batch_id, result, rows, arena) if type(result) is dict else None
            if outcome is None:
                outcome = self._whole.answer(result, rows)
        except Exception as exc:  # noqa: BLE001 - the callable's error goes to this batch's requesters only
            outcome = Failure(*self._calls.callable_error(exc))
        kind = type(outcome)
        if kind is Packed or kind is WholeOutputs or kind is Failure or not runs_on(outcome):
            measures.batch_done(started, count if kind is Failure else 0)
        return batch_sizes, outcome

    def inputs_kept(self) -> bool:
        """Whether the function kept an input lent from the sender's arena; asked once per batch,
        after its answer is packed and dropped (`LentInputs`): by `BatchCalls.serve`, whose
        `outcome` is then the only reference to the answer that it drops first."""
        lent, self.lent = self.lent, None
        return lent is not None and lent.kept()

    def _pack(self, batch_id: int, result: Dict[str, Any], rows: List[int], arena: Optional[Arena]) -> Optional[Packed]:
        """The answer packed for the wire when `result` needs nothing more (see the module
        docstring); None sends it through ``@batch``'s checks and the general packing."""
        outputs = self._outputs
        if outputs is None or len(result) != len(outputs):
            return None
        if arena is not None and arena.capacity:
            return None  # the general packing counts this message in the arena's window, so it shrinks back
        total = sum(rows)
        arrays = {}
        for name, dtype, shape in outputs:
            array = result.get(name)
            if (type(array) is not np.ndarray or (array.dtype is not dtype and array.dtype != dtype) or not array.ndim
                    or array.shape[0] != total or array.nbytes > INLINE_MAX_BYTES or not array.flags.c_contiguous):
                return None
            if shape is not None and not shape_matches(array.shape[1:], shape):
                return None
            arrays[name] = array
        columns, _, payload = codec.pack_rows_inline(arrays, rows)
        return Packed(protocol.BatchResult(batch_id, (None,) * len(rows), columns, ""), payload)

