"""The model configuration as a client sees it (pure data, no I/O), and the client kind it needs.

The description itself (`ClientModelConfig`, `TensorSpec`, `ResponseCache`) and its reading from
the server's JSON live in `pytriton.model_config.triton_model_config`, below the client, so that
the published ``TritonModelConfig`` and ``ModelConfigParser`` import nothing of the client; here
a configuration the server sends that cannot be described is a server error, as the clients
report it. Nothing of the server side (repository, server process) is imported.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pytriton.client.exceptions import PyTritonClientDecoupledMismatchError, PyTritonClientInferenceServerError
from pytriton.exceptions import PyTritonModelConfigError
from pytriton.model_config import triton_model_config
from pytriton.model_config.triton_model_config import ClientModelConfig, InstanceKind, ResponseCache, TensorSpec

__all__ = ["ClientModelConfig", "InstanceKind", "ResponseCache", "TensorSpec", "check_decoupled", "parse_model_config"]


def parse_model_config(raw: Mapping[str, Any]) -> ClientModelConfig:
    """Build a :class:`ClientModelConfig` from the server's JSON model configuration.

    Args:
        raw: the model configuration as a mapping; the gRPC wrapper ``{"config": {...}}`` is
            accepted too. Fields at their default value may be missing (gRPC omits them).

    Returns:
        The client's view of the configuration.

    Raises:
        PyTritonClientInferenceServerError: the configuration lacks a name or uses a data type
            without a numpy equivalent.
    """
    try:
        return triton_model_config.parse_model_config(raw)
    except PyTritonModelConfigError as exc:
        raise PyTritonClientInferenceServerError(str(exc)) from exc


_ONE_RESPONSE_CLIENTS = "ModelClient, FuturesModelClient or AsyncioModelClient"
_STREAMING_CLIENTS = "DecoupledModelClient or AsyncioDecoupledModelClient"


def check_decoupled(config: ClientModelConfig, streaming: bool) -> ClientModelConfig:
    """Refuse a model whose transaction policy does not fit the client kind.

    Args:
        config: the model's configuration.
        streaming: True for the streaming clients, which need a decoupled model; False for the
            one-response clients, which cannot receive a decoupled model's responses.

    Returns:
        ``config``, unchanged.

    Raises:
        PyTritonClientDecoupledMismatchError: the model and the client kind do not fit.
    """
    if config.decoupled and not streaming:
        raise PyTritonClientDecoupledMismatchError(
            f"Model {config.model_name!r} is decoupled (it sends any number of responses per request); "
            f"use {_STREAMING_CLIENTS} to receive them"
        )
    if streaming and not config.decoupled:
        raise PyTritonClientDecoupledMismatchError(
            f"Model {config.model_name!r} is not decoupled (it sends one response per request); "
            f"use {_ONE_RESPONSE_CLIENTS}"
        )
    return config
