"""Turns what a callable returned as an output into a host numpy array, torch tensors included.

Step of the response flow: the user's callable (or a decorator such as ``@batch``) -> here ->
`pytriton.worker.responses`. The wire carries numpy arrays only, but a model on a GPU naturally
ends in a torch tensor; making every user write ``.detach().cpu().numpy()`` is busywork, and a
bare ``np.asarray`` fails on tensors that are on a device or require grad.

torch is never imported here: a value counts as a torch tensor only when torch is already in
``sys.modules`` (the callable made one, so it is) and the value is an instance of its
``Tensor``. Everything else goes through ``np.asarray`` as before.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from pytriton.exceptions import PyTritonValidationError


def is_torch_tensor(value: Any) -> bool:
    """Whether `value` is a torch tensor, without importing torch."""
    torch = sys.modules.get("torch")
    tensor_type = getattr(torch, "Tensor", None) if torch is not None else None
    return tensor_type is not None and isinstance(value, tensor_type)


def torch_to_numpy(tensor: Any, what: str) -> np.ndarray:
    """One copy to the host (none for a CPU tensor), detached from autograd, as a numpy array.

    A CPU tensor's array shares its memory; the wire copies it anyway. Dtypes that numpy lacks
    (bfloat16, the float8 kinds) are refused with the cast to make, rather than guessed at.
    """
    host = tensor.detach()
    if host.device.type != "cpu":
        host = host.cpu()  # the one device-to-host copy, which also waits for the kernels before it
    if getattr(host, "is_conj", lambda: False)():
        host = host.resolve_conj()
    try:
        array: np.ndarray = host.numpy()
    except TypeError as exc:
        raise PyTritonValidationError(
            f"{what} is a torch tensor of dtype {tensor.dtype}, which numpy cannot hold ({exc}); "
            "convert it in the callable, e.g. with .float() for bfloat16"
        ) from exc
    return array


def host_array(value: Any, what: str) -> np.ndarray:
    """`value` as a numpy array: arrays as they are, torch tensors copied to the host, the rest
    through ``np.asarray`` (whose errors the caller words)."""
    if isinstance(value, np.ndarray):
        return value
    if is_torch_tensor(value):
        return torch_to_numpy(value, what)
    return np.asarray(value)
