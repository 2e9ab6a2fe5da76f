"""What the user declares — one input or output tensor of a model.

A `Tensor` is pure data: the per-sample shape (without the batch axis), the numpy dtype and an
optional name. `resolve_tensor_names` gives unnamed tensors the positional names the rest of the
library (config.pbtxt, the worker, `@batch`) uses, so the naming rule lives in one place.
"""

from __future__ import annotations

import dataclasses
import numbers
from typing import Any, Iterable, Sequence, Union

import numpy as np

from pytriton.exceptions import PyTritonBadParameterError

DTypeLike = Union[np.dtype, type, str]
"""What `Tensor.dtype` accepts: ``np.dtype("float32")``, ``np.float32``, ``np.bytes_``, ``object`` or ``"float32"``."""

_BYTES: np.dtype = np.dtype("S")


def _normalise_dtype(value: Any, where: str) -> np.dtype:
    # np.dtype(None) silently means float64; a forgotten dtype must not turn into a float model.
    if value is None:
        raise PyTritonBadParameterError(f"{where}.dtype is required (e.g. np.float32, np.bytes_ or object), got None")
    try:
        dtype: np.dtype = np.dtype(value)
    except (TypeError, ValueError) as exc:
        raise PyTritonBadParameterError(
            f"{where}.dtype must be a numpy dtype, a numpy scalar type or a dtype name "
            f"(e.g. np.float32, np.bytes_, object, 'float32'), got {value!r}"
        ) from exc
    if dtype.kind == "S":
        # Triton's BYTES items have no fixed width, so "S5" and "S" describe the same tensor.
        return _BYTES
    return dtype


def _normalise_shape(value: Any, where: str) -> tuple[int, ...]:
    allowed = "a non-empty sequence of integers, each >= 1 or -1 for a dynamic axis"
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise PyTritonBadParameterError(f"{where}.shape must be {allowed}, got {value!r}")
    shape = tuple(value)
    # Triton refuses a tensor without dims; a scalar per sample is shape (1,).
    if not shape:
        raise PyTritonBadParameterError(f"{where}.shape must be {allowed} (use (1,) for a scalar), got {value!r}")
    for dim in shape:
        if isinstance(dim, bool) or not isinstance(dim, numbers.Integral) or (dim < 1 and dim != -1):
            raise PyTritonBadParameterError(f"{where}.shape must be {allowed}, got {value!r} (bad axis {dim!r})")
    return tuple(int(dim) for dim in shape)


@dataclasses.dataclass(frozen=True, init=False)
class Tensor:
    """One model input or output as Triton sees it.

    The constructor accepts the loose forms users write (``np.float32``, ``"float32"``, a list
    shape) and checks them. ``tensor.shape`` is stored as a tuple of ints; ``tensor.dtype`` as a
    scalar type, as the published PyTriton stores it: a type is kept as given (``np.float32``,
    ``np.bytes_``, ``bytes``, ``object``), an ``np.dtype`` or a name becomes its type
    (``np.dtype("float32")`` -> ``np.float32``). ``np.dtype(tensor.dtype)`` reads any of them
    back as a dtype. Frozen, as the published one: build another to change a field.

    Args:
        shape: the shape of one sample, without the batch axis; -1 marks an axis whose size
            varies between requests. Stored as a tuple of ints.
        dtype: a numpy dtype, a numpy scalar type or a dtype name; stored as a scalar type.
            ``np.bytes_``/``bytes`` and ``object`` both travel as Triton BYTES, but only
            ``object`` keeps trailing ``\\x00`` bytes.
        name: the tensor name; when None it becomes ``INPUT_<n>``/``OUTPUT_<n>`` by position.
        optional: an input that requests may leave out.
    """

    shape: tuple[int, ...]
    dtype: type
    name: str | None
    optional: bool

    # Hand-written so the fields can carry their normalised types while the arguments stay loose;
    # dataclasses.replace() still works because the parameter names are the field names.
    def __init__(
        self,
        shape: Sequence[int],
        dtype: DTypeLike,
        name: str | None = None,
        optional: bool = False,
    ) -> None:
        where = f"Tensor({name!r})" if isinstance(name, str) else "Tensor"
        if name is not None and (not isinstance(name, str) or not name):
            raise PyTritonBadParameterError(f"Tensor.name must be a non-empty string or None, got {name!r}")
        if not isinstance(optional, (bool, np.bool_)):
            raise PyTritonBadParameterError(f"{where}.optional must be a bool (True or False), got {optional!r}")
        # The dataclass is frozen; setting fields is allowed only here, before anyone holds the object.
        object.__setattr__(self, "shape", _normalise_shape(shape, where))
        checked = _normalise_dtype(dtype, where)
        object.__setattr__(self, "dtype", dtype if isinstance(dtype, type) else checked.type)
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "optional", bool(optional))


def resolve_tensor_names(tensors: Iterable[Tensor], prefix: str) -> tuple[Tensor, ...]:
    """Name every unnamed tensor ``f"{prefix}_{position}"``, counting positions from 1.

    Positions count all tensors, named or not, so the third tensor is ``INPUT_3`` whatever the
    first two are called; a user can then predict each name from the declaration alone.

    Args:
        tensors: the declared inputs or outputs, in order.
        prefix: ``"INPUT"`` or ``"OUTPUT"``.

    Returns:
        The tensors in the same order, each with a name.

    Raises:
        PyTritonBadParameterError: an item is not a `Tensor`, or two tensors end up with the same name.
    """
    resolved = []
    seen = set()
    for position, tensor in enumerate(tensors, start=1):
        if not isinstance(tensor, Tensor):
            raise PyTritonBadParameterError(
                f"{prefix.lower()}s[{position - 1}] must be a pytriton.model_config.Tensor, got {tensor!r}"
            )
        if tensor.name is None:
            tensor = dataclasses.replace(tensor, name=f"{prefix}_{position}")
        if tensor.name in seen:
            raise PyTritonBadParameterError(
                f"{prefix.lower()} tensor names must be unique, got {tensor.name!r} twice "
                f"(unnamed tensors are named {prefix}_<position>)"
            )
        seen.add(tensor.name)
        resolved.append(tensor)
    return tuple(resolved)
