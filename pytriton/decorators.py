"""Decorators that reshape what an inference callable receives and returns.

Place in the request flow: worker -> decorators -> the user's callable. The worker always calls
the outermost callable with ``requests: List[Request]`` (one mapping of input name -> array per
client request) and expects one mapping of output name -> array per request back. These
decorators are pure transforms between that list-of-dicts form and friendlier forms:

* list -> list: `group_by_keys`, `group_by_values`, `fill_optionals` (they sit above `batch`);
* list -> keyword arrays: `batch` (one gathered batch), `sample` (one call per request);
* keyword arrays -> keyword arrays: `pad_batch`, `first_value` (they sit below `batch`);
* either form: `triton_context` (directly on the callable, or below `batch`/`sample`).

A typical stack reads top to bottom in the order the data flows::

    @fill_optionals(temperature=np.array([1.0], dtype=np.float32))
    @group_by_values("temperature")
    @batch
    @first_value("temperature")
    def infer(prompt, temperature): ...

All decorators are built on `wrapt`, so they work on functions, on methods (``__call__``
included) and stacked. A decorator placed where it receives the wrong form of data raises a
`PyTritonValidationError` that says where to move it.
"""

from __future__ import annotations

import itertools
from typing import Any, Callable, Dict, Hashable, List, Mapping, Sequence

import numpy as np
import wrapt

from pytriton.exceptions import PyTritonBadParameterError, PyTritonInvalidOperationError, PyTritonValidationError
from pytriton.worker.context import current_context
from pytriton.worker.request import Request
from pytriton.worker.results import gather, map_result

__all__ = [
    "ConstantPadder",
    "batch",
    "convert_output",
    "fill_optionals",
    "first_value",
    "get_model_config",
    "group_by_keys",
    "group_by_values",
    "pad_batch",
    "sample",
    "triton_context",
]

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
    if isinstance(result, (dict, Mapping)):
        return {key: _as_array(value, f"@{name}: output {key!r}") for key, value in result.items()}
    if isinstance(result, (list, tuple)):
        context = current_context()
        if context is None:
            raise PyTritonValidationError(
                f"@{name} needs the model outputs to map a list of {len(result)} arrays to output names, but no "
                "TritonContext is set in this thread. Return a dict of output name -> array instead, or call the "
                "callable from the worker (tests: pytriton.worker.context.set_current_context)."
            )
        names = context.output_names
        if len(result) != len(names):
            raise PyTritonValidationError(
                f"@{name}: the callable returned {len(result)} arrays but model {context.model_name!r} declares "
                f"{len(names)} outputs {list(names)}; return one array per output, in that order."
            )
        return {key: _as_array(value, f"@{name}: output {key!r}") for key, value in zip(names, result)}
    raise PyTritonValidationError(
        f"@{name}: the callable returned {type(result).__name__}; expected a dict of output name -> array "
        "or a list/tuple of arrays in the model's output order."
    )


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
    """Call the wrapped callable once per group of requests with equal values of `keys`.

    Use it above @batch when the model needs one value of a parameter-like input per batch
    (e.g. a temperature) or when inputs must share a shape to be concatenated. Values compare by
    dtype, shape and bytes; a request whose rows all hold the same value groups with other requests
    holding that value, whatever their batch sizes. A request without one of `keys` groups with the
    others that lack it. Responses keep the original request order.

    Args:
        keys: names of the inputs whose values define a group.
        pad_fn: called with each group's requests (as dicts) before the group is passed on, to give
            the group's arrays common trailing shapes, e.g. `ConstantPadder(0)`.

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
        requests = _requests_arg("group_by_values", args, kwargs)
        group_keys = [
            tuple((key, _value_key(request[key])) if key in request else (key, None) for key in keys)
            for request in requests
        ]
        return _call_per_group(pad_group(wrapped), requests, group_keys, "group_by_values")

    return wrapper


class ConstantPadder:
    """Pad each input's arrays across requests to the largest trailing shape, with a constant.

    Variable-length inputs (token ids, strings) cannot be concatenated by @batch until they share
    a shape; pass an instance as `group_by_values(..., pad_fn=ConstantPadder(0))`. Arrays are padded
    at the end of each trailing axis; the batch axis is never changed.

    Args:
        pad_value: the fill value; use bytes or str (e.g. ``b""``) for bytes, string or object inputs.
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
        if text_like != isinstance(self.pad_value, (bytes, str)):
            hint = 'ConstantPadder(b"")' if text_like else "ConstantPadder(0)"
            raise PyTritonBadParameterError(
                f"ConstantPadder(pad_value={self.pad_value!r}) cannot pad input {key!r} of dtype {array.dtype}; "
                f"use a pad value of the input's kind, e.g. {hint}."
            )
        result = np.full(array.shape[:1] + target, self.pad_value, dtype=array.dtype)
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
    sample; the model wants one value. Place it below @batch; keys absent from a call (optional
    inputs) are left alone.

    Args:
        keys: names of the inputs to reduce.
        squeeze_single_values: turn a one-element row into a numpy scalar.
        strict: check that all rows are equal, so a batch mixing values is an error rather than
            silently served with the first one.

    Raises:
        PyTritonBadParameterError: no keys or a key that is not a string.
    """
    if not keys or not all(isinstance(key, str) and key for key in keys):
        raise PyTritonBadParameterError(f"first_value needs one or more input names, got {keys!r}")

    @wrapt.decorator
    def wrapper(wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        _reject_positional("first_value", args)
        kwargs = dict(kwargs)
        for key in keys:
            if key not in kwargs:
                continue
            array = np.asarray(kwargs[key])
            if array.ndim == 0 or array.shape[0] == 0:
                raise PyTritonValidationError(
                    f"@first_value: input {key!r} has shape {array.shape}, no first row; place it below @batch."
                )
            if strict and not _rows_equal(array):
                raise PyTritonValidationError(
                    f"@first_value: the rows of input {key!r} differ within the batch, so no single value stands "
                    f"for them. Group requests with @group_by_values({key!r}) above @batch, or pass strict=False "
                    "to use the first row."
                )
            value = array[0]
            kwargs[key] = value.reshape(-1)[0] if squeeze_single_values and value.size == 1 else value
        return wrapped(**kwargs)

    return wrapper


# --- helpers for callables -------------------------------------------------------------------


def _required_context(what: str) -> Any:
    context = current_context()
    if context is None:
        raise PyTritonInvalidOperationError(
            f"{what} needs the model served by this thread, but no TritonContext is set; call it inside the "
            "inference callable (tests: pytriton.worker.context.set_current_context)."
        )
    return context


def get_model_config() -> Any:
    """The `ModelConfig` of the model whose callable runs in this thread.

    Raises:
        PyTritonInvalidOperationError: called outside an inference callable.
    """
    return _required_context("get_model_config()").config


def convert_output(result: Any) -> Outputs:
    """Map a callable's result to output name -> array of each output's declared dtype.

    Args:
        result: a dict of output name -> array-like, or a list/tuple of array-likes in the
            model's output order.

    Raises:
        PyTritonInvalidOperationError: called outside an inference callable.
        PyTritonValidationError: the result is neither form, or a list has the wrong length.
    """
    context = _required_context("convert_output()")
    outputs = _outputs_as_dict(result, "convert_output")
    dtypes = {tensor.name: np.dtype(tensor.dtype) for tensor in context.outputs}
    converted = {}
    for key, value in outputs.items():
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


# --- either form ------------------------------------------------------------------------------


@wrapt.decorator
def triton_context(wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Pass the served model's `TritonContext` as the ``triton_context`` keyword argument.

    A callable may need the model's config or output names (e.g. to build its outputs) without
    reaching for module globals. Apply it to the function that takes the requests, or below
    @batch/@sample; above them the extra keyword would reach a decorator that takes only requests.

    Raises:
        PyTritonInvalidOperationError: no context is set in this thread (outside the worker).
    """
    context = current_context()
    if context is None:
        raise PyTritonInvalidOperationError(
            "@triton_context found no TritonContext in this thread; it is set by the worker before the callable "
            "runs (tests: pytriton.worker.context.set_current_context)."
        )
    return wrapped(*args, **{**kwargs, "triton_context": context})
