"""Setup step 1: requests Triton runs through a model while loading it (model warm-up).

Triton sends the warm-up requests of a model's ``model_warmup`` configuration through the model
before it reports the model ready, so a callable's first real request does not pay for lazy
initialisation (weights moved to a device, kernels compiled, caches filled). pytriton binds the
callable before Triton loads the model, so the warm-up requests reach the callable itself.
"""

from __future__ import annotations

import dataclasses
import numbers
import re
import types
from typing import Any, Mapping, Optional

import numpy as np

from pytriton.exceptions import PyTritonBadParameterError

_NAME = re.compile(r"[A-Za-z0-9_.-]+")


@dataclasses.dataclass(frozen=True, eq=False)
class ModelWarmup:
    """One kind of warm-up request, sent `count` times while the model loads.

    Args:
        inputs: one sample per input, without the batch axis (the whole tensor when the model
            does not batch); Triton repeats it `batch_size` times. Inputs left out are sent as
            zeros (empty strings for bytes) with every variable axis of length 1, except
            optional inputs, which are left out. ``None`` sends zeros for every required input.
        batch_size: the batch size of each warm-up request; 1 for a model without batching.
        count: how many times the request is sent.
        name: the name Triton logs for this warm-up (letters, digits, ``_``, ``-``, ``.``).

    Example:
        ``ModelConfig(warmup=ModelWarmup({"text": np.array([b"hello"])}, batch_size=4))``
    """

    inputs: Optional[Mapping[str, Any]] = None
    batch_size: int = 1
    count: int = 1
    name: str = "warmup"

    def __post_init__(self) -> None:
        for field in ("batch_size", "count"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
                raise PyTritonBadParameterError(f"ModelWarmup.{field} must be an integer >= 1, got {value!r}")
            object.__setattr__(self, field, int(value))
        if not isinstance(self.name, str) or not _NAME.fullmatch(self.name):
            raise PyTritonBadParameterError(
                f"ModelWarmup.name must be a non-empty name of letters, digits, '_', '-' and '.', got {self.name!r}"
            )
        if self.inputs is None:
            return
        if not isinstance(self.inputs, Mapping):
            raise PyTritonBadParameterError(
                f"ModelWarmup.inputs must map input names to arrays (or be None), got {self.inputs!r}"
            )
        arrays = {}
        for key, value in self.inputs.items():
            if not isinstance(key, str) or not key:
                raise PyTritonBadParameterError(f"ModelWarmup.inputs keys must be input names, got {key!r}")
            array = np.asarray(value)
            if array.ndim == 0:
                raise PyTritonBadParameterError(
                    f"ModelWarmup.inputs[{key!r}] must have at least one axis (use np.array([value])), got {value!r}"
                )
            arrays[key] = array
        object.__setattr__(self, "inputs", types.MappingProxyType(arrays))

    def __repr__(self) -> str:
        shapes = None if self.inputs is None else {k: v.shape for k, v in self.inputs.items()}
        return f"ModelWarmup(inputs={shapes}, batch_size={self.batch_size}, count={self.count}, name={self.name!r})"
