"""A batch out: checks what a callable returned and turns it into the wire's answer messages.

Step of the request flow: the user's callable (through the decorators) -> here -> the loop that
sends the answer (`pytriton.worker.blocking`, `pytriton.worker.asynchronous`); the batch came in
through `pytriton.worker.batches`.

Pure functions: `host_array` makes a numpy array of an output (torch tensors included),
`shape_response` checks one request's response against the declared outputs, so that one
request's bad response becomes an error for that requester alone; `batch_result` and
`stream_part` build the `BatchResult` (one answer per request) and the `StreamPart` (one step of
a stream) of a whole batch from what the callable returned or yielded. A ``@batch`` function on
the whole-batch path answers `WholeOutputs`: each output of the batch as one array, checked once
for the batch and sent as one buffer per output. What they read and write besides the wire's
messages (`Failure`, `Expected`, `WholeOutputs`, `Packed`) is in `pytriton.worker.outcomes`.

Outputs as torch tensors: the wire carries numpy arrays only, but a model on a GPU naturally ends
in a torch tensor; making every user write ``.detach().cpu().numpy()`` is busywork, and a bare
``np.asarray`` fails on tensors that are on a device or require grad. torch is never imported
here: a value counts as a torch tensor only when torch is already in ``sys.modules`` (the
callable made one, so it is) and the value is an instance of its ``Tensor``.
"""

from __future__ import annotations

import logging
import sys
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from pytriton.exceptions import PyTritonValidationError
from pytriton.ipc import codec, protocol
from pytriton.ipc.shm import Arena
from pytriton.worker.context import TritonContext
from pytriton.worker.outcomes import Expected, Failure, Packed, WholeOutputs
from pytriton.worker.request import BatchResponses, Request

logger = logging.getLogger("pytriton.worker")


def is_torch_tensor(value: Any) -> bool:
    """Whether `value` is a torch tensor, without importing torch."""
    torch = sys.modules.get("torch")
    tensor_type = getattr(torch, "Tensor", None) if torch is not None else None
    return tensor_type is not None and isinstance(value, tensor_type)


def torch_to_numpy(tensor: Any, what: str) -> np.ndarray:
    """One copy to the host (none for a CPU tensor), detached from autograd, as a numpy array.

    A CPU tensor's array shares its memory; the wire copies it anyway. Dtypes that numpy lacks
    (bfloat16, the float8 kinds) are refused with the cast to make, rather than guessed at.
    """
    host = tensor.detach()
    if host.device.type != "cpu":
        host = host.cpu()  # the one device-to-host copy, which also waits for the kernels before it
    if getattr(host, "is_conj", lambda: False)():
        host = host.resolve_conj()
    try:
        array: np.ndarray = host.numpy()
    except TypeError as exc:
        raise PyTritonValidationError(
            f"{what} is a torch tensor of dtype {tensor.dtype}, which numpy cannot hold ({exc}); "
            "convert it in the callable, e.g. with .float() for bfloat16"
        ) from exc
    return array


def host_array(value: Any, what: str) -> np.ndarray:
    """`value` as a numpy array: arrays as they are, torch tensors copied to the host, the rest
    through ``np.asarray`` (whose errors the caller words)."""
    if isinstance(value, np.ndarray):
        return value
    if is_torch_tensor(value):
        return torch_to_numpy(value, what)
    return np.asarray(value)


def _describe(value: Any) -> str:
    if isinstance(value, np.ndarray):
        return f"array of dtype {value.dtype} and shape {value.shape}"
    return type(value).__name__


def shape_matches(actual: Sequence[int], expected: Sequence[int]) -> bool:
    """Whether a shape fits a declared one (-1: any size on that axis)."""
    return len(actual) == len(expected) and all(e == -1 or a == e for a, e in zip(actual, expected))


def _dtype_name(dtype: np.dtype) -> str:
    return "BYTES (object or bytes array)" if dtype.kind in ("O", "S", "U") else str(dtype)


def _dtype_matches(actual: np.dtype, expected: np.dtype) -> bool:
    if expected.kind in ("O", "S", "U"):
        return actual.kind in ("O", "S", "U")
    return actual == expected


def _name_mismatch(model: str, request_index: int, names: Sequence[str], missing: List[str], extra: List[str]) -> str:
    """Why a response's keys do not fit the declared outputs, naming both sides."""
    parts = []
    if missing:
        parts.append(f"is missing output(s) {missing}")
    if extra:
        parts.append(f"has output(s) {extra} that the model does not declare")
    hint = ""
    lowered = {name.lower(): name for name in names}
    near = [f"{key!r} -> {lowered[key.lower()]!r}" for key in extra if key.lower() in lowered]
    if near:
        hint = f" (names are case-sensitive: {', '.join(near)})"
    return (f"{model}: the response to request {request_index} {' and '.join(parts)}; declared outputs: "
            f"{list(names)}{hint}")


def shape_response(
    context: TritonContext,
    response: Any,
    *,
    request_index: int,
    batch_size: Optional[int],
    strict: bool,
    requested: Optional[Tuple[str, ...]] = None,
) -> Dict[str, np.ndarray]:
    """The declared outputs of one response, as arrays ready for the wire.

    Outputs are matched by name, with two exceptions, both where the user never wrote the
    names to match: a `Request` returned as it came (the ``lambda requests: requests`` identity
    model of the published docs), whose inputs map to the outputs in declared order, and a
    response to a model whose outputs were all declared without names (see `positional`). Any
    other mapping whose keys miss a declared output is refused, naming the unknown and the
    missing names: renaming a dict by position when the user named the outputs would answer
    with the wrong tensor as soon as a key is misspelt (``{"Y": ...}`` for ``y``).

    Args:
        context: the model being served (names, declared dtypes and shapes).
        response: what the callable returned for this request.
        request_index: position of the request in the batch, for error messages.
        batch_size: the request's batch size when the model batches, else None.
        strict: refuse (instead of converting) outputs of another dtype, and check shapes.
        requested: the outputs the request asked for, when fewer than all: the others may be
            missing from `response` and are not sent.

    Raises:
        PyTritonValidationError: naming the model, the output, what came and what was expected.
    """
    if not strict and isinstance(response, dict) and requested is None:
        # The common case, checked first because it runs for every request of every batch: a dict
        # holding every output as an array of the declared dtype passes through untouched.
        outputs = context.outputs
        found = {tensor.name: response.get(tensor.name) for tensor in outputs}
        if all(
            type(array) is np.ndarray and _dtype_matches(array.dtype, expected)
            for array, expected in zip(found.values(), context.output_dtypes)
        ):
            return found  # type: ignore[return-value]  # every value was checked to be an array
    model = f"Model '{context.model_name}'"
    if not isinstance(response, Mapping):
        raise PyTritonValidationError(
            f"{model}: the inference callable returned {_describe(response)} for request {request_index}; "
            "expected a mapping of output name to numpy array"
        )
    names = context.output_names
    if type(response) is Request and len(response) == len(names) and not any(name in response for name in names):
        # The identity model: its entries follow the declared input order, so the match does not
        # depend on the order a batch happened to list them in.
        order = [name for name in context.input_names if name in response]
        keys = order if len(order) == len(response) else list(response)
        response = {name: response[key] for name, key in zip(names, keys)}
    else:
        response = positional(context, response)
    missing = [name for name in names if name not in response and (requested is None or name in requested)]
    extra = sorted(str(key) for key in response if key not in names)
    if missing or (strict and extra):
        raise PyTritonValidationError(_name_mismatch(model, request_index, names, missing, extra))
    arrays: Dict[str, np.ndarray] = {}
    for tensor in context.outputs:
        if requested is not None and tensor.name not in requested:
            continue  # not asked for: not sent
        value = response[tensor.name]
        try:
            array = host_array(value, f"{model}: output '{tensor.name}' of request {request_index}")
        except PyTritonValidationError:
            raise
        except Exception as exc:
            raise PyTritonValidationError(
                f"{model}: output '{tensor.name}' of request {request_index} is not convertible to a numpy array "
                f"({type(value).__name__}: {exc})"
            ) from exc
        expected_dtype = np.dtype(tensor.dtype)
        if not _dtype_matches(array.dtype, expected_dtype):
            if strict or expected_dtype.kind in ("O", "S", "U") or array.dtype.kind in ("O", "S", "U"):
                raise PyTritonValidationError(
                    f"{model}: output '{tensor.name}' of request {request_index} has dtype {array.dtype}; "
                    f"expected {_dtype_name(expected_dtype)}"
                )
            array = array.astype(expected_dtype)
        if strict:
            expected_shape = tuple(tensor.shape)
            if batch_size is not None:
                expected_shape = (batch_size, *expected_shape)
            if not shape_matches(array.shape, expected_shape):
                raise PyTritonValidationError(
                    f"{model}: output '{tensor.name}' of request {request_index} has shape {array.shape}; "
                    f"expected {expected_shape} (-1 means any size)"
                )
        arrays[tensor.name] = array
    return arrays


def positional(context: TritonContext, response: Any) -> Any:
    """`response` with its keys replaced by the declared output names, in the mapping's order,
    when the user named none of the outputs (pytriton called them ``OUTPUT_<n>``), the mapping
    has one entry per output and none of its keys is a declared name; else `response` as is.

    The contract's own example declares ``Tensor(shape=..., dtype=...)`` twice and returns
    ``{"add": ..., "sub": ...}``: the user never saw the names ``OUTPUT_1``/``OUTPUT_2``, so
    the only order they wrote, the dict's, is the one to follow. A response with fewer entries
    (a stream step carrying some outputs) or naming any declared output matches by name.
    """
    if not context.outputs_unnamed or not isinstance(response, Mapping):
        return response
    names = context.output_names
    if len(response) != len(names) or any(key in names for key in response):
        return response
    return dict(zip(names, response.values()))


def per_request(context: TritonContext, count: int, results: Any, what: str = "returned") -> List[Any]:
    """One entry per request: a response, None, or a `Failure` (for all of them when `results`
    is not a list of `count` entries)."""
    if isinstance(results, Failure):
        return [results] * count
    if isinstance(results, (list, tuple)) and len(results) == count:
        return list(results)
    got = f"a {type(results).__name__} of {len(results)}" if isinstance(results, (list, tuple)) else (
        type(results).__name__)
    error = (f"Model '{context.model_name}': the inference callable {what} {got} for a batch of {count} "
             "requests; expected a list with one mapping of output name to array per request")
    if isinstance(results, Mapping):
        error += (" (did you forget @batch? Without a decorator the callable receives the list of requests and "
                  "answers each; with @batch it receives the inputs as keyword arrays and returns one mapping)")
    return [Failure(error)] * count


def _shape_all(
    context: TritonContext, outcomes: List[Any], batch_sizes: Expected, strict: bool
) -> Tuple[List[Dict[str, np.ndarray]], List[Optional[str]], List[bool]]:
    """Per request: its arrays, its error (or None), and whether it has a response at all."""
    groups: List[Dict[str, np.ndarray]] = []
    errors: List[Optional[str]] = []
    present: List[bool] = []
    for index, outcome in enumerate(outcomes):
        present.append(outcome is not None)
        if outcome is None:
            groups.append({})
            errors.append(None)
        elif isinstance(outcome, Failure):
            groups.append({})
            errors.append(outcome.message)
        else:
            try:
                groups.append(shape_response(context, outcome, request_index=index, batch_size=batch_sizes[index],
                                             strict=strict, requested=batch_sizes.asked(index)))
                errors.append(None)
            except Exception as exc:  # noqa: BLE001 - one bad response fails that request only
                logger.warning("%s", exc)
                groups.append({})
                errors.append(str(exc))
    return groups, errors, present


def _whole_outputs(
    context: TritonContext, results: Any, count: int, strict: bool, batch_sizes: Expected
) -> Optional[Dict[str, np.ndarray]]:
    """The declared outputs of a `@batch` answer as whole arrays (every request's rows back to
    back), when they need no per-request look: all numeric, of the declared dtype (cast unless
    `strict`) and, with `strict`, of the declared trailing shape. None sends the answer down the
    per-request checks, which name what is wrong for each request."""
    if not context.config.batching or batch_sizes.requested:  # some request wants fewer outputs: per request
        return None
    if type(results) is WholeOutputs:
        whole: Optional[Dict[str, np.ndarray]] = results.outputs
    elif type(results) is BatchResponses and len(results) == count:
        whole = results.whole_outputs()
    else:
        return None
    if whole is None:
        return None
    if context.outputs_unnamed:
        whole = positional(context, whole)
    if strict and len(whole) != len(context.outputs):  # undeclared ones: refused per request
        return None
    arrays = {}
    for tensor, expected in zip(context.outputs, context.output_dtypes):
        array = whole.get(tensor.name)
        if array is None or expected.kind in ("O", "S", "U") or array.dtype.kind in ("O", "S", "U"):
            return None
        if array.dtype != expected:
            if strict:
                return None
            array = array.astype(expected)
        if strict and not shape_matches(array.shape[1:], tuple(tensor.shape)):
            return None
        arrays[tensor.name] = array
    return arrays


def batch_result(
    context: TritonContext,
    batch_id: int,
    count: int,
    results: Any,
    batch_sizes: Expected,
    strict: bool,
    arena: Optional[Arena],
) -> Tuple[protocol.BatchResult, List[Any]]:
    """The `BatchResult` of a batch from what the callable returned (or a `Failure`).

    `arena` carries large outputs; None sends everything inline (when answers overlap).
    """
    if type(results) is Packed:
        return results.result, results.payload
    whole = _whole_outputs(context, results, count, strict, batch_sizes)
    if whole is not None:
        columns, segment, payload = codec.pack_rows(whole, results.rows, arena)
        return protocol.BatchResult(batch_id, (None,) * count, columns, segment), payload
    if type(results) is WholeOutputs:  # not fit to go whole: checked per request, as @batch's answer is
        results = results.responses()
    outcomes = per_request(context, count, results, "returned")
    for index, outcome in enumerate(outcomes):
        if outcome is None:  # a response is required for every request of a non-streaming model
            outcomes[index] = Failure(f"Model '{context.model_name}': the inference callable returned None for "
                                      f"request {index}; expected a mapping of output name to array")
    groups, errors, _ = _shape_all(context, outcomes, batch_sizes, strict)
    unrecoverable = any(isinstance(o, Failure) and o.unrecoverable for o in outcomes)
    columns, segment, payload = codec.pack(groups, arena)
    return protocol.BatchResult(batch_id, tuple(errors), columns, segment, unrecoverable,
                                codes=_error_codes(outcomes)), payload


def _error_codes(outcomes: List[Any]) -> Tuple[int, ...]:
    """`BatchResult.codes`: per request its error's code, or () when none is other than INTERNAL."""
    internal = protocol.ErrorCode.INTERNAL
    if not any(type(outcome) is Failure and outcome.code != internal for outcome in outcomes):
        return ()
    return tuple(outcome.code if type(outcome) is Failure else internal for outcome in outcomes)


def stream_part(
    context: TritonContext, batch_id: int, count: int, step: Any, batch_sizes: Expected, strict: bool
) -> Tuple[protocol.StreamPart, List[Any]]:
    """The `StreamPart` of one value a streaming callable yielded; always inline (the proxy may
    still be reading the previous part when this one is written)."""
    whole = _whole_outputs(context, step, count, strict, batch_sizes)
    if whole is not None:
        columns, _, payload = codec.pack_rows(whole, step.rows, None)
        return protocol.StreamPart(batch_id, (True,) * count, (None,) * count, columns), payload
    if type(step) is WholeOutputs:
        step = step.responses()
    groups, errors, present = _shape_all(context, per_request(context, count, step, "yielded"), batch_sizes, strict)
    columns, _, payload = codec.pack(groups, None)
    return protocol.StreamPart(batch_id, tuple(present), tuple(errors), columns), payload


def step_outputs(context: TritonContext, outcome: Mapping[str, Any], count: int) -> Any:
    """What a step function returned as one mapping (each output with one row per stream, as a
    batched forward pass ends): a `WholeOutputs` of one row per stream (a list of each stream's
    row when the model has no batch axis), or a `Failure` for all `count` streams that names the
    output whose rows do not match."""
    outputs = {}
    for name, value in outcome.items():
        what = f"Model '{context.model_name}': the step function's output '{name}'"
        try:
            array = host_array(value, what)
        except Exception as exc:  # noqa: BLE001 - worded for every stream of the step
            return Failure(f"{what} is not an array ({exc}); expected one row per stream")
        if not array.ndim or array.shape[0] != count:
            rows = f"shape {array.shape}" if array.ndim else "a scalar"
            return Failure(f"{what} has {rows} for a step of {count} stream(s); expected one row per stream "
                           f"(shape ({count}, ...)), or return a list with one mapping per stream")
        outputs[name] = array
    if not context.config.batching:  # a piece without the batch axis: each stream's row itself
        return [{name: array[index] for name, array in outputs.items()} for index in range(count)]
    return WholeOutputs(outputs, [1] * count)


def step_part(
    context: TritonContext, batch_ids: Tuple[int, ...], positions: Tuple[int, ...], entries: Any, sizes: Expected,
    strict: bool, final: Tuple[bool, ...],
) -> Tuple[protocol.StepPart, List[Any]]:
    """The `StepPart` of one step of a continuous-batching model: per stream (its batch's id in
    `batch_ids`, its place in that batch in `positions`) its entry (a response, None or a
    `Failure`), checked as a streamed response is, or every stream's row of one `WholeOutputs`
    (`step_outputs`); inline, like every streamed part."""
    if type(entries) is WholeOutputs:  # one array per output: sent as it is when it needs no per-piece look
        count = len(batch_ids)
        whole = _whole_outputs(context, entries, count, strict, sizes)
        if whole is not None:
            columns, _, payload = codec.pack_rows_inline(whole, entries.rows)
            return protocol.StepPart(batch_ids, positions, (True,) * count, (None,) * count, final, columns), payload
        entries = list(entries.responses())
    packed = None if sizes.requested else _step_rows(context, entries, strict)
    if packed is not None:  # every stream has a piece of the declared arrays: no per-piece checks
        columns, _, payload = packed
        count = len(entries)
        return protocol.StepPart(batch_ids, positions, (True,) * count, (None,) * count, final, columns), payload
    groups, errors, present = _shape_all(context, entries, sizes, strict)
    columns, _, payload = codec.pack(groups, None)
    return protocol.StepPart(batch_ids, positions, tuple(present), tuple(errors), final, columns), payload


def _step_rows(context: TritonContext, entries: List[Any], strict: bool) -> Optional[
        Tuple[Tuple[protocol.TensorColumn, ...], str, List[Any]]]:
    """A step's pieces packed at once, when each is a dict of exactly the declared (numeric) outputs,
    arrays of the declared dtypes whose rows agree: the common step, which then costs one
    concatenation per output instead of a check per piece (what `shape_response` would accept as
    is, checked once here); None sends the step through the general checks, whose errors name
    the piece."""
    if not context.config.batching or not entries:
        return None
    outputs = context.outputs
    dtypes = context.output_dtypes
    if any(dtype.kind in ("O", "S", "U") for dtype in dtypes):
        return None
    names = context.output_names
    width = len(names)
    first = names[0]
    rows = []
    for entry in entries:
        if type(entry) is not dict or len(entry) != width:
            return None
        head = entry.get(first)
        if type(head) is not np.ndarray or not head.ndim:
            return None
        rows.append(head.shape[0])
    arrays = {}
    for index, (tensor, dtype) in enumerate(zip(outputs, dtypes)):
        name = tensor.name
        values = [entry.get(name) for entry in entries]
        for value in values:
            if type(value) is not np.ndarray:
                return None
        try:  # arrays whose dims differ after the first cannot be joined
            whole = np.concatenate(values)
        except ValueError:
            return None
        # A mix of dtypes joins as the widest: accepted when that is the declared one (the general
        # path would cast each piece to it too), unless `strict` asks for each piece's dtype.
        if whole.dtype != dtype or (strict and any(value.dtype != dtype for value in values)):
            return None
        if strict and not shape_matches(whole.shape[1:], tuple(tensor.shape)):
            return None
        if index and any(value.shape[0] != count for value, count in zip(values, rows)):
            return None  # the rows come from the first output: the others must agree, piece by piece
        arrays[name] = whole
    return codec.pack_rows_inline(arrays, rows)
