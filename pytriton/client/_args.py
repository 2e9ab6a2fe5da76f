"""Checks of the arguments every client flavour takes (pure).

Shared so that the sync, futures (and a later asyncio) client refuse the same values with the
same words, at construction, before any thread or connection exists.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pytriton.client.exceptions import PyTritonClientValueError

DEFAULT_INIT_TIMEOUT_S = 300.0
DEFAULT_INFERENCE_TIMEOUT_S = 60.0


def timeout_arg(name: str, value: float | None, default: float) -> float:
    """``value`` in seconds, ``default`` for None; anything but a positive number is refused."""
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise PyTritonClientValueError(f"{name} must be a positive number of seconds or None, got {value!r}")
    return float(value)


def model_args(model_name: str, model_version: str | int | None) -> tuple[str, str]:
    """The model name and version as ``tritonclient`` wants them (version ``""``: the server's choice)."""
    if not isinstance(model_name, str) or not model_name:
        raise PyTritonClientValueError(f"model_name must be a non-empty string, got {model_name!r}")
    if model_version is None:
        return model_name, ""
    if isinstance(model_version, bool) or not isinstance(model_version, (str, int)):
        raise PyTritonClientValueError(f"model_version must be a string, an integer or None, got {model_version!r}")
    return model_name, str(model_version)


def mapping_arg(name: str, value: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """``parameters`` and ``headers`` must be mappings (or None)."""
    if value is not None and not isinstance(value, Mapping):
        raise PyTritonClientValueError(f"{name} must be a mapping or None, got {type(value).__name__}")
    return value


def pool_arg(name: str, value: int | None, minimum: int) -> int | None:
    """A worker or queue count: None, or an integer >= ``minimum``."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < minimum):
        raise PyTritonClientValueError(f"{name} must be an integer >= {minimum} or None, got {value!r}")
    return value
