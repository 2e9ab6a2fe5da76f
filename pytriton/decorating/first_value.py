"""@first_value: one value of a parameter-like input instead of one row per sample.

Step of the request flow: worker -> decorators -> the user's callable (the overview is in
`pytriton.decorators`). It takes the batch axis off the inputs it names, below @batch or on the
requests themselves, and refuses to sit above @batch or @sample, where it would act too early.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence, cast

import numpy as np
import wrapt

from pytriton.decorating.common import _requests_arg, _rows_equal
from pytriton.decorating.shaping import batch, sample
from pytriton.exceptions import PyTritonBadParameterError, PyTritonValidationError
from pytriton.worker.request import rebuilt


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
            rebuilt(request, reduce(request, f" (request {index})"))
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
