"""The model configuration as a client sees it (pure data, no I/O).

Built from the JSON that the server returns for ``GET v2/models/<name>/config`` (HTTP) or from
``ModelConfigResponse`` rendered as JSON (gRPC). Only what a client needs is kept: the
batching limit to add or check the batch axis, the tensors to map positional inputs by
order, and whether the model is decoupled (which client kind it needs). The client does not
import the server side's ``ModelConfig``: it may run where the server side is not installed,
and it must describe any Triton model, not only pytriton's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np
from tritonclient.utils import triton_to_np_dtype

from pytriton.client.exceptions import PyTritonClientDecoupledMismatchError, PyTritonClientInferenceServerError


@dataclasses.dataclass(frozen=True)
class TensorSpec:
    """One input or output of a model.

    Attributes:
        name: tensor name.
        shape: dimensions of one sample (without the batch axis), ``-1`` for a variable one.
        dtype: numpy dtype; ``np.object_`` for Triton's BYTES (``TYPE_STRING``).
        triton_dtype: the Triton data type name, e.g. ``"INT32"`` or ``"BYTES"``.
    """

    name: str
    shape: tuple[int, ...]
    dtype: np.dtype
    triton_dtype: str


@dataclasses.dataclass(frozen=True)
class ClientModelConfig:
    """What a client knows of a deployed model.

    Attributes:
        model_name: the model's name on the server.
        max_batch_size: the largest batch accepted; 0 when the model does not batch.
        inputs: inputs in the order declared by the model (positional inputs map to this order).
        outputs: outputs in the order declared by the model.
        decoupled: whether the model is decoupled (``model_transaction_policy { decoupled: true }``):
            it sends any number of responses per request, which only the streaming clients
            (``DecoupledModelClient``, ``AsyncioDecoupledModelClient``) can receive.
    """

    model_name: str
    max_batch_size: int
    inputs: tuple[TensorSpec, ...] = ()
    outputs: tuple[TensorSpec, ...] = ()
    decoupled: bool = False

    @property
    def batching(self) -> bool:
        """Whether the first axis of every tensor is the batch axis (``max_batch_size > 0``)."""
        return self.max_batch_size > 0


def _tensor(raw: Mapping[str, Any], model_name: str) -> TensorSpec:
    # Model configs name BYTES "TYPE_STRING"; requests and numpy conversion call it "BYTES".
    triton_dtype = str(raw.get("data_type", "TYPE_INVALID"))
    triton_dtype = triton_dtype[len("TYPE_") :] if triton_dtype.startswith("TYPE_") else triton_dtype
    triton_dtype = "BYTES" if triton_dtype == "STRING" else triton_dtype
    np_dtype = triton_to_np_dtype(triton_dtype)
    if np_dtype is None:
        raise PyTritonClientInferenceServerError(
            f"Model {model_name!r} declares tensor {raw.get('name')!r} with data type "
            f"{raw.get('data_type')!r} that has no numpy equivalent"
        )
    # gRPC's JSON renders int64 dims as strings ("1"), HTTP as numbers.
    shape = tuple(int(dim) for dim in raw.get("dims", ()))
    return TensorSpec(name=str(raw["name"]), shape=shape, dtype=np.dtype(np_dtype), triton_dtype=triton_dtype)


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
    if "config" in raw and isinstance(raw["config"], Mapping):
        raw = raw["config"]
    name = raw.get("name")
    if not name:
        raise PyTritonClientInferenceServerError(f"The server returned a model configuration without a name: {raw!r}")
    # HTTP leaves the policy out for a model that is not decoupled; gRPC leaves out false fields.
    policy = raw.get("model_transaction_policy") or {}
    return ClientModelConfig(
        model_name=str(name),
        max_batch_size=int(raw.get("max_batch_size", 0)),
        inputs=tuple(_tensor(item, name) for item in raw.get("input", ())),
        outputs=tuple(_tensor(item, name) for item in raw.get("output", ())),
        decoupled=bool(policy.get("decoupled", False)),
    )


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
