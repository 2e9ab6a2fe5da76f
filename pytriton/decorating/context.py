"""What a callable, and the user's own decorators, may know about the model being served.

Step of the request flow: worker -> decorators -> the user's callable (the overview is in
`pytriton.decorators`). The worker sets the served model for the thread
(`pytriton.worker.context`); this module shows it in the published PyTriton's terms:
@triton_context, `TritonContext` with its ``model_configs``, `ServedModelConfig`, and the
helpers `get_triton_context`, `get_model_config` and `convert_output`.
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any, Callable, Dict, Hashable, Iterator, MutableMapping, Sequence, Tuple

import numpy as np
import wrapt

from pytriton.decorating.common import Outputs, _name_outputs
from pytriton.exceptions import PyTritonBadParameterError, PyTritonInvalidOperationError
from pytriton.worker.context import TritonContext as _ServedContext
from pytriton.worker.context import current_context

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

    It is the worker's context of the served model (its name, version, inputs, outputs, config,
    and input and output names) plus the published PyTriton's ``model_configs``:
    ``triton_context.model_configs[infer_func]`` is this model's `ServedModelConfig`, for
    ``infer_func`` any decorated layer of the callable that got the context (or, in a method,
    the object itself).
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
