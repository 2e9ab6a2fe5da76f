"""What the user declares — the batching, queueing and warm-up knobs of a model.

Pure data with no I/O. Every class is a small dataclass that checks itself in ``__post_init__``,
so a wrong value fails on the line where the user wrote it, with a message naming the field, the
value and what is allowed, instead of later as a tritonserver load error. `QueuePolicy` and
`DynamicBatcher` accept field assignment after construction, as the published PyTriton's do;
`rechecked` runs the same checks again where a config is used (`Triton.bind`).
"""

from __future__ import annotations

import dataclasses
import enum
import numbers
import os
import re
import types
from typing import Any, Mapping, Optional, Sequence, TypeVar, Union

import numpy as np

from pytriton.exceptions import PyTritonBadParameterError
from pytriton.model_config.tensor import DTypeLike, _normalise_dtype


class TimeoutAction(enum.Enum):
    """What Triton does with a request that waited in the queue past its timeout."""

    REJECT = "REJECT"
    """Answer the request with an error."""
    DELAY = "DELAY"
    """Keep the request, but schedule it after the requests that have not timed out."""


class DeviceKind(enum.Enum):
    """Where Triton places model instances; pytriton runs callables in the user's process, so CPU."""

    KIND_AUTO = "KIND_AUTO"
    KIND_CPU = "KIND_CPU"
    KIND_GPU = "KIND_GPU"


def _is_int(value: object) -> bool:
    # Bools are refused although they are ints in Python: ``max_batch_size=True`` is a mistake, not 1.
    return isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))


def _check_int(where: str, value: Any, minimum: int) -> int:
    """Return ``value`` as a plain int, or raise naming ``where`` when it is not an int >= ``minimum``."""
    if not _is_int(value) or value < minimum:
        raise PyTritonBadParameterError(f"{where} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def _check_bool(where: str, value: Any) -> bool:
    """Return ``value`` as a plain bool, or raise naming ``where``; truthy strings like "no" are refused."""
    if not isinstance(value, (bool, np.bool_)):
        raise PyTritonBadParameterError(f"{where} must be a bool (True or False), got {value!r}")
    return bool(value)


def _check_timeout_action(value: Any) -> TimeoutAction:
    if isinstance(value, TimeoutAction):
        return value
    if isinstance(value, str) and value.upper() in TimeoutAction.__members__:
        return TimeoutAction[value.upper()]
    allowed = ", ".join(f"TimeoutAction.{name}" for name in TimeoutAction.__members__)
    raise PyTritonBadParameterError(f"QueuePolicy.timeout_action must be one of {allowed}, got {value!r}")


@dataclasses.dataclass
class QueuePolicy:
    """How Triton treats requests waiting in a model's queue (Triton's ``ModelQueuePolicy``).

    Args:
        timeout_action: what happens to a request whose timeout expired; a `TimeoutAction`
            (its name as a string is accepted too).
        default_timeout_microseconds: the timeout of requests that set none; 0 means no timeout.
        allow_timeout_override: whether a request may set its own, shorter, timeout.
        max_queue_size: how many requests may wait before new ones are rejected; 0 means unbounded.
    """

    timeout_action: TimeoutAction = TimeoutAction.REJECT
    default_timeout_microseconds: int = 0
    allow_timeout_override: bool = False
    max_queue_size: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "timeout_action", _check_timeout_action(self.timeout_action))
        object.__setattr__(
            self,
            "default_timeout_microseconds",
            _check_int("QueuePolicy.default_timeout_microseconds", self.default_timeout_microseconds, 0),
        )
        object.__setattr__(
            self,
            "allow_timeout_override",
            _check_bool("QueuePolicy.allow_timeout_override", self.allow_timeout_override),
        )
        object.__setattr__(self, "max_queue_size", _check_int("QueuePolicy.max_queue_size", self.max_queue_size, 0))


@dataclasses.dataclass
class DynamicBatcher:
    """How Triton groups requests into batches before calling the model (Triton's ``dynamic_batching``).

    Args:
        max_queue_delay_microseconds: how long a request may wait for others to fill a batch.
        preferred_batch_size: batch sizes Triton tries to form; stored as a tuple (a copy of the
            caller's list). Each must be >= 1 (and, checked by `ModelConfig`, <= its ``max_batch_size``).
        preserve_ordering: answer requests in the order they arrived.
        priority_levels: number of priority levels; 0 disables priorities.
        default_priority_level: the level of requests that set none; 1..priority_levels when
            priorities are on, otherwise 0.
        default_queue_policy: the `QueuePolicy` of every level without its own.
        priority_queue_policy: a `QueuePolicy` per priority level (keys 1..priority_levels).
    """

    max_queue_delay_microseconds: int = 0
    preferred_batch_size: Sequence[int] | None = None
    preserve_ordering: bool = False
    priority_levels: int = 0
    default_priority_level: int = 0
    default_queue_policy: QueuePolicy | None = None
    priority_queue_policy: dict[int, QueuePolicy] | None = None

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        set_(
            self,
            "max_queue_delay_microseconds",
            _check_int("DynamicBatcher.max_queue_delay_microseconds", self.max_queue_delay_microseconds, 0),
        )
        set_(self, "preferred_batch_size", self._checked_preferred_sizes())
        set_(self, "preserve_ordering", _check_bool("DynamicBatcher.preserve_ordering", self.preserve_ordering))
        levels = _check_int("DynamicBatcher.priority_levels", self.priority_levels, 0)
        set_(self, "priority_levels", levels)
        set_(self, "default_priority_level", self._checked_default_level(levels))
        if self.default_queue_policy is not None and not isinstance(self.default_queue_policy, QueuePolicy):
            raise PyTritonBadParameterError(
                f"DynamicBatcher.default_queue_policy must be a QueuePolicy or None, got {self.default_queue_policy!r}"
            )
        set_(self, "priority_queue_policy", self._checked_priority_policies(levels))

    def _checked_preferred_sizes(self) -> tuple[int, ...] | None:
        sizes = self.preferred_batch_size
        if sizes is None:
            return None
        if isinstance(sizes, (str, bytes)) or not isinstance(sizes, Sequence):
            raise PyTritonBadParameterError(
                f"DynamicBatcher.preferred_batch_size must be a list of integers >= 1 or None, got {sizes!r}"
            )
        return tuple(_check_int(f"DynamicBatcher.preferred_batch_size[{i}]", size, 1) for i, size in enumerate(sizes))

    def _checked_default_level(self, levels: int) -> int:
        level = self.default_priority_level
        if levels == 0:
            if not _is_int(level) or level != 0:
                raise PyTritonBadParameterError(
                    f"DynamicBatcher.default_priority_level must be 0 when priority_levels is 0, got {level!r}"
                )
            return 0
        if not _is_int(level) or not 1 <= level <= levels:
            raise PyTritonBadParameterError(
                f"DynamicBatcher.default_priority_level must be an integer in 1..{levels} "
                f"(priority_levels={levels}), got {level!r}"
            )
        return int(level)

    def _checked_priority_policies(self, levels: int) -> dict[int, QueuePolicy] | None:
        policies = self.priority_queue_policy
        if policies is None:
            return None
        if not isinstance(policies, dict):
            raise PyTritonBadParameterError(
                f"DynamicBatcher.priority_queue_policy must be a dict of priority level -> QueuePolicy, "
                f"got {policies!r}"
            )
        checked: dict[int, QueuePolicy] = {}
        for level, policy in policies.items():
            if not _is_int(level) or not 1 <= level <= levels:
                raise PyTritonBadParameterError(
                    f"DynamicBatcher.priority_queue_policy keys must be priority levels in 1..priority_levels "
                    f"(priority_levels={levels}), got key {level!r}"
                )
            if not isinstance(policy, QueuePolicy):
                raise PyTritonBadParameterError(
                    f"DynamicBatcher.priority_queue_policy[{level}] must be a QueuePolicy, got {policy!r}"
                )
            checked[int(level)] = policy
        # A private copy: mutating the caller's dict later must not change this config.
        return checked


_STRATEGIES = ("direct", "oldest")


@dataclasses.dataclass
class SequenceBatcher:
    """Triton's sequence batcher (``sequence_batching``): the requests of one stateful sequence
    reach one model instance, in order, each telling the callable its sequence id and whether
    it starts or ends the sequence (``request.sequence_id``, ``sequence_start``, ``sequence_end``).

    Args:
        strategy: ``"direct"`` gives each live sequence a batch slot of one instance;
            ``"oldest"`` batches requests of different sequences (the oldest first), as the
            dynamic batcher does.
        max_sequence_idle_microseconds: a sequence with no request for this long is freed; its
            next request must start it again.
        max_candidate_sequences: ``"oldest"`` only: sequences that may wait for a batch; None
            gives enough for ``max_batch_size`` live sequences per instance.
        max_queue_delay_microseconds: ``"oldest"`` only: how long a request may wait to fill a batch.
        preferred_batch_size: ``"oldest"`` only: batch sizes Triton tries to form.
    """

    strategy: str = "direct"
    max_sequence_idle_microseconds: int = 1_000_000
    max_candidate_sequences: Optional[int] = None
    max_queue_delay_microseconds: int = 0
    preferred_batch_size: Sequence[int] | None = None

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        if self.strategy not in _STRATEGIES:
            raise PyTritonBadParameterError(
                f"SequenceBatcher.strategy must be one of {', '.join(map(repr, _STRATEGIES))}, got {self.strategy!r}"
            )
        set_(self, "max_sequence_idle_microseconds",
             _check_int("SequenceBatcher.max_sequence_idle_microseconds", self.max_sequence_idle_microseconds, 1))
        if self.max_candidate_sequences is not None:
            set_(self, "max_candidate_sequences",
                 _check_int("SequenceBatcher.max_candidate_sequences", self.max_candidate_sequences, 1))
        set_(self, "max_queue_delay_microseconds",
             _check_int("SequenceBatcher.max_queue_delay_microseconds", self.max_queue_delay_microseconds, 0))
        sizes = self.preferred_batch_size
        if sizes is not None:
            if isinstance(sizes, (str, bytes)) or not isinstance(sizes, Sequence):
                raise PyTritonBadParameterError(
                    f"SequenceBatcher.preferred_batch_size must be a list of integers >= 1, got {sizes!r}"
                )
            set_(self, "preferred_batch_size",
                 tuple(_check_int("SequenceBatcher.preferred_batch_size entries", size, 1) for size in sizes))
        if self.strategy == "direct":
            for name, unset in (("max_candidate_sequences", None), ("max_queue_delay_microseconds", 0),
                                ("preferred_batch_size", None)):
                if getattr(self, name) != unset:
                    raise PyTritonBadParameterError(
                        f"SequenceBatcher.{name}={getattr(self, name)!r} applies to strategy='oldest' only, "
                        "got strategy='direct'"
                    )


def _check_flag(where: str, value: Any) -> bool:
    # The published fields are Optional[bool]: None reads as "not set".
    return False if value is None else _check_bool(where, value)


@dataclasses.dataclass(frozen=True)
class WarmupInput:
    """How Triton makes up one input of a warm-up request (Triton's ``ModelWarmup.Input``).

    Exactly one source may be set. Triton itself needs one; when none is set the input is
    sent as zeros (``zero_data``), the same as an input a `ModelWarmup` leaves out.

    Args:
        dtype: the input's dtype (``np.float32``, ``np.bytes_`` or ``object`` for bytes, ...);
            stored as ``np.dtype``. It must be the dtype of the model's input.
        shape: the shape of one sample, without the batch axis; every axis a length >= 0
            (no -1: the warm-up request has concrete sizes). Stored as a tuple.
        zero_data: send zeros (empty items for bytes).
        random_data: send random values (Triton sends bytes inputs as zero data).
        input_data_file: a file holding one sample, raw and row-major; bytes items each as a
            little-endian uint32 length then the bytes. The path is the user's: absolute, or
            relative to the current directory when the model is bound. Triton reads such files
            only from the model folder, so `Triton.bind` copies the file there.
    """

    dtype: DTypeLike
    shape: Sequence[int]
    zero_data: Optional[bool] = False
    random_data: Optional[bool] = False
    input_data_file: Optional[str] = None

    def __post_init__(self) -> None:
        set_ = object.__setattr__  # the dataclass is frozen; normalising happens only here
        set_(self, "dtype", _normalise_dtype(self.dtype, "WarmupInput"))
        set_(self, "shape", _check_sample_shape(self.shape))
        set_(self, "zero_data", _check_flag("WarmupInput.zero_data", self.zero_data))
        set_(self, "random_data", _check_flag("WarmupInput.random_data", self.random_data))
        path = self.input_data_file
        if path is not None:
            if not isinstance(path, (str, os.PathLike)) or not os.fspath(path):
                raise PyTritonBadParameterError(
                    f"WarmupInput.input_data_file must be a path to a file (or None), got {path!r}"
                )
            set_(self, "input_data_file", str(os.fspath(path)))
        chosen = [name for name in ("zero_data", "random_data") if getattr(self, name)]
        chosen += ["input_data_file"] if self.input_data_file is not None else []
        if len(chosen) > 1:
            raise PyTritonBadParameterError(
                "WarmupInput takes one of zero_data, random_data and input_data_file, got "
                + ", ".join(f"{name}={getattr(self, name)!r}" for name in chosen)
            )
        if not chosen:
            set_(self, "zero_data", True)


def _check_sample_shape(value: Any) -> tuple[int, ...]:
    allowed = "a non-empty sequence of integers >= 0 (one sample, no batch axis, no -1)"
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence) or not value:
        raise PyTritonBadParameterError(f"WarmupInput.shape must be {allowed}, got {value!r}")
    for dim in value:
        if not _is_int(dim) or dim < 0:
            raise PyTritonBadParameterError(f"WarmupInput.shape must be {allowed}, got {value!r} (bad axis {dim!r})")
    return tuple(int(dim) for dim in value)


_WARMUP_NAME = re.compile(r"[A-Za-z0-9_.-]+")


@dataclasses.dataclass(frozen=True, eq=False)
class ModelWarmup:
    """One kind of warm-up request, which Triton sends `count` times while it loads the model.

    Triton answers a model ready only after its warm-up requests went through the callable, so
    the lazy work of a first call (weights to a device, kernels compiled) is done before any
    user request arrives. The fields take the published order, ``ModelWarmup(name, batch_size,
    inputs, count)``; all have defaults here.

    Args:
        name: the name Triton logs for this warm-up (letters, digits, ``_``, ``-``, ``.``);
            distinct within a model.
        batch_size: the batch size of each request; 1 for a model without batching.
        inputs: input name -> either a `WarmupInput` (how Triton makes the data up) or a
            sample array (one sample without the batch axis, sent as it is; a pytriton form).
            Triton repeats the sample `batch_size` times. Inputs left out are sent as zeros
            (empty items for bytes) with every variable axis of length 1, except optional
            inputs, which are left out. ``None`` leaves every input out.
        count: how many times the request is sent.

    Example:
        ``ModelWarmup(name="short", batch_size=4, inputs={"x": WarmupInput(np.float32, (16,))}, count=2)``
    """

    name: str = "warmup"
    batch_size: int = 1
    inputs: Optional[Mapping[str, Union[WarmupInput, Any]]] = None
    count: int = 1

    def __post_init__(self) -> None:
        set_ = object.__setattr__  # the dataclass is frozen; normalising happens only here
        if not isinstance(self.name, str) or not _WARMUP_NAME.fullmatch(self.name):
            raise PyTritonBadParameterError(
                f"ModelWarmup.name must be a non-empty name of letters, digits, '_', '-' and '.', got {self.name!r}"
            )
        set_(self, "batch_size", _check_int(f"ModelWarmup({self.name!r}).batch_size", self.batch_size, 1))
        set_(self, "count", _check_int(f"ModelWarmup({self.name!r}).count", self.count, 1))
        if self.inputs is None:
            return
        if not isinstance(self.inputs, Mapping):
            raise PyTritonBadParameterError(
                f"ModelWarmup({self.name!r}).inputs must map input names to WarmupInput or sample arrays "
                f"(or be None), got {self.inputs!r}"
            )
        checked = {}
        for key, value in self.inputs.items():
            if not isinstance(key, str) or not key:
                raise PyTritonBadParameterError(
                    f"ModelWarmup({self.name!r}).inputs keys must be input names, got {key!r}"
                )
            checked[key] = value if isinstance(value, WarmupInput) else self._checked_sample(key, value)
        # A read-only copy: changing the caller's dict or arrays later must not change a frozen config.
        set_(self, "inputs", types.MappingProxyType(checked))

    def _checked_sample(self, key: str, value: Any) -> np.ndarray:
        array = np.array(value)
        if array.ndim == 0:
            raise PyTritonBadParameterError(
                f"ModelWarmup({self.name!r}).inputs[{key!r}] must be a WarmupInput or a sample array with at least "
                f"one axis (use np.array([value])), got {value!r}"
            )
        array.flags.writeable = False
        return array

    def __repr__(self) -> str:
        # Sample arrays show as their shape and dtype: a warm-up batch of data would swamp a log line.
        def _short(value: Any) -> str:
            return repr(value) if isinstance(value, WarmupInput) else f"<array {value.shape} {value.dtype}>"

        inputs = "None"
        if self.inputs is not None:
            inputs = "{" + ", ".join(f"{key!r}: {_short(value)}" for key, value in self.inputs.items()) + "}"
        return f"ModelWarmup(name={self.name!r}, batch_size={self.batch_size}, inputs={inputs}, count={self.count})"


_Config = TypeVar("_Config")


def rechecked(config: _Config) -> _Config:
    """A fresh copy of `config`, built again from its fields, nested configs included.

    Published code builds a config and then assigns its fields (``config.model_warmup = [...]``);
    an assignment runs no check. Building the copy runs every constructor check on the values as
    they are now, so a bad assigned value fails where the config is used, naming the field; the
    copy also keeps the bound model from changing when the caller's object changes later.
    """
    if not dataclasses.is_dataclass(config) or isinstance(config, type):
        return config
    fields = dataclasses.fields(config)
    return type(config)(**{f.name: _rechecked_value(getattr(config, f.name)) for f in fields if f.init})


def _rechecked_value(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return rechecked(value)
    if isinstance(value, dict):
        return {key: _rechecked_value(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_rechecked_value(item) for item in value)
    return value
