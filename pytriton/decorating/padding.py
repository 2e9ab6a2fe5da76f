"""Padding and defaults: `ConstantPadder`, @fill_optionals and @pad_batch.

Step of the request flow: worker -> decorators -> the user's callable (the overview is in
`pytriton.decorators`). Inputs often do not have the shapes a model can take as they arrive:
variable-length rows, optional inputs left out, batches smaller than the sizes a compiled model
runs at. These fill or pad them, and trim the outputs back where the batch was padded.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import numpy as np
import wrapt

from pytriton.decorating.common import _as_array, _batch_size, _reject_positional, _requests_arg
from pytriton.decorating.results import map_result
from pytriton.exceptions import PyTritonBadParameterError, PyTritonInvalidOperationError, PyTritonValidationError
from pytriton.worker.context import current_context
from pytriton.worker.request import rebuilt


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
            filled.append(rebuilt(request, data))
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
