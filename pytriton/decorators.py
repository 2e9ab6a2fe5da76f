"""Decorators that reshape what an inference callable receives and returns.

Place in the request flow: worker -> decorators -> the user's callable. The worker always calls
the outermost callable with ``requests: List[Request]`` (one mapping of input name -> array per
client request) and expects one mapping of output name -> array per request back. These
decorators are pure transforms between that list-of-dicts form and friendlier forms:

* list -> list: `group_by_keys`, `fill_optionals` (they sit above `batch`);
* list -> keyword arrays: `batch` (one gathered batch), `sample` (one call per request);
* keyword arrays -> keyword arrays: `pad_batch` (below `batch`);
* either form: `group_by_values` and `first_value` (above `batch` they work on whole requests,
  below it on the rows of the batch), `triton_context` (directly on the callable, or below
  `batch`/`sample`).

Both stacks below serve one value of ``temperature`` per call; the first is the published
PyTriton's order, the second keeps requests whole (and so also works for streaming callables)::

    @fill_optionals(temperature=np.array([1.0], dtype=np.float32))
    @batch
    @group_by_values("temperature")
    @first_value("temperature")
    def infer(prompt, temperature): ...

    @fill_optionals(temperature=np.array([1.0], dtype=np.float32))
    @group_by_values("temperature")
    @batch
    @first_value("temperature")
    def infer(prompt, temperature): ...

All decorators are built on `wrapt`, so they work on functions, on methods (``__call__``
included) and stacked. A decorator placed where it receives the wrong form of data raises a
`PyTritonValidationError` that says where to move it. The helpers at the end
(`get_model_config`, `convert_output`, `get_triton_context`, ...) serve users' own decorators.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import itertools
from typing import (
    Any,
    Callable,
    Dict,
    Hashable,
    Iterator,
    List,
    Mapping,
    MutableMapping,
    Sequence,
    Tuple,
    Union,
    cast,
)

import numpy as np
import wrapt

from pytriton.exceptions import PyTritonBadParameterError, PyTritonInvalidOperationError, PyTritonValidationError
from pytriton.worker.context import TritonContext as _ServedContext
from pytriton.worker.context import current_context
from pytriton.worker.request import Request
from pytriton.worker.results import gather, map_result

__all__ = [
    "ConstantPadder",
    "InferenceRequest",
    "InferenceRequests",
    "InferenceResult",
    "InferenceResults",
    "InputNames",
    "ModelConfigDict",
    "ServedModelConfig",
    "TritonContext",
    "batch",
    "convert_output",
    "fill_optionals",
    "first_value",
    "get_inference_request_batch_size",
    "get_model_config",
    "get_triton_context",
    "group_by_keys",
    "group_by_values",
    "pad_batch",
    "sample",
    "triton_context",
]

# Names of the published PyTriton API for the data the decorators pass around, for type hints
# in users' own decorators.
InputNames = List[str]
"""Names of model inputs."""
InferenceRequest = Dict[str, np.ndarray]
"""One request: input name -> array with the batch axis first (a `Request` is one)."""
InferenceRequests = Union[List[InferenceRequest], Tuple[InferenceRequest, ...]]
"""What the worker passes to the outermost callable."""
InferenceResult = Dict[str, np.ndarray]
"""One response: output name -> array."""
InferenceResults = Union[List[InferenceResult], Tuple[InferenceResult, ...]]
"""One response per request, in request order."""

Outputs = Dict[str, np.ndarray]
PadFn = Callable[[Sequence[Mapping[str, np.ndarray]]], List[Dict[str, np.ndarray]]]


# --- shared checks ------------------------------------------------------------------------------


def _requests_arg(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Mapping[str, np.ndarray]]:
    """The list of requests a list-taking decorator was called with, or an error saying where to move it."""
    if kwargs or len(args) != 1:
        got = f"keyword arguments {sorted(kwargs)}" if kwargs else f"{len(args)} positional arguments"
        raise PyTritonValidationError(
            f"@{name} expects the list of requests as its only argument, but got {got}. "
            f"@{name} must sit above decorators that pass keyword arrays (@batch, @sample); "
            "move it higher in the decorator stack."
        )
    requests = args[0]
    # dict first: a plain isinstance check is far cheaper than the Mapping ABC, per request.
    if not isinstance(requests, (list, tuple)) or not all(isinstance(r, (dict, Mapping)) for r in requests):
        raise PyTritonValidationError(
            f"@{name} expects a list of requests (mappings of input name -> array), "
            f"got {type(requests).__name__}. Apply it to the inference callable the worker calls."
        )
    return list(requests)


def _reject_positional(name: str, args: tuple[Any, ...]) -> None:
    """Keyword-taking decorators fail if they receive the request list, i.e. sit above @batch."""
    if args:
        raise PyTritonValidationError(
            f"@{name} expects batched input arrays as keyword arguments, but got {len(args)} positional "
            f"argument(s) (the list of requests?). Place @{name} below @batch so it receives the gathered batch."
        )


def _as_array(value: Any, what: str) -> np.ndarray:
    """Arrays pass through; array-likes (lists, scalars of a batch) are converted with np.asarray."""
    if isinstance(value, np.ndarray):
        return value
    try:
        array = np.asarray(value)
    except (TypeError, ValueError) as exc:
        raise PyTritonValidationError(f"{what} must be a numpy array, got {type(value).__name__}: {exc}") from exc
    if array.dtype == object and array.ndim == 0:
        raise PyTritonValidationError(f"{what} must be a numpy array, got {type(value).__name__}")
    return array


def _outputs_as_dict(result: Any, name: str) -> Outputs:
    """Map a callable's result to output name -> array; a list/tuple follows the model's output order."""
    names: Sequence[str] = ()
    model_name = None
    if isinstance(result, (list, tuple)):
        context = current_context()
        if context is None:
            raise PyTritonValidationError(
                f"@{name} needs the model outputs to map a list of {len(result)} arrays to output names, but no "
                "TritonContext is set in this thread. Return a dict of output name -> array instead, or call the "
                "callable from the worker (tests: pytriton.worker.context.set_current_context)."
            )
        names, model_name = context.output_names, context.model_name
    return _name_outputs(result, names, model_name, f"@{name}")


def _name_outputs(result: Any, names: Sequence[str], model_name: Any, where: str) -> Outputs:
    """A dict result as arrays, or a list/tuple result paired with the output `names` in order."""
    if isinstance(result, (dict, Mapping)):
        return {key: _as_array(value, f"{where}: output {key!r}") for key, value in result.items()}
    if not isinstance(result, (list, tuple)):
        raise PyTritonValidationError(
            f"{where}: the callable returned {type(result).__name__}; expected a dict of output name -> array "
            "or a list/tuple of arrays in the model's output order."
        )
    if len(result) != len(names):
        raise PyTritonValidationError(
            f"{where}: the callable returned {len(result)} arrays but model {model_name!r} declares "
            f"{len(names)} outputs {list(names)}; return one array per output, in that order."
        )
    return {key: _as_array(value, f"{where}: output {key!r}") for key, value in zip(names, result)}


def _batch_size(request: Mapping[str, np.ndarray], index: int, name: str) -> int:
    """A request's batch size: the leading dim of its inputs, which must all agree."""
    if len(request) == 1:  # the common single-input model, checked without building dicts
        (value,) = request.values()
        shape = value.shape if isinstance(value, np.ndarray) else np.shape(value)
        if shape:
            return int(shape[0])
    sizes = {}
    for key, value in request.items():
        shape = value.shape if isinstance(value, np.ndarray) else np.shape(value)
        if not shape:
            raise PyTritonValidationError(
                f"@{name}: input {key!r} of request {index} has no batch axis (shape {shape}); "
                f"@{name} needs a leading batch axis. Use @sample for a model that does not batch."
            )
        sizes[key] = shape[0]
    if not sizes:
        raise PyTritonValidationError(f"@{name}: request {index} has no inputs, so it has no batch size.")
    if len(set(sizes.values())) > 1:
        raise PyTritonValidationError(
            f"@{name}: the inputs of request {index} have different batch sizes {sizes}; "
            "every input of a request must have the same leading dim."
        )
    return int(next(iter(sizes.values())))


def _call_per_group(
    wrapped: Callable[..., Any], requests: list[Any], group_keys: Sequence[Hashable], name: str
) -> Any:
    """Call `wrapped` once per group of requests and put the responses back in request order.

    Streaming and async callables work too: their steps (or awaited values) are merged the same way.
    """
    groups: dict[Hashable, list[int]] = {}
    for index, key in enumerate(group_keys):
        groups.setdefault(key, []).append(index)

    def check(indices: Sequence[int], group_responses: Any) -> list[Any]:
        if not isinstance(group_responses, (list, tuple)) or len(group_responses) != len(indices):
            got = len(group_responses) if isinstance(group_responses, (list, tuple)) else type(group_responses).__name__
            raise PyTritonValidationError(
                f"@{name}: the wrapped callable must return one response per request of the group "
                f"({len(indices)}), got {got}."
            )
        return list(group_responses)

    parts = [(indices, wrapped([requests[i] for i in indices])) for indices in groups.values()]
    return gather(len(requests), parts, check)


# --- list of requests -> one gathered batch ---------------------------------------------------


@wrapt.decorator
def batch(wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Gather the requests into one batch so the model runs once per Triton batch.

    Triton's dynamic batcher hands the callable several requests; batching pays off only when the
    model sees them as one array. Each input is concatenated along axis 0 and passed as a keyword
    argument; each output (a dict, or a list/tuple in the model's output order) is split back along
    axis 0 by the requests' batch sizes.

    A generator (or async generator) callable yields outputs for the whole batch at each step;
    each step is split the same way. A coroutine's result is split once awaited.

    Raises:
        PyTritonValidationError: requests with different input names or trailing shapes, or outputs
            that are not arrays with the gathered batch size on axis 0.
    """
    requests = _requests_arg("batch", args, kwargs)
    if not requests:
        return []
    names = list(requests[0])
    for index, request in enumerate(requests[1:], start=1):
        if set(request) != set(names):
            raise PyTritonValidationError(
                f"@batch got requests with different input names: request 0 has {sorted(names)}, request {index} "
                f"has {sorted(request)}. Apply @group_by_keys above @batch to batch each set of names separately, "
                "or @fill_optionals to give missing inputs a default."
            )
    sizes = [_batch_size(request, index, "batch") for index, request in enumerate(requests)]
    inputs = {}
    for key in names:
        arrays = [request[key] if isinstance(request[key], np.ndarray) else np.asarray(request[key])
                  for request in requests]
        trailing = {array.shape[1:] for array in arrays}
        if len(trailing) > 1:
            raise PyTritonValidationError(
                f"@batch cannot concatenate input {key!r}: requests have different sample shapes "
                f"{sorted(trailing)}. Group equal shapes with @group_by_values({key!r}) above @batch, or pad them "
                f"with @group_by_values(..., pad_fn=ConstantPadder(0))."
            )
        inputs[key] = np.concatenate(arrays, axis=0)

    total = sum(sizes)
    offsets = [0, *itertools.accumulate(sizes)]

    def split(result: Any) -> list[Outputs]:
        outputs = _outputs_as_dict(result, "batch")
        for key, value in outputs.items():
            if value.ndim == 0 or value.shape[0] != total:
                raise PyTritonValidationError(
                    f"@batch: output {key!r} has shape {value.shape}, but its leading dim must be the batch size "
                    f"{total} (the sum of the requests' batch sizes {sizes})."
                )
        return [{key: value[start:stop] for key, value in outputs.items()}
                for start, stop in zip(offsets, offsets[1:])]

    return map_result(wrapped(**inputs), split)


@wrapt.decorator
def sample(wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Call the model once per request, with that request's arrays as keyword arguments.

    For models that handle one sample at a time: the callable never sees the request list, and may
    return a dict or a list/tuple in the model's output order. Coroutine callables run
    concurrently for the requests of a batch; generators are advanced together, one step each
    per step of the batch's stream.
    """
    requests = _requests_arg("sample", args, kwargs)
    parts = [((index,), wrapped(**request)) for index, request in enumerate(requests)]
    return gather(len(requests), parts, lambda _indices, result: [_outputs_as_dict(result, "sample")])


# --- list of requests -> groups of requests ---------------------------------------------------


@wrapt.decorator
def group_by_keys(
    wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """Call the wrapped callable once per group of requests sharing the same input names.

    With optional inputs one Triton batch may mix requests with and without them, which @batch
    cannot concatenate; place this above @batch. Responses keep the original request order.
    """
    requests = _requests_arg("group_by_keys", args, kwargs)
    return _call_per_group(wrapped, requests, [frozenset(request) for request in requests], "group_by_keys")


def _value_key(array: np.ndarray) -> Hashable:
    """A hashable identity of one request's value: per sample when all its rows are equal."""
    array = np.asarray(array)
    if array.ndim > 0 and array.shape[0] > 0 and _rows_equal(array):
        array = array[:1]  # a request of batch 3 with one value groups with a request of batch 1
        rows = "one row"
    else:
        rows = "all rows"
    if array.dtype == object:
        content: Hashable = repr(array.tolist())
    else:
        content = np.ascontiguousarray(array).tobytes()
    return (rows, array.dtype.str, array.shape, content)


def group_by_values(*keys: str, pad_fn: PadFn | None = None) -> Callable[[Callable[..., Any]], Any]:
    """Call the wrapped callable once per group of equal values of the inputs `keys`.

    Models that take one value of a parameter-like input per call (a temperature, a mode) can
    still be served batches mixing values. It works in either place of the stack:

    * below @batch (the published PyTriton's order): it receives keyword arrays and calls the
      wrapped callable once per group of rows with equal values of `keys`, with those rows of
      every input; the groups' outputs are merged back into one batch in the original row order.
      `pad_fn` is called with the list of the groups' output dicts, to give them common trailing
      shapes before they are merged, e.g. `ConstantPadder(0)`. A streaming (generator) callable
      cannot be merged this way; use the other place for it.
    * above @batch: it receives the list of requests and calls the wrapped callable once per
      group of whole requests; a request whose rows all hold one value groups with other requests
      of that value, whatever their batch sizes, and a request whose rows differ forms its own
      group. `pad_fn` is called with each group's requests (as dicts) before the group is passed
      on, to give its inputs common trailing shapes so @batch can concatenate them. Responses
      keep the original request order; streaming and async callables work.

    Values compare by dtype, shape and bytes. Rows or requests without one of `keys` (an optional
    input) group with the others that lack it.

    Args:
        keys: names of the inputs whose values define a group.
        pad_fn: see above; it receives and returns a list of dicts of name -> array.

    Raises:
        PyTritonBadParameterError: no keys, a key that is not a string, or a `pad_fn` that is not callable.
    """
    if not keys or not all(isinstance(key, str) and key for key in keys):
        raise PyTritonBadParameterError(f"group_by_values needs one or more input names, got {keys!r}")
    if pad_fn is not None and not callable(pad_fn):
        raise PyTritonBadParameterError(f"group_by_values pad_fn must be callable, got {type(pad_fn).__name__}")

    def pad_group(wrapped: Callable[..., Any]) -> Callable[[list[Any]], Any]:
        def call(group: list[Any]) -> Any:
            if pad_fn is None:
                return wrapped(group)
            padded = pad_fn([dict(request) for request in group])
            return wrapped([Request(dict(data), getattr(old, "parameters", None)) for old, data in zip(group, padded)])

        return call

    @wrapt.decorator
    def wrapper(wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if kwargs and not args:
            return _group_rows(wrapped, kwargs, keys, pad_fn)
        requests = _requests_arg("group_by_values", args, kwargs)
        group_keys = [
            tuple((key, _value_key(request[key])) if key in request else (key, None) for key in keys)
            for request in requests
        ]
        return _call_per_group(pad_group(wrapped), requests, group_keys, "group_by_values")

    return wrapper


# --- group_by_values below @batch: rows of one batch -> groups of rows -> one batch -----------


def _row_keys(value: Any, key: str) -> list[Hashable]:
    """One hashable identity per row of an input (its bytes; one array has one dtype and row shape)."""
    array = value if isinstance(value, np.ndarray) else np.asarray(value)
    if array.ndim == 0:
        raise PyTritonValidationError(
            f"@group_by_values: input {key!r} has no batch axis (shape ()); below @batch it groups the rows of "
            "the batch, so it needs inputs with a leading batch axis."
        )
    if array.dtype == object:
        return [repr(row.tolist()) if isinstance(row, np.ndarray) else repr(row) for row in array]
    rows = np.ascontiguousarray(array).reshape(array.shape[0], -1)
    return [row.tobytes() for row in rows]


def _group_rows(wrapped: Callable[..., Any], kwargs: dict[str, Any], keys: Sequence[str], pad_fn: PadFn | None) -> Any:
    """Call `wrapped` once per group of rows with equal values of `keys`; merge the outputs in row order.

    Keyword arguments that are arrays with one row per sample of the batch are split by rows;
    any other keyword (a scalar from @first_value, ``triton_context``) is passed to every call.
    """
    present = [key for key in keys if key in kwargs]
    if not present:
        return wrapped(**kwargs)
    if pad_fn is None and all(_uniform_rows(kwargs[key]) for key in present):
        return wrapped(**kwargs)  # the common case, one value per batch: checked without per-row keys
    columns = [_row_keys(kwargs[key], key) for key in present]
    size = len(columns[0])
    for key, column in zip(present[1:], columns[1:]):
        if len(column) != size:
            raise PyTritonValidationError(
                f"@group_by_values: input {key!r} has {len(column)} rows but {present[0]!r} has {size}; "
                "the grouped inputs must have one row per sample of the batch."
            )
    groups: dict[Hashable, list[int]] = {}
    for row, group_key in enumerate(zip(*columns)):
        groups.setdefault(group_key, []).append(row)

    by_rows = [key for key, value in kwargs.items()
               if isinstance(value, np.ndarray) and value.ndim > 0 and value.shape[0] == size]
    parts = []
    for rows in groups.values():
        index = np.asarray(rows)
        parts.append((index, wrapped(**{**kwargs, **{key: kwargs[key][index] for key in by_rows}})))

    results = [result for _, result in parts]
    if any(inspect.isgenerator(result) or inspect.isasyncgen(result) for result in results):
        for result in results:
            if inspect.isgenerator(result) or inspect.iscoroutine(result):
                result.close()
        raise PyTritonValidationError(
            "@group_by_values below @batch cannot merge the responses of a streaming (generator) callable into "
            "one batch; place @group_by_values above @batch, where it groups whole requests and streams work."
        )
    if any(inspect.iscoroutine(result) for result in results):
        return _merge_awaited_rows(size, parts, pad_fn)
    return _merge_rows(size, parts, pad_fn)


def _uniform_rows(value: Any) -> bool:
    array = value if isinstance(value, np.ndarray) else np.asarray(value)
    return array.ndim > 0 and _rows_equal(array)


async def _merge_awaited_rows(size: int, parts: list[tuple[np.ndarray, Any]], pad_fn: PadFn | None) -> Outputs:
    async def value(result: Any) -> Any:
        return await result if inspect.iscoroutine(result) else result

    values = await asyncio.gather(*(value(result) for _, result in parts))
    return _merge_rows(size, [(rows, result) for (rows, _), result in zip(parts, values)], pad_fn)


def _merge_rows(size: int, parts: Sequence[tuple[np.ndarray, Any]], pad_fn: PadFn | None) -> Outputs:
    """One output dict for the whole batch from each group's outputs, every row back in its place."""
    outputs: list[Any] = [_outputs_as_dict(result, "group_by_values") for _, result in parts]
    if pad_fn is not None:
        outputs = list(pad_fn(outputs))
        if len(outputs) != len(parts) or not all(isinstance(output, Mapping) for output in outputs):
            raise PyTritonValidationError(
                f"@group_by_values: pad_fn must return one dict per group ({len(parts)}), got {outputs!r:.200}."
            )
    names = list(outputs[0])
    for output in outputs[1:]:
        if set(output) != set(names):
            raise PyTritonValidationError(
                f"@group_by_values: the groups returned different outputs, {sorted(names)} and {sorted(output)}; "
                "each call must return the same output names."
            )
    merged = {}
    for name in names:
        arrays = [_as_array(output[name], f"@group_by_values: output {name!r}") for output in outputs]
        for (rows, _), array in zip(parts, arrays):
            if array.ndim == 0 or array.shape[0] != len(rows):
                raise PyTritonValidationError(
                    f"@group_by_values: output {name!r} has shape {array.shape} for a group of {len(rows)} rows; "
                    "its leading dim must be the group's number of rows."
                )
        trailing = {array.shape[1:] for array in arrays}
        if len(trailing) > 1:
            raise PyTritonValidationError(
                f"@group_by_values: output {name!r} has different sample shapes {sorted(trailing)} in different "
                "groups, so they cannot be merged into one batch; pad them with "
                "@group_by_values(..., pad_fn=ConstantPadder(0))."
            )
        merged_array = np.empty((size, *trailing.pop()), dtype=_common_dtype(name, [a.dtype for a in arrays]))
        for (rows, _), array in zip(parts, arrays):
            merged_array[rows] = array
        merged[name] = merged_array
    return merged


def _common_dtype(name: str, dtypes: Sequence[np.dtype]) -> np.dtype:
    """The dtype holding every group's values: promoted within text or within numbers, never across."""
    first = dtypes[0]
    if all(dtype == first for dtype in dtypes):
        return first
    text = {dtype.kind in "SUO" for dtype in dtypes}
    if len(text) > 1:
        raise PyTritonValidationError(
            f"@group_by_values: output {name!r} has text and numeric dtypes {sorted({str(d) for d in dtypes})} "
            "in different groups; return one kind of dtype."
        )
    return np.result_type(*dtypes)


class ConstantPadder:
    """Pad each input's arrays across requests to the largest trailing shape, with a constant.

    Variable-length inputs (token ids, strings) cannot be concatenated by @batch until they share
    a shape; pass an instance as `group_by_values(..., pad_fn=ConstantPadder(0))`. Below @batch,
    `group_by_values` pads the groups' outputs with it instead, before merging them into one batch.
    Arrays are padded at the end of each trailing axis; the batch axis is never changed.

    Args:
        pad_value: the fill value of numeric arrays. Bytes, string and object arrays are padded
            with an empty value (``b""``, or ``""`` for numpy str arrays) unless `pad_value`
            itself is bytes or str, so one padder serves a model's numeric and text tensors alike.
    """

    def __init__(self, pad_value: Any = 0) -> None:
        self.pad_value = pad_value

    def __repr__(self) -> str:
        return f"ConstantPadder(pad_value={self.pad_value!r})"

    def __call__(self, requests: Sequence[Mapping[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
        """Return new dicts with each key's arrays padded to the max trailing shape over `requests`."""
        padded = [dict(request) for request in requests]
        for key in {key for request in requests for key in request}:
            arrays = [np.asarray(request[key]) for request in requests if key in request]
            if len({array.ndim for array in arrays}) > 1:
                raise PyTritonValidationError(
                    f"ConstantPadder cannot pad input {key!r}: its arrays have different numbers of dimensions "
                    f"{sorted({array.shape for array in arrays})}."
                )
            target = tuple(max(dims) for dims in zip(*(array.shape[1:] for array in arrays)))
            for entry in padded:
                if key in entry:
                    entry[key] = self._pad(key, np.asarray(entry[key]), target)
        return padded

    def _pad(self, key: str, array: np.ndarray, target: tuple[int, ...]) -> np.ndarray:
        if array.shape[1:] == target:
            return array
        text_like = array.dtype.kind in "SUO"
        value = self.pad_value
        if text_like and not isinstance(value, (bytes, str)):
            value = "" if array.dtype.kind == "U" else b""
        elif not text_like and isinstance(value, (bytes, str)):
            raise PyTritonBadParameterError(
                f"ConstantPadder(pad_value={value!r}) cannot pad {key!r} of dtype {array.dtype}; "
                "use a numeric pad value for numeric arrays, e.g. ConstantPadder(0)."
            )
        result = np.full(array.shape[:1] + target, value, dtype=array.dtype)
        result[tuple(slice(0, dim) for dim in array.shape)] = array
        return result


# --- list of requests -> list of requests -----------------------------------------------------


def fill_optionals(**defaults: np.ndarray) -> Callable[[Callable[..., Any]], Any]:
    """Give requests that lack an optional input its default, repeated to the request's batch size.

    Place it above @batch so every request carries the same input names. The default is one
    sample (no batch axis); for a model that does not batch (its config has ``batching=False``)
    the default is added as given.

    Args:
        defaults: input name -> default value of one sample, as a numpy array.

    Raises:
        PyTritonBadParameterError: a default that is not a numpy array.
    """
    for key, value in defaults.items():
        if not isinstance(value, np.ndarray):
            raise PyTritonBadParameterError(
                f"fill_optionals default for {key!r} must be a numpy array, got {type(value).__name__}; "
                f"pass e.g. {key}=np.array({value!r})."
            )

    @wrapt.decorator
    def wrapper(wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        requests = _requests_arg("fill_optionals", args, kwargs)
        context = current_context()
        batching = context is None or getattr(context.config, "batching", True) is not False
        filled = []
        for index, request in enumerate(requests):
            missing = [key for key in defaults if key not in request]
            if not missing:
                filled.append(request)
                continue
            data = dict(request)
            size = _batch_size(request, index, "fill_optionals") if (batching and request) else 1
            for key in missing:
                data[key] = np.repeat(defaults[key][np.newaxis, ...], size, axis=0) if batching else defaults[key]
            filled.append(Request(data, getattr(request, "parameters", None)))
        return wrapped(filled)

    return wrapper


# --- keyword arrays -> keyword arrays ---------------------------------------------------------


def _pad_target(size: int) -> int:
    """The batch size to pad to: the smallest preferred size >= `size`, else the max batch size."""
    context = current_context()
    if context is None:
        raise PyTritonInvalidOperationError(
            "@pad_batch needs the model config to know the batch sizes to pad to, but no TritonContext is set in "
            "this thread; it works inside the worker (tests: pytriton.worker.context.set_current_context)."
        )
    batcher = getattr(context.config, "batcher", None)
    preferred = sorted(getattr(batcher, "preferred_batch_size", None) or [])
    fitting = [candidate for candidate in preferred if candidate >= size]
    if fitting:
        return int(fitting[0])
    return max(size, int(getattr(context.config, "max_batch_size", 0) or 0))


@wrapt.decorator
def pad_batch(wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Pad the gathered batch to a size the model is built for, then trim the outputs back.

    Compiled models (TensorRT, CUDA graphs) often run only at fixed batch sizes. Place it below
    @batch: each input grows to the smallest ``config.batcher.preferred_batch_size`` that fits, or
    else to ``config.max_batch_size``, by repeating its last row; every output is cut back to the
    original batch size, keeping the result's form (dict or list) for @batch to map.
    """
    _reject_positional("pad_batch", args)
    if not kwargs:
        return wrapped(**kwargs)
    sizes = {key: int(np.shape(value)[0]) if np.ndim(value) else None for key, value in kwargs.items()}
    size = next(iter(sizes.values()))
    if size is None or len(set(sizes.values())) > 1:
        raise PyTritonValidationError(
            f"@pad_batch needs inputs with one common batch size on axis 0, got {sizes}; place it below @batch "
            "and above @first_value."
        )
    target = _pad_target(size)
    padded = {
        key: np.concatenate([value, np.repeat(value[-1:], target - size, axis=0)]) if target > size else value
        for key, value in kwargs.items()
    }

    def trim(value: Any, what: str) -> np.ndarray:
        array = _as_array(value, f"@pad_batch: output {what}")
        if array.ndim == 0 or array.shape[0] != target:
            raise PyTritonValidationError(
                f"@pad_batch: output {what} has shape {array.shape}, but its leading dim must be the padded "
                f"batch size {target}."
            )
        return array[:size]

    def trim_all(result: Any) -> Any:
        if isinstance(result, Mapping):
            return {key: trim(value, repr(key)) for key, value in result.items()}
        if isinstance(result, (list, tuple)):
            return type(result)(trim(value, f"#{index}") for index, value in enumerate(result))
        raise PyTritonValidationError(
            f"@pad_batch: the callable returned {type(result).__name__}; expected a dict of output name -> array "
            "or a list/tuple of arrays."
        )

    return map_result(wrapped(**padded), trim_all)


def _rows_equal(array: np.ndarray) -> bool:
    """Whether every row along axis 0 equals the first, bit for bit (so NaN equals NaN)."""
    if array.shape[0] <= 1:
        return True
    if array.dtype == object:
        first = array[0].tolist() if array.ndim > 1 else array[0]
        return all((row.tolist() if array.ndim > 1 else row) == first for row in array[1:])
    rows = np.ascontiguousarray(array).reshape(array.shape[0], -1).view(np.uint8)
    return bool((rows == rows[:1]).all())


def first_value(
    *keys: str, squeeze_single_values: bool = True, strict: bool = True
) -> Callable[[Callable[..., Any]], Any]:
    """Replace the batched arrays of `keys` with their first row.

    Parameter-like inputs (a temperature, a mode) arrive batched like any input, one row per
    sample; the model wants one value. It works in two places:

    * below @batch (or below @group_by_values below @batch): the keyword arrays of `keys` become
      their first row;
    * directly on a callable that takes the list of requests: each request's arrays of `keys`
      become that request's first row (the requests stay separate, so each keeps its own value).

    Keys absent from a call or a request (optional inputs) are left alone.

    Args:
        keys: names of the inputs to reduce.
        squeeze_single_values: turn a one-element row into a numpy scalar.
        strict: check that all rows are equal (within the batch, or within each request), so
            rows mixing values are an error rather than silently served with the first one.

    Raises:
        PyTritonBadParameterError: no keys or a key that is not a string.
    """
    if not keys or not all(isinstance(key, str) and key for key in keys):
        raise PyTritonBadParameterError(f"first_value needs one or more input names, got {keys!r}")

    def reduce(inputs: Mapping[str, Any], where: str) -> dict[str, Any]:
        reduced = dict(inputs)
        for key in keys:
            if key not in reduced:
                continue
            array = np.asarray(reduced[key])
            if array.ndim == 0 or array.shape[0] == 0:
                raise PyTritonValidationError(
                    f"@first_value: input {key!r}{where} has shape {array.shape}, no first row; it needs inputs with "
                    "a batch axis (place it below @batch, or on the requests of a model that batches)."
                )
            if strict and not _rows_equal(array):
                raise PyTritonValidationError(
                    f"@first_value: the rows of input {key!r}{where} differ, so no single value stands for them. "
                    f"Split the rows by value with @group_by_values({key!r}) placed between @batch and "
                    "@first_value, or pass strict=False to use the first row."
                )
            value = array[0]
            reduced[key] = value.reshape(-1)[0] if squeeze_single_values and value.size == 1 else value
        return reduced

    @wrapt.decorator
    def wrapper(wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if not args:
            return wrapped(**reduce(kwargs, ""))
        if _stacked_over(wrapped, _KEYWORD_DECORATORS):
            raise PyTritonValidationError(
                "@first_value sits above @batch or @sample, where it would take the batch axis off the requests "
                "before they are gathered. Place @first_value below @batch so it receives the gathered batch."
            )
        requests = _requests_arg("first_value", args, kwargs)
        return wrapped([
            Request(reduce(request, f" (request {index})"), getattr(request, "parameters", None))
            for index, request in enumerate(requests)
        ])

    return wrapper


def _stacked_over(wrapped: Any, decorators: Sequence[Callable[..., Any]]) -> bool:
    """Whether one of the `wrapt` decorators `decorators` wraps a layer of `wrapped`, at any depth."""
    layer = wrapped
    for _ in range(256):  # a bound on hand-made __wrapped__ cycles
        if layer is None:
            return False
        if any(getattr(layer, "_self_wrapper", None) is decorator for decorator in decorators):
            return True
        layer = getattr(layer, "__wrapped__", None)
    return False


_KEYWORD_DECORATORS = (cast(Any, batch).__wrapped__, cast(Any, sample).__wrapped__)
"""The functions inside @batch and @sample: below them the callable receives keyword arrays."""


# --- what a callable may know about its model -------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ServedModelConfig:
    """The configuration of the served model as a callable sees it: its name, tensors and settings.

    `ModelConfig` holds only the settings a user declares; code written for the published PyTriton
    reads the model's inputs and outputs from the same object, so this view puts them together.
    It is what ``triton_context.model_configs[infer_func]`` and ``get_model_config(wrapped,
    instance)`` return.

    Attributes:
        model_name: the name the model was bound with.
        model_version: its version.
        inputs: the input `Tensor`s (each with ``name``, ``dtype``, ``shape``, ``optional``), in order.
        outputs: the output `Tensor`s, in order.
        config: the `ModelConfig` the model was bound with; its settings read through this view too.
    """

    model_name: str
    model_version: int
    inputs: Tuple[Any, ...]
    outputs: Tuple[Any, ...]
    config: Any

    @classmethod
    def of(cls, context: _ServedContext) -> ServedModelConfig:
        return cls(context.model_name, context.model_version, context.inputs, context.outputs, context.config)

    @property
    def max_batch_size(self) -> int:
        return int(self.config.max_batch_size)

    @property
    def batching(self) -> bool:
        return bool(self.config.batching)

    @property
    def batcher(self) -> Any:
        return self.config.batcher

    @property
    def decoupled(self) -> bool:
        return bool(self.config.decoupled)

    @property
    def response_cache(self) -> bool:
        return bool(self.config.response_cache)

    @property
    def backend(self) -> str:
        return "python"


class ModelConfigDict(MutableMapping[Any, Any]):
    """Model configs keyed by inference callable, so a decorator can find its model's config.

    A decorated callable has several layers (each decorator wraps the one below), and a method is a
    new bound object at each access. A key stands for the callable underneath all that: every
    `wrapt`/`functools.wraps` layer of a function finds the function's entry, a bound method finds
    the entry of that method of that object, and an object's ``__call__`` finds the object's entry.
    """

    def __init__(self) -> None:
        self._entries: Dict[Hashable, Tuple[Any, Any]] = {}  # identity -> (key as given, config)

    def __getitem__(self, infer_callable: Any) -> Any:
        entry = self._entries.get(_callable_identity(infer_callable))
        if entry is None:
            known = [key for key, _ in self._entries.values()]
            raise KeyError(f"no model config for {infer_callable!r}; this mapping holds the configs of {known!r}")
        return entry[1]

    def __setitem__(self, infer_callable: Any, config: Any) -> None:
        self._entries[_callable_identity(infer_callable)] = (infer_callable, config)

    def __delitem__(self, infer_callable: Any) -> None:
        del self._entries[_callable_identity(infer_callable)]

    def __iter__(self) -> Iterator[Any]:
        return iter([key for key, _ in self._entries.values()])

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"ModelConfigDict({list(self._entries.values())!r})"


def _callable_identity(obj: Any, depth: int = 0) -> Hashable:
    """What a `ModelConfigDict` key stands for (see there). Entries hold their keys, so ids stay valid."""
    if inspect.ismethod(obj):  # also true of wrapt's bound wrappers
        owner = obj.__self__
        if getattr(obj, "__name__", None) == "__call__":
            return ("object", id(owner))
        return ("method", id(owner), _callable_identity(obj.__func__, depth + 1))
    inner = getattr(obj, "__wrapped__", None)
    if inner is not None and inner is not obj and depth < 256:
        return _callable_identity(inner, depth + 1)
    return ("object", id(obj))


@dataclasses.dataclass(frozen=True)
class TritonContext(_ServedContext):
    """What @triton_context passes to the callable: the served model, and its configs by callable.

    It is the worker's `pytriton.worker.context.TritonContext` (``model_name``, ``model_version``,
    ``inputs``, ``outputs``, ``config``, ``input_names``, ``output_names``) plus the published
    PyTriton's ``model_configs``: ``triton_context.model_configs[infer_func]`` is this model's
    `ServedModelConfig`, for ``infer_func`` any decorated layer of the callable that got the
    context (or, in a method, the object itself).
    """

    model_configs: ModelConfigDict = dataclasses.field(default_factory=ModelConfigDict, compare=False, repr=False)

    @property
    def model_config(self) -> ServedModelConfig:
        """This model's `ServedModelConfig`, whatever callable serves it."""
        return ServedModelConfig.of(self)


_SERVED_FIELDS = tuple(field.name for field in dataclasses.fields(_ServedContext))


def _required_context(what: str) -> _ServedContext:
    context = current_context()
    if context is None:
        raise PyTritonInvalidOperationError(
            f"{what} needs the model served by this thread, but no TritonContext is set; call it inside the "
            "inference callable (tests: pytriton.worker.context.set_current_context)."
        )
    return context


def get_triton_context(wrapped: Any, instance: Any = None) -> Any:
    """The `TritonContext` of the model a decorator's `wrapped` callable serves.

    For users' own `wrapt` decorators, with the ``wrapped`` and ``instance`` that wrapt passes them;
    @triton_context is built on it. Its ``model_configs`` maps `wrapped` (any of its layers) and
    `instance` to the model's config. A context stored on the callable (or on `instance`) as
    ``__triton_context__``, as tests written for the published PyTriton do, is returned as is.

    Raises:
        PyTritonInvalidOperationError: called outside an inference callable.
    """
    holder = instance if instance is not None else wrapped
    stored = getattr(holder, "__triton_context__", None) if holder is not None else None
    if stored is not None:
        return stored
    served = _required_context("get_triton_context()")
    config = ServedModelConfig.of(served)
    configs = ModelConfigDict()
    for key in (wrapped, instance):
        if key is not None:
            configs[key] = config
    return TritonContext(**{name: getattr(served, name) for name in _SERVED_FIELDS}, model_configs=configs)


def get_model_config(wrapped: Any = None, instance: Any = None) -> Any:
    """The configuration of the model whose callable runs in this thread.

    Two forms:

    * ``get_model_config()``: the `ModelConfig` the model was bound with;
    * ``get_model_config(wrapped, instance)`` (the published PyTriton's form, for users' own
      `wrapt` decorators): the model's `ServedModelConfig`, which adds its name and tensors.

    Raises:
        PyTritonInvalidOperationError: called outside an inference callable.
    """
    if wrapped is None and instance is None:
        return _required_context("get_model_config()").config
    return get_triton_context(wrapped, instance).model_configs[wrapped if wrapped is not None else instance]


def convert_output(
    outputs: Any, wrapped: Any = None, instance: Any = None, model_config: Any = None
) -> Outputs:
    """Map a callable's result to output name -> array of each output's declared dtype.

    Users' own decorators may let the callable return a list in the model's output order, as
    @batch and @sample do; this names it and casts each array to the dtype the model declares.

    Args:
        outputs: a dict of output name -> array-like, or a list/tuple of array-likes in the
            model's output order.
        wrapped: with `instance`, the callable a `wrapt` decorator wraps, to find the model by
            (see `get_model_config`); by default the model served by this thread.
        instance: see `wrapped`.
        model_config: a config with ``outputs`` (a `ServedModelConfig`, e.g. from
            ``triton_context.model_configs[...]``) to take the output names and dtypes from
            instead; then no served model is needed.

    Raises:
        PyTritonInvalidOperationError: no `model_config` given and none is served by this thread.
        PyTritonBadParameterError: a `model_config` without ``outputs``.
        PyTritonValidationError: `outputs` is neither form, or a list has the wrong length.
    """
    if model_config is None and (wrapped is not None or instance is not None):
        model_config = get_model_config(wrapped, instance)
    tensors: Sequence[Any]
    model_name: Any
    if model_config is None:
        context = _required_context("convert_output()")
        tensors, model_name = context.outputs, context.model_name
    else:
        declared = getattr(model_config, "outputs", None)
        if declared is None:
            raise PyTritonBadParameterError(
                f"convert_output model_config={model_config!r:.200} has no outputs; pass the config of "
                "get_model_config(wrapped, instance) or triton_context.model_configs[infer_func]."
            )
        tensors, model_name = declared, getattr(model_config, "model_name", None)
    named = _name_outputs(outputs, [tensor.name for tensor in tensors], model_name, "convert_output")
    dtypes = {tensor.name: np.dtype(tensor.dtype) for tensor in tensors}
    converted = {}
    for key, value in named.items():
        dtype = dtypes.get(key)
        if dtype is None or value.dtype == dtype:
            converted[key] = value  # an undeclared output is left for the worker to report
        elif dtype.kind in "SO" and value.dtype.kind == "U":
            converted[key] = np.char.encode(value, "utf-8")  # Triton BYTES carry encoded text
        elif dtype.kind in "SO" and value.dtype.kind in "SO":
            converted[key] = value
        else:
            converted[key] = value.astype(dtype)
    return converted


def get_inference_request_batch_size(inference_request: Mapping[str, Any]) -> int:
    """The batch size of one request: the leading dim of its first input.

    Raises:
        PyTritonValidationError: the request has no inputs, or its first input no batch axis.
    """
    if not inference_request:
        raise PyTritonValidationError("get_inference_request_batch_size: the request has no inputs")
    key, value = next(iter(inference_request.items()))
    shape = np.shape(value)
    if not shape:
        raise PyTritonValidationError(
            f"get_inference_request_batch_size: input {key!r} has no batch axis (shape {shape}); "
            "a model with batching=False has no batch size."
        )
    return int(shape[0])


# --- either form ------------------------------------------------------------------------------


@wrapt.decorator
def triton_context(wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Pass the served model's `TritonContext` as the ``triton_context`` keyword argument.

    A callable may need the model's config or output names (e.g. to build its outputs) without
    reaching for module globals. Apply it to the function that takes the requests, or below
    @batch/@sample; above them the extra keyword would reach a decorator that takes only requests.
    ``triton_context.model_configs[infer_func]`` gives the model's `ServedModelConfig` as in the
    published PyTriton.

    Raises:
        PyTritonInvalidOperationError: no context is set in this thread (outside the worker).
    """
    if current_context() is None and getattr(
        instance if instance is not None else wrapped, "__triton_context__", None
    ) is None:
        raise PyTritonInvalidOperationError(
            "@triton_context found no TritonContext in this thread; it is set by the worker before the callable "
            "runs (tests: pytriton.worker.context.set_current_context)."
        )
    return wrapped(*args, **{**kwargs, "triton_context": get_triton_context(wrapped, instance)})
