"""A deployed model's Triton configuration, as a client or a reader of ``config.pbtxt`` sees it.

Built from the JSON that the server returns for ``GET v2/models/<name>/config`` (HTTP) or from
``ModelConfigResponse`` rendered as JSON (gRPC), by `parse_model_config`. What a client needs
drives the request: the batching limit to add or check the batch axis, the tensors to map
positional inputs by order, and whether the model is decoupled (which client kind it needs).
Beside it, the attributes that code written for published PyTriton reads off
``client.model_config`` (``batcher``, ``response_cache``, ``instance_group``,
``backend_parameters``, a tensor's ``optional``) are kept under their published names. The
dynamic batcher is described with the declaration classes of `pytriton.model_config.common`, so
it compares equal to what a user declared; any Triton model is described, not only pytriton's.

The clients (`pytriton.client.model_config`) use these classes and `parse_model_config`,
translating its error into their own; they live here, below the client, so that the published
names below and `pytriton.model_config.parser.ModelConfigParser` import nothing of the client.
``TritonModelConfig`` is the published PyTriton's name of `ClientModelConfig`, the same class, so
``isinstance(client.model_config, TritonModelConfig)`` holds. What differs from the published
dataclass:

- there is no ``model_version``: a model's configuration names no version, so there is no
  truthful value to report (the published class always says 1);
- there is no ``model_warmup``: warm-up samples are the server's business and are not read back;
- ``batching`` is a property (``max_batch_size > 0``), not a separate field;
- ``inputs`` and ``outputs`` are tuples, empty when the model declares none; a BYTES tensor has
  dtype ``object``;
- the class is frozen: use ``dataclasses.replace`` to derive a changed copy.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Mapping
from typing import Any, Dict, Optional, Union

import numpy as np
from tritonclient.utils import triton_to_np_dtype

from pytriton.exceptions import PyTritonBadParameterError, PyTritonModelConfigError
from pytriton.model_config.common import DeviceKind, DynamicBatcher, QueuePolicy

__all__ = ["ClientModelConfig", "ResponseCache", "TensorSpec", "TritonModelConfig", "parse_model_config"]

_LOGGER = logging.getLogger("pytriton.client.model_config")  # where the clients have always logged it

#: ``instance_group`` keys: a :class:`DeviceKind`, or Triton's own name for a kind it does not list.
InstanceKind = Union[DeviceKind, str]


@dataclasses.dataclass(frozen=True)
class TensorSpec:
    """One input or output of a model.

    Attributes:
        name: tensor name.
        shape: dimensions of one sample (without the batch axis), ``-1`` for a variable one.
        dtype: numpy dtype; ``np.object_`` for Triton's BYTES (``TYPE_STRING``).
        triton_dtype: the Triton data type name, e.g. ``"INT32"`` or ``"BYTES"``.
        optional: whether requests may leave this input out (always False for outputs).
        shape_tensor: a TensorRT shape tensor (``is_shape_tensor``), whose shape Triton checks
            its own way (the clients leave it to the server).
    """

    name: str
    shape: tuple[int, ...]
    dtype: np.dtype
    triton_dtype: str
    optional: bool = False
    shape_tensor: bool = False


@dataclasses.dataclass(frozen=True)
class ResponseCache:
    """The model's response-cache setting (Triton's ``response_cache``).

    Attributes:
        enable: whether the server answers repeated identical requests from its cache.
    """

    enable: bool


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
        batcher: the dynamic batcher's settings, or None when the model has no dynamic batching.
        response_cache: the response-cache setting, or None when the configuration names none.
        instance_group: instance count per device kind (counts of groups of one kind added up;
            None where the server gave no count).
        backend_parameters: the configuration's ``parameters``, name to string value.
        backend: the Triton backend that runs the model (``"python"`` for pytriton's models).
    """

    model_name: str
    max_batch_size: int
    inputs: tuple[TensorSpec, ...] = ()
    outputs: tuple[TensorSpec, ...] = ()
    decoupled: bool = False
    batcher: Optional[DynamicBatcher] = None
    response_cache: Optional[ResponseCache] = None
    instance_group: Dict[InstanceKind, Optional[int]] = dataclasses.field(default_factory=dict)
    backend_parameters: Dict[str, str] = dataclasses.field(default_factory=dict)
    backend: str = ""

    @functools.cached_property
    def input_specs(self) -> Dict[str, TensorSpec]:
        """Input name -> its `TensorSpec`; built once, as every request looks its inputs up here."""
        return {spec.name: spec for spec in self.inputs}

    @property
    def batching(self) -> bool:
        """Whether the first axis of every tensor is the batch axis (``max_batch_size > 0``)."""
        return self.max_batch_size > 0

    def __hash__(self) -> int:
        # Written by hand because two fields are dicts and the batcher may be changed (as the
        # published one); the fields that identify a model's interface make a hash consistent with ==.
        return hash((self.model_name, self.max_batch_size, self.inputs, self.outputs, self.decoupled))


def _tensor(raw: Mapping[str, Any], model_name: str) -> TensorSpec:
    # Model configs name BYTES "TYPE_STRING"; requests and numpy conversion call it "BYTES".
    triton_dtype = str(raw.get("data_type", "TYPE_INVALID"))
    triton_dtype = triton_dtype[len("TYPE_") :] if triton_dtype.startswith("TYPE_") else triton_dtype
    triton_dtype = "BYTES" if triton_dtype == "STRING" else triton_dtype
    np_dtype = triton_to_np_dtype(triton_dtype)
    if np_dtype is None:
        raise PyTritonModelConfigError(
            f"Model {model_name!r} declares tensor {raw.get('name')!r} with data type "
            f"{raw.get('data_type')!r} that has no numpy equivalent"
        )
    # gRPC's JSON renders int64 dims as strings ("1"), HTTP as numbers.
    shape = tuple(int(dim) for dim in raw.get("dims", ()))
    return TensorSpec(
        name=str(raw["name"]),
        shape=shape,
        dtype=np.dtype(np_dtype),
        triton_dtype=triton_dtype,
        optional=bool(raw.get("optional", False)),
        shape_tensor=bool(raw.get("is_shape_tensor", False)),
    )


def _queue_policy(raw: Mapping[str, Any]) -> QueuePolicy:
    # gRPC's JSON leaves out fields at their default (timeout_action REJECT, zeros, false) and
    # renders uint64 as strings; HTTP gives every field, as numbers.
    return QueuePolicy(
        timeout_action=str(raw.get("timeout_action", "REJECT")),  # type: ignore[arg-type]  # the name is accepted
        default_timeout_microseconds=int(raw.get("default_timeout_microseconds", 0)),
        allow_timeout_override=bool(raw.get("allow_timeout_override", False)),
        max_queue_size=int(raw.get("max_queue_size", 0)),
    )


def _batcher(raw: Any, model_name: str) -> DynamicBatcher | None:
    if not isinstance(raw, Mapping):
        return None
    default_policy = raw.get("default_queue_policy")
    level_policies = raw.get("priority_queue_policy")
    preferred = raw.get("preferred_batch_size")
    try:
        return DynamicBatcher(
            max_queue_delay_microseconds=int(raw.get("max_queue_delay_microseconds", 0)),
            preferred_batch_size=[int(size) for size in preferred] if preferred else None,
            preserve_ordering=bool(raw.get("preserve_ordering", False)),
            priority_levels=int(raw.get("priority_levels", 0)),
            default_priority_level=int(raw.get("default_priority_level", 0)),
            default_queue_policy=_queue_policy(default_policy) if isinstance(default_policy, Mapping) else None,
            priority_queue_policy=(
                {int(level): _queue_policy(policy) for level, policy in level_policies.items()}
                if isinstance(level_policies, Mapping) and level_policies
                else None
            ),
        )
    except (PyTritonBadParameterError, TypeError, ValueError) as exc:
        # Informational only (requests do not depend on it): a setting the declaration classes
        # refuse must not make the model unusable from this client.
        _LOGGER.warning("Model %r: its dynamic_batching settings are not described (%s): %r", model_name, exc, raw)
        return None


def _instance_group(raw: Any) -> dict[InstanceKind, int | None]:
    groups: dict[InstanceKind, int | None] = {}
    for entry in raw if isinstance(raw, list) else ():
        # gRPC leaves out KIND_AUTO, the enum's zero value.
        name = str(entry.get("kind", DeviceKind.KIND_AUTO.value))
        kind: InstanceKind = DeviceKind(name) if name in DeviceKind.__members__ else name
        count = int(entry["count"]) if "count" in entry else None
        known = groups.get(kind)
        groups[kind] = count if known is None or count is None else known + count
    return groups


def _backend_parameters(raw: Any) -> dict[str, str]:
    if not isinstance(raw, Mapping):
        return {}
    return {
        str(name): str(value.get("string_value", "")) if isinstance(value, Mapping) else str(value)
        for name, value in raw.items()
    }


def parse_model_config(raw: Mapping[str, Any]) -> ClientModelConfig:
    """Build a :class:`ClientModelConfig` from the server's JSON model configuration.

    Args:
        raw: the model configuration as a mapping; the gRPC wrapper ``{"config": {...}}`` is
            accepted too. Fields at their default value may be missing (gRPC omits them).

    Returns:
        The client's view of the configuration.

    Raises:
        PyTritonModelConfigError: the configuration lacks a name or uses a data type
            without a numpy equivalent.
    """
    if "config" in raw and isinstance(raw["config"], Mapping):
        raw = raw["config"]
    name = raw.get("name")
    if not name:
        raise PyTritonModelConfigError(f"The server returned a model configuration without a name: {raw!r}")
    # HTTP leaves the policy out for a model that is not decoupled; gRPC leaves out false fields.
    policy = raw.get("model_transaction_policy") or {}
    cache = raw.get("response_cache")
    return ClientModelConfig(
        model_name=str(name),
        max_batch_size=int(raw.get("max_batch_size", 0)),
        inputs=tuple(_tensor(item, name) for item in raw.get("input", ())),
        outputs=tuple(_tensor(item, name) for item in raw.get("output", ())),
        decoupled=bool(policy.get("decoupled", False)),
        batcher=_batcher(raw.get("dynamic_batching"), name),
        # gRPC renders a disabled cache as {} (false fields are left out).
        response_cache=ResponseCache(enable=bool(cache.get("enable", False))) if isinstance(cache, Mapping) else None,
        instance_group=_instance_group(raw.get("instance_group")),
        backend_parameters=_backend_parameters(raw.get("parameters")),
        backend=str(raw.get("backend", "")),
    )


#: The published name of `ClientModelConfig` (the same class).
TritonModelConfig = ClientModelConfig
