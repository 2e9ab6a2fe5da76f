"""@group_by_keys and @group_by_values: one call of the callable per group of requests or rows.

Step of the request flow: worker -> decorators -> the user's callable (the overview is in
`pytriton.decorators`). One Triton batch may mix requests that @batch cannot gather (different
input names) or that the model wants to see apart (different values of a parameter-like input);
these split the batch into groups, call the callable per group and put the answers back in order.
"""

from __future__ import annotations

import asyncio
import inspect
from typing import Any, Callable, Hashable, Mapping, Sequence

import numpy as np
import wrapt

from pytriton.decorating.common import (
    Outputs,
    PadFn,
    _as_array,
    _call_per_group,
    _outputs_as_dict,
    _requests_arg,
    _rows_equal,
)
from pytriton.exceptions import PyTritonBadParameterError, PyTritonValidationError
from pytriton.worker.request import rebuilt

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
            return wrapped([rebuilt(old, dict(data)) for old, data in zip(group, padded)])

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
