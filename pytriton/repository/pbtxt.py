"""Declaration -> config.pbtxt.

Pure functions, no I/O: the user's tensors and `ModelConfig` become Triton's ``ModelConfig``
protobuf message (built with the message classes shipped in tritonclient, so a field name typo is
an error here and not a load failure inside tritonserver), and that message becomes text.
"""

from __future__ import annotations

import numbers
import re
import types
from typing import Iterable, Mapping, Sequence, Tuple

import numpy as np
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as pb

from pytriton.exceptions import PyTritonBadParameterError, PyTritonModelConfigError
from pytriton.model_config.common import DynamicBatcher, QueuePolicy, SequenceBatcher, TimeoutAction
from pytriton.model_config.model_config import ModelConfig
from pytriton.model_config.tensor import Tensor, resolve_tensor_names

_NUMPY_TO_TRITON: dict[np.dtype, int] = {
    np.dtype(np.bool_): pb.TYPE_BOOL,
    np.dtype(np.uint8): pb.TYPE_UINT8,
    np.dtype(np.uint16): pb.TYPE_UINT16,
    np.dtype(np.uint32): pb.TYPE_UINT32,
    np.dtype(np.uint64): pb.TYPE_UINT64,
    np.dtype(np.int8): pb.TYPE_INT8,
    np.dtype(np.int16): pb.TYPE_INT16,
    np.dtype(np.int32): pb.TYPE_INT32,
    np.dtype(np.int64): pb.TYPE_INT64,
    np.dtype(np.float16): pb.TYPE_FP16,
    np.dtype(np.float32): pb.TYPE_FP32,
    np.dtype(np.float64): pb.TYPE_FP64,
    np.dtype(object): pb.TYPE_STRING,
}

# The way back; TYPE_STRING maps to object because only object arrays keep trailing b"\x00".
_TRITON_TO_NUMPY: dict[int, np.dtype] = {data_type: dtype for dtype, data_type in _NUMPY_TO_TRITON.items()}

_TIMEOUT_ACTIONS = {
    TimeoutAction.REJECT: pb.ModelQueuePolicy.REJECT,
    TimeoutAction.DELAY: pb.ModelQueuePolicy.DELAY,
}

_MODEL_NAME = re.compile(r"[A-Za-z0-9_.-]+")

_NO_PARAMETERS: Mapping[str, str] = types.MappingProxyType({})


def to_triton_data_type(dtype: np.dtype, tensor_name: str) -> int:
    """Map a numpy dtype to Triton's ``DataType`` enum value (e.g. ``TYPE_FP32``).

    Both bytes (``"S"``) and ``object`` dtypes map to ``TYPE_STRING``: Triton has one BYTES type.

    Raises:
        PyTritonModelConfigError: Triton has no type for the dtype; names the tensor and dtype.
    """
    dtype = np.dtype(dtype)
    if dtype.kind == "S":
        return int(pb.TYPE_STRING)
    try:
        return _NUMPY_TO_TRITON[dtype]
    except KeyError:
        hint = " (for text use np.bytes_ or object and encode it)" if dtype.kind == "U" else ""
        supported = ", ".join(sorted(str(d) for d in _NUMPY_TO_TRITON)) + ", bytes"
        raise PyTritonModelConfigError(
            f"tensor {tensor_name!r} has dtype {dtype!r} that Triton cannot carry{hint}; supported: {supported}"
        ) from None


def from_triton_data_type(data_type: int) -> np.dtype:
    """Map Triton's ``DataType`` enum value back to a numpy dtype; ``TYPE_STRING`` gives ``object``.

    Raises:
        PyTritonModelConfigError: the value has no numpy counterpart (TYPE_BF16, TYPE_INVALID).
    """
    try:
        return _TRITON_TO_NUMPY[data_type]
    except KeyError:
        raise PyTritonModelConfigError(f"Triton data type {data_type!r} has no numpy dtype") from None


def _check_model_name(model_name: object) -> str:
    # The name becomes a folder of the model repository, so it must be one safe path component.
    if not isinstance(model_name, str) or not _MODEL_NAME.fullmatch(model_name) or model_name.startswith("."):
        raise PyTritonModelConfigError(
            f"model_name must be a non-empty folder name of letters, digits, '_', '-' and '.', "
            f"not starting with '.', got {model_name!r}"
        )
    return model_name


def _resolved(tensors: Iterable[Tensor], prefix: str, model_name: str) -> tuple[Tensor, ...]:
    try:
        return resolve_tensor_names(tensors, prefix)
    except PyTritonBadParameterError as exc:
        raise PyTritonModelConfigError(f"model {model_name!r}: {exc.message}") from exc


def _queue_policy(policy: QueuePolicy) -> pb.ModelQueuePolicy:
    return pb.ModelQueuePolicy(
        timeout_action=_TIMEOUT_ACTIONS[policy.timeout_action],
        default_timeout_microseconds=policy.default_timeout_microseconds,
        allow_timeout_override=policy.allow_timeout_override,
        max_queue_size=policy.max_queue_size,
    )


def _fill_sequence_batching(proto: pb.ModelConfig, batcher: SequenceBatcher, max_batch_size: int, count: int) -> None:
    """Triton's sequence batcher, without control inputs: the proxy reads each request's
    correlation id and start/end flags from the request itself."""
    sequences = proto.sequence_batching
    sequences.SetInParent()
    sequences.max_sequence_idle_microseconds = batcher.max_sequence_idle_microseconds
    if batcher.strategy == "direct":
        sequences.direct.SetInParent()
        return
    oldest = sequences.oldest
    oldest.max_candidate_sequences = batcher.max_candidate_sequences or max(1, max_batch_size) * count
    oldest.max_queue_delay_microseconds = batcher.max_queue_delay_microseconds
    oldest.preferred_batch_size.extend(batcher.preferred_batch_size or ())


def _fill_dynamic_batching(proto: pb.ModelConfig, config: ModelConfig) -> None:
    batcher = config.batcher
    assert isinstance(batcher, DynamicBatcher)
    batching = proto.dynamic_batching
    # Present even when every field is default: its presence is what turns Triton's batcher on.
    batching.SetInParent()
    batching.max_queue_delay_microseconds = batcher.max_queue_delay_microseconds
    batching.preferred_batch_size.extend(batcher.preferred_batch_size or ())
    batching.preserve_ordering = batcher.preserve_ordering
    batching.priority_levels = batcher.priority_levels
    batching.default_priority_level = batcher.default_priority_level
    # No queue policy unless the user sets one: in Triton 2.51 a model with one instance whose
    # batcher has a queue policy (even `allow_timeout_override` alone) stalls for 500 ms at a time
    # under load (the batcher misses a wake-up and sleeps its 500 ms default wait; measured: 13
    # such stalls in 6 s at concurrency 16). Expired requests are dropped by the worker instead
    # (`pytriton.worker.batches`), over both protocols.
    if batcher.default_queue_policy is not None:
        batching.default_queue_policy.CopyFrom(_queue_policy(batcher.default_queue_policy))
    for level, policy in sorted((batcher.priority_queue_policy or {}).items()):
        batching.priority_queue_policy[level].CopyFrom(_queue_policy(policy))


def model_config_proto(
    model_name: str,
    inputs: Iterable[Tensor],
    outputs: Iterable[Tensor],
    config: ModelConfig,
    instance_count: int,
    parameters: Mapping[str, str] = _NO_PARAMETERS,
    backend: str = "python",
    instance_groups: Sequence[Tuple[str, int]] = (),
    warmups: Sequence[pb.ModelWarmup] = (),
) -> pb.ModelConfig:
    """Build the Triton ``ModelConfig`` message of one bound model.

    Unnamed tensors are named ``INPUT_<n>``/``OUTPUT_<n>`` by position. With batching the
    message gets ``max_batch_size`` and a ``dynamic_batching`` block; without it
    ``max_batch_size: 0`` and no batcher. There is one CPU instance group of ``instance_count``
    instances (the callables run in the user's process; the instances only relay to them).
    ``Tensor.optional`` is written for inputs only: Triton outputs have no such field.

    Args:
        model_name: the name clients use; also the model's folder name in the repository.
        inputs: the declared inputs, in order.
        outputs: the declared outputs, in order.
        config: the model's `ModelConfig`.
        instance_count: how many model instances Triton runs, >= 1.
        parameters: extra ``parameters`` entries, each written as a ``string_value``.
        backend: the Triton backend that runs the model.
        instance_groups: named CPU groups (name, count) instead of the one unnamed group, their
            counts adding up to `instance_count` (instances grouped by device, see
            `pytriton.repository.served`).
        warmups: the ``model_warmup`` entries Triton runs (`pytriton.repository.warmup.WarmupPlan`).

    Returns:
        The message, ready for `to_pbtxt`.

    Raises:
        PyTritonModelConfigError: a value cannot go into a valid Triton config; the message names it.
    """
    model_name = _check_model_name(model_name)
    if not isinstance(config, ModelConfig):
        raise PyTritonModelConfigError(f"model {model_name!r}: config must be a ModelConfig, got {config!r}")
    count: object = instance_count  # typed as int, but callers pass whatever the user gave
    if isinstance(count, bool) or not isinstance(count, numbers.Integral) or count < 1:
        raise PyTritonModelConfigError(
            f"model {model_name!r}: instance_count must be an integer >= 1, got {instance_count!r}"
        )
    if not isinstance(backend, str) or not backend:
        raise PyTritonModelConfigError(f"model {model_name!r}: backend must be a non-empty string, got {backend!r}")

    proto = pb.ModelConfig(
        name=model_name,
        backend=backend,
        max_batch_size=config.triton_max_batch_size,
    )
    resolved_inputs = _resolved(inputs, "INPUT", model_name)
    for tensor in resolved_inputs:
        proto.input.add(
            name=tensor.name,
            data_type=to_triton_data_type(np.dtype(tensor.dtype), str(tensor.name)),
            dims=tensor.shape,
            optional=tensor.optional,
        )
    for tensor in _resolved(outputs, "OUTPUT", model_name):
        proto.output.add(
            name=tensor.name,
            data_type=to_triton_data_type(np.dtype(tensor.dtype), str(tensor.name)),
            dims=tensor.shape,
        )
    if isinstance(config.batcher, SequenceBatcher):
        _fill_sequence_batching(proto, config.batcher, config.triton_max_batch_size, int(count))
    elif config.batching:
        _fill_dynamic_batching(proto, config)
    if instance_groups:
        for group, group_count in instance_groups:
            proto.instance_group.add(name=group, count=group_count, kind=pb.ModelInstanceGroup.KIND_CPU)
    else:
        proto.instance_group.add(count=int(count), kind=pb.ModelInstanceGroup.KIND_CPU)
    if config.response_cache:
        proto.response_cache.enable = True
    if config.decoupled:
        proto.model_transaction_policy.decoupled = True
    proto.model_warmup.extend(warmups)
    for key, value in parameters.items():
        if not isinstance(key, str) or not key or not isinstance(value, str):
            raise PyTritonModelConfigError(
                f"model {model_name!r}: parameters must map non-empty strings to strings, got {key!r}: {value!r}"
            )
        proto.parameters[key].string_value = value
    return proto


def to_pbtxt(proto: pb.ModelConfig) -> str:
    """Render the message as the text format tritonserver reads from ``config.pbtxt``."""
    return str(text_format.MessageToString(proto))


def parse_pbtxt(text: str) -> pb.ModelConfig:
    """Parse ``config.pbtxt`` text back into a message (for round-trips and reading a repository).

    Raises:
        PyTritonModelConfigError: the text is not a valid Triton model configuration.
    """
    try:
        return text_format.Parse(text, pb.ModelConfig())
    except text_format.ParseError as exc:
        raise PyTritonModelConfigError(f"config.pbtxt text is not a valid Triton ModelConfig: {exc}") from exc
