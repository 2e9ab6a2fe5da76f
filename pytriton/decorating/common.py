"""The forms of data the decorators pass around, and the checks they all share.

Step of the request flow: worker -> decorators -> the user's callable (the overview is in
`pytriton.decorators`). A decorator receives either the list of requests or keyword arrays;
these helpers tell which form arrived, read a request's batch size, name a callable's outputs
and call a callable once per group of requests, so every decorator words its errors alike.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Hashable, List, Mapping, Sequence, Tuple, Union

import numpy as np

from pytriton.decorating.results import gather
from pytriton.exceptions import PyTritonValidationError
from pytriton.worker.context import current_context
from pytriton.worker.responses import host_array

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
    """Arrays pass through; torch tensors come to the host once (whole batch); other array-likes
    (lists, scalars of a batch) are converted with np.asarray."""
    if isinstance(value, np.ndarray):
        return value
    try:
        array = host_array(value, what)
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
        if all(type(value) is np.ndarray for value in result.values()):  # the common answer: nothing to convert
            return dict(result)
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


def _rows_equal(array: np.ndarray) -> bool:
    """Whether every row along axis 0 equals the first, bit for bit (so NaN equals NaN)."""
    if array.shape[0] <= 1:
        return True
    if array.dtype == object:
        first = array[0].tolist() if array.ndim > 1 else array[0]
        return all((row.tolist() if array.ndim > 1 else row) == first for row in array[1:])
    rows = np.ascontiguousarray(array).reshape(array.shape[0], -1).view(np.uint8)
    return bool((rows == rows[:1]).all())
