"""The whole-batch path: a ``@batch`` function served without a `Request` per request.

The common model is a function under ``@batch`` alone: all it reads is each input of the batch
as one array, and all it returns is each output as one array. For such a callable
(`WholeBatch`, found by the decorators' `pytriton.decorating.shaping.whole_batch`) the worker
builds exactly that from the wire's columns (one writeable array per input, as ``@batch``
gives it), calls the function, and returns a `WholeOutputs` that
`pytriton.worker.responses.batch_result` checks once for the batch and sends back as one buffer
per output. No request objects, no per-request checks, no parameters parsed.

A large input (one the sender laid out in its arena) is handed over without a copy: a writeable
view of the arena, which holds this batch alone until it is answered. Only a function that keeps
such an array past its answer (a cache, a queue for later) could see the next batch's bytes
arrive in it; `LentInputs` notices that (a weak reference per array still alive once the answer
is packed) and the answer tells the sender (`protocol.BatchResult.inputs_kept`), who then lays
the next batch out in a new segment and leaves the old one to the kept arrays. Small inputs
travel inline in the channel's buffer, which the next message reuses: those are copied.

A batch this path does not fit goes the general way (`pytriton.worker.batches`), which gives
the same callable the same arrays through ``@batch``: a BYTES input, requests with different
inputs or trailing shapes, request parameters (anything a decorator might read, or a deadline
that passed; the deadlines pytriton's clients send with every request are no obstacle while
they lie ahead), a subset of outputs asked for, trace contexts. An answer that fails the batch's check is
answered exactly as ``@batch`` would have answered it, so errors read the same on both paths.
"""

from __future__ import annotations

import weakref
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Tuple

import numpy as np

from pytriton.ipc import codec, protocol
from pytriton.ipc.shm import SegmentReader
from pytriton.worker.context import TritonContext
from pytriton.worker.deadline import only_live_deadlines
from pytriton.worker.request import BatchResponses
from pytriton.worker.results import is_lazy, map_result


class WholeBatch(NamedTuple):
    """A ``@batch`` callable taken apart: the function under the decorator, and how ``@batch``
    turns its result into whole outputs (raising what ``@batch`` raises)."""

    function: Callable[..., Any]
    outputs: Callable[[Any, List[int]], Dict[str, np.ndarray]]


class WholeOutputs(NamedTuple):
    """The answer of the whole-batch path: each output of the batch as one array, and each
    request's row count (what ``@batch`` would have split them by)."""

    outputs: Dict[str, np.ndarray]
    rows: List[int]

    def responses(self) -> Any:
        """The answer as ``@batch`` gives it through the general path: one response per request."""
        if len(self.rows) == 1:
            return [self.outputs]
        return BatchResponses(self.outputs, self.rows)


def serves_whole(context: TritonContext, whole: Optional[WholeBatch], *, asynchronous: bool,
                 isolate_failures: bool, timed: bool) -> bool:
    """Whether the model's batches may take the whole-batch path at all.

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
    this path (see the module docstring)."""
    if batch.traces or batch.requested or batch.sequences or not batch.columns:
        return None
    if any(batch.parameters) and not only_live_deadlines(batch.parameters):
        return None  # parameters go to the requests, and a passed deadline decides a request's fate
    if not batch.segment:
        reader.forget_gone()  # as `codec.unpack`: an arena the proxy gave up lives while mapped here
    inputs: Dict[str, np.ndarray] = {}
    lent: List[np.ndarray] = []
    for column in batch.columns:
        in_arena = column.in_shm[0]
        array = codec.gathered(column, batch.segment, payload, reader, writable=in_arena)
        if array is None or column.name in inputs:
            return None
        if in_arena:
            lent.append(array)  # this batch's own bytes until it is answered: no copy
        else:
            array = array.copy()  # the channel's buffer, which the next message reuses
        inputs[column.name] = array
    rows = [shape[0] for shape in batch.columns[0].shapes]  # type: ignore[index]  # no None: gathered
    return inputs, rows, LentInputs(lent) if lent else None


def call_whole(whole: WholeBatch, inputs: Dict[str, np.ndarray], rows: List[int]) -> Any:
    """The function's answer as `WholeOutputs`. A result that is not a direct answer (a
    generator or a coroutine) is passed on as ``@batch`` passes it, each of its values split into
    per-request responses. Raises what the function or ``@batch``'s checks raise."""
    result = whole.function(**inputs)
    if type(result) is not dict and is_lazy(result):
        return map_result(result, lambda value: WholeOutputs(whole.outputs(value, rows), rows).responses())
    return WholeOutputs(whole.outputs(result, rows), rows)
