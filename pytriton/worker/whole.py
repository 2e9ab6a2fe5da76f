"""The whole-batch lane: a plain ``@batch`` function's batch served without a request object.

Step of the request flow: the blocking loop (`pytriton.worker.blocking`) offers each batch here
first -> the function under ``@batch`` -> the answer, packed here -> the loop, which sends it. A
batch the lane does not take goes the general way (`pytriton.worker.batches`), untouched.

The common model is a function under ``@batch`` alone: all it reads is each input of the batch
as one array, and all it returns is each output as one array. For such a callable
(`pytriton.worker.responses.WholeBatch`, when `BatchCalls.whole` says its model fits) the lane
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
``strict``) of the declared trailing shape, is packed here at once (`Packed`), one buffer per
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

import time
import weakref
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from pytriton.ipc import codec, protocol
from pytriton.ipc.codec import INLINE_MAX_BYTES
from pytriton.ipc.shm import Arena, SegmentReader
from pytriton.worker.batches import BatchCalls, only_live_deadlines, runs_on
from pytriton.worker.responses import Expected, Failure, Packed, WholeOutputs, shape_matches


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
    lent: Optional[List[np.ndarray]] = None
    for column in batch.columns:
        in_arena = column.in_shm[0]
        array = codec.gathered(column, segment, payload, reader, writable=in_arena)
        if array is None or column.name in inputs:
            return None
        if in_arena:
            if lent is None:
                lent = []
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
            outcome = self._pack(batch.batch_id, result, rows, arena) if type(result) is dict else None
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
        after its answer is packed and dropped (`LentInputs`)."""
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

