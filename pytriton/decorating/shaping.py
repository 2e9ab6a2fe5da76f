"""@batch and @sample: the list of requests -> keyword arrays for the callable, and back.

Step of the request flow: worker -> decorators -> the user's callable (the overview is in
`pytriton.decorators`). The worker hands over one mapping per request; these two give the
callable keyword arrays instead, gathered into one batch or one request at a time, and map its
outputs back to one mapping per request.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any, Callable, Mapping, Optional

import numpy as np
import wrapt

from pytriton.decorating.common import Outputs, _batch_size, _outputs_as_dict, _requests_arg
from pytriton.decorating.results import gather, is_lazy, map_result
from pytriton.exceptions import PyTritonValidationError
from pytriton.worker.outcomes import WholeBatch, WholeOutputs
from pytriton.worker.request import BatchResponses, Requests

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

    On a sequence-batched model (``ModelConfig(batcher=SequenceBatcher(...))``), a callable that
    names ``sequence_id``, ``sequence_start`` or ``sequence_end`` among its parameters gets them
    as arrays of shape (rows, 1): each row's sequence id (ints or strs, an object array) and
    whether its request starts or ends the sequence. A callable that names ``is_cancelled`` gets
    a function to call while it works: each row's ``request.is_cancelled()``, shape (rows, 1).

    When the server traces with OpenTelemetry, a callable that names ``spans`` gets a list with
    each request's span (`Request.span`; None for a request Triton did not sample), to parent its
    own spans: one entry per request (a span belongs to a request, not to a row), in the order of
    the requests' rows in the batch.

    Keyword arguments given with the list of requests (``@multiplexed`` gives the variant's
    object so) are passed on to the callable beside the inputs.

    Raises:
        PyTritonValidationError: requests with different input names or trailing shapes, outputs
            that are not arrays with the gathered batch size on axis 0, or a keyword argument named
            like an input.
    """
    whole = _whole_inputs(args, kwargs)
    if whole is not None:  # the worker's requests, each input of the batch already one array
        requests = args[0]
        sizes = list(requests.rows)
        inputs = {key: array.copy() for key, array in whole.items()}  # writeable, as concatenate makes
    else:
        requests, extra = _requests_and_extra("batch", args, kwargs)
        if not requests:
            return []
        sizes, inputs = _gather(requests)
        if extra:
            _add_extra("batch", inputs, extra)
    named = _parameter_names(wrapped)
    if getattr(requests[0], "sequence_id", None) is not None:  # a sequence model's requests
        inputs.update(_sequence_rows(named, requests, sizes))
    if "is_cancelled" in named:
        inputs["is_cancelled"] = _cancelled_rows(requests, sizes)
    if "spans" in named:  # the requests' OpenTelemetry spans (None: not traced), in the batch's order
        inputs["spans"] = [getattr(request, "span", None) for request in requests]

    def split(result: Any) -> list[Outputs]:
        outputs = batch_outputs(result, sizes)
        if len(sizes) == 1:
            return [outputs]  # one request: its response is the outputs themselves
        return BatchResponses(outputs, sizes)

    return map_result(wrapped(**inputs), split)


def _requests_and_extra(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
    """The list of requests, and the keyword arguments that came with it (to pass on)."""
    if len(args) == 1 and kwargs:
        return _requests_arg(name, args, {}), kwargs
    return _requests_arg(name, args, kwargs), {}


def _add_extra(name: str, inputs: dict[str, Any], extra: dict[str, Any]) -> None:
    clash = sorted(set(extra) & set(inputs))
    if clash:
        raise PyTritonValidationError(
            f"@{name}: the keyword argument(s) {clash} given with the requests are also input names; name the "
            "argument differently (e.g. @multiplexed(..., argument='adapter'))")
    inputs.update(extra)


def batch_outputs(result: Any, sizes: list[int]) -> Outputs:
    """What a `@batch` callable returned, as output name -> array of the whole batch's rows.

    Raises:
        PyTritonValidationError: the result is no dict or list of arrays, or an output's leading
            dim is not the batch's row count.
    """
    total = sum(sizes)
    if type(result) is dict:  # the common answer, checked in one pass: arrays of the batch's rows
        for value in result.values():
            if type(value) is not np.ndarray or value.ndim == 0 or value.shape[0] != total:
                break
        else:
            return dict(result)
    outputs = _outputs_as_dict(result, "batch")
    for key, value in outputs.items():
        if value.ndim == 0 or value.shape[0] != total:
            raise PyTritonValidationError(
                f"@batch: output {key!r} has shape {value.shape}, but its leading dim must be the batch size "
                f"{total} (the sum of the requests' batch sizes {sizes})."
            )
    return outputs


def whole_batch(infer_func: Any) -> Optional[WholeBatch]:
    """`infer_func` taken apart when it is exactly ``@batch``-decorated (a function, a method,
    or an object whose ``__call__`` is) and the function under it takes none of the
    per-request arguments @batch can add; else None. Such a callable reads only each input of
    the batch as one array, which the worker can hand it without building the requests (the
    whole-batch lane, `pytriton.worker.batches.WholeLane`)."""
    for candidate in (infer_func, getattr(infer_func, "__call__", None)):  # noqa: B004 - the method itself
        if getattr(candidate, "_self_wrapper", None) is batch.__wrapped__:  # type: ignore[attr-defined]
            wrapped = candidate.__wrapped__  # type: ignore[union-attr]
            if _parameter_names(wrapped) & {"is_cancelled", "spans", *_SEQUENCE_ARGUMENTS}:
                return None
            return WholeBatch(wrapped, whole_answer)
    return None


def whole_answer(result: Any, rows: list[int]) -> Any:
    """What ``@batch`` makes of the result of the function under it, called on the batch's whole
    inputs: `WholeOutputs`. A result that is not a direct answer (a generator or a coroutine) is
    passed on as ``@batch`` passes it, each of its values split into per-request responses.
    Raises what ``@batch``'s checks raise."""
    if type(result) is not dict and is_lazy(result):
        return map_result(result, lambda value: WholeOutputs(batch_outputs(value, rows), rows).responses())
    return WholeOutputs(batch_outputs(result, rows), rows)


@functools.lru_cache(maxsize=256)
def _signature_names(wrapped: Callable[..., Any]) -> frozenset[str]:
    return frozenset(inspect.signature(wrapped).parameters)


def _parameter_names(wrapped: Callable[..., Any]) -> frozenset[str]:
    """The names of the callable's parameters, looked up once per callable: a signature costs
    tens of microseconds, too much to pay on every batch."""
    try:
        return _signature_names(wrapped)
    except TypeError:  # an unhashable callable: looked up each time
        try:
            return frozenset(inspect.signature(wrapped).parameters)
        except (TypeError, ValueError):
            return frozenset()
    except ValueError:  # no signature to read
        return frozenset()


def _cancelled_rows(requests: list[Any], sizes: list[int]) -> Callable[[], np.ndarray]:
    """For a callable that names `is_cancelled`: a function it may call while it works, giving
    each row's ``request.is_cancelled()`` as a bool array of shape (rows, 1)."""

    def is_cancelled() -> np.ndarray:
        flags = [bool(getattr(request, "is_cancelled", lambda: False)()) for request in requests]
        return np.repeat(np.array(flags, dtype=bool), sizes).reshape(-1, 1)

    return is_cancelled


_SEQUENCE_ARGUMENTS = ("sequence_id", "sequence_start", "sequence_end")


def _sequence_rows(named: frozenset[str], requests: list[Any], sizes: list[int]) -> dict[str, np.ndarray]:
    """Each row's sequence, for the arguments among `sequence_id`, `sequence_start` and
    `sequence_end` that the callable names: arrays of shape (rows, 1), the id as the client sent
    it (an object array of ints or strs), the flags as bools. Rows of one request share them."""
    rows: dict[str, np.ndarray] = {}
    for name in (name for name in _SEQUENCE_ARGUMENTS if name in named):
        values = [getattr(request, name) for request in requests]
        dtype = object if name == "sequence_id" else bool
        column = np.empty((sum(sizes), 1), dtype=dtype)
        column[:, 0] = np.repeat(np.array(values, dtype=dtype), sizes)
        rows[name] = column
    return rows


def _whole_inputs(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The batch's inputs as whole arrays, when the worker gave them and nothing changed since."""
    if len(args) == 1 and type(args[0]) is Requests and not kwargs:
        return args[0].whole_inputs()
    return None


def _gather(requests: list[Any]) -> tuple[list[int], dict[str, np.ndarray]]:
    """Each request's batch size, and each input concatenated along axis 0."""
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
    return sizes, inputs


@wrapt.decorator
def sample(wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Call the model once per request, with that request's arrays as keyword arguments.

    For models that handle one sample at a time: the callable never sees the request list, and may
    return a dict or a list/tuple in the model's output order. Coroutine callables run
    concurrently for the requests of a batch; generators are advanced together, one step each
    per step of the batch's stream. Keyword arguments given with the list of requests are passed
    on to each call, as with ``@batch``.
    """
    requests, extra = _requests_and_extra("sample", args, kwargs)
    if extra:
        calls = []
        for request in requests:
            inputs = dict(request)
            _add_extra("sample", inputs, extra)
            calls.append(inputs)
        parts = [((index,), wrapped(**inputs)) for index, inputs in enumerate(calls)]
    else:
        parts = [((index,), wrapped(**request)) for index, request in enumerate(requests)]
    return gather(len(requests), parts, lambda _indices, result: [_outputs_as_dict(result, "sample")])


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
