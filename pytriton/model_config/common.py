"""Setup step 1: what the user declares — the batching and queueing knobs of a model.

Pure data with no I/O. Every class is a small frozen dataclass that checks itself in
``__post_init__``, so a wrong value fails on the line where the user wrote it, with a message
naming the field, the value and what is allowed, instead of later as a tritonserver load error.
"""

from __future__ import annotations

import dataclasses
import enum
import numbers
from typing import Any, Sequence

import numpy as np

from pytriton.exceptions import PyTritonBadParameterError


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


@dataclasses.dataclass(frozen=True)
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


@dataclasses.dataclass(frozen=True)
class DynamicBatcher:
    """How Triton groups requests into batches before calling the model (Triton's ``dynamic_batching``).

    Args:
        max_queue_delay_microseconds: how long a request may wait for others to fill a batch.
        preferred_batch_size: batch sizes Triton tries to form; stored as a tuple so the config stays
            immutable. Each must be >= 1 (and, checked by `ModelConfig`, <= its ``max_batch_size``).
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
        set_ = object.__setattr__  # the dataclass is frozen; normalising happens only here
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

    def __hash__(self) -> int:
        # Written by hand because the per-level policies are a dict; a frozen config stays hashable.
        policies = frozenset((self.priority_queue_policy or {}).items())
        return hash(
            (
                self.max_queue_delay_microseconds,
                self.preferred_batch_size,
                self.preserve_ordering,
                self.priority_levels,
                self.default_priority_level,
                self.default_queue_policy,
                policies,
            )
        )

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
        # A private copy: mutating the caller's dict later must not change a frozen config.
        return checked
