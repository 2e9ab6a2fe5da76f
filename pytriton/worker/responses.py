"""Checks what a callable returned for one request and shapes it into the declared outputs.

Pure functions: the worker calls them for every request of a batch, so that one request's bad
response becomes an error for that requester alone.
"""

from __future__ import annotations

from typing import Any, Dict, Mapping, Optional, Sequence

import numpy as np

from pytriton.exceptions import PyTritonValidationError
from pytriton.worker.context import TritonContext


def _describe(value: Any) -> str:
    if isinstance(value, np.ndarray):
        return f"array of dtype {value.dtype} and shape {value.shape}"
    return type(value).__name__


def _shape_matches(actual: Sequence[int], expected: Sequence[int]) -> bool:
    return len(actual) == len(expected) and all(e == -1 or a == e for a, e in zip(actual, expected))


def _dtype_name(dtype: np.dtype) -> str:
    return "BYTES (object or bytes array)" if dtype.kind in ("O", "S", "U") else str(dtype)


def _dtype_matches(actual: np.dtype, expected: np.dtype) -> bool:
    if expected.kind in ("O", "S", "U"):
        return actual.kind in ("O", "S", "U")
    return actual == expected


def shape_response(
    context: TritonContext,
    response: Any,
    *,
    request_index: int,
    batch_size: Optional[int],
    strict: bool,
) -> Dict[str, np.ndarray]:
    """The declared outputs of one response, as arrays ready for the wire.

    A response whose keys are none of the output names but that has exactly one entry per
    output is matched to the outputs by position (the declared input order when its keys are
    the input names): this is what makes ``lambda requests: requests`` an identity model.

    Args:
        context: the model being served (names, declared dtypes and shapes).
        response: what the callable returned for this request.
        request_index: position of the request in the batch, for error messages.
        batch_size: the request's batch size when the model batches, else None.
        strict: refuse (instead of converting) outputs of another dtype, and check shapes.

    Raises:
        PyTritonValidationError: naming the model, the output, what came and what was expected.
    """
    if not strict and isinstance(response, dict):
        # The common case, checked first because it runs for every request of every batch: a dict
        # holding every output as an array of the declared dtype passes through untouched.
        outputs = context.outputs
        found = {tensor.name: response.get(tensor.name) for tensor in outputs}
        if all(
            type(array) is np.ndarray and _dtype_matches(array.dtype, tensor.dtype)
            for array, tensor in zip(found.values(), outputs)
        ):
            return found  # type: ignore[return-value]  # every value was checked to be an array
    model = f"Model '{context.model_name}'"
    if not isinstance(response, Mapping):
        raise PyTritonValidationError(
            f"{model}: the inference callable returned {_describe(response)} for request {request_index}; "
            "expected a mapping of output name to numpy array"
        )
    names = context.output_names
    if not any(name in response for name in names) and len(response) == len(names):
        # Entries named after the inputs (an identity model) follow the declared input order, so
        # the match does not depend on the order a batch happened to list them in.
        order = [name for name in context.input_names if name in response]
        keys = order if len(order) == len(response) else list(response)
        response = {name: response[key] for name, key in zip(names, keys)}
    if strict:
        extra = sorted(set(response) - set(names))
        if extra:
            raise PyTritonValidationError(
                f"{model}: the response to request {request_index} has outputs {extra} that the model does not "
                f"declare; declared outputs: {list(names)}"
            )
    arrays: Dict[str, np.ndarray] = {}
    for tensor in context.outputs:
        if tensor.name not in response:
            raise PyTritonValidationError(
                f"{model}: output '{tensor.name}' is missing from the response to request {request_index}; "
                f"the callable returned {sorted(response)}"
            )
        value = response[tensor.name]
        try:
            array = np.asarray(value)
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
            if not _shape_matches(array.shape, expected_shape):
                raise PyTritonValidationError(
                    f"{model}: output '{tensor.name}' of request {request_index} has shape {array.shape}; "
                    f"expected {expected_shape} (-1 means any size)"
                )
        arrays[tensor.name] = array
    return arrays
