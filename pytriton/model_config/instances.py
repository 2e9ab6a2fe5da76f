"""What the user declares about where a model's instances run: the device of each, and a setup step.

Pure data. A model served on several GPUs from one script wants one worker process per GPU
(``ModelConfig(process_instances=True, devices=[0, 1])``), and the model loaded in that process,
never in the user's: a process that initialised CUDA cannot fork children that use it. So the
callable is not built at `bind` but by an `InstanceSetup` that each worker process runs once,
after its fork and after its ``CUDA_VISIBLE_DEVICES`` names its one device; it learns where it
runs from the `InstancePlacement` it is given.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from typing import Any, Callable, List, Optional, Sequence, Tuple, Union

from pytriton.exceptions import PyTritonBadParameterError
from pytriton.model_config.common import _is_int

Device = Union[int, str]
"""A device as `ModelConfig.devices` lists it: a CUDA ordinal (``1``), or a GPU or MIG UUID
(``"GPU-5f1c..."``, ``"MIG-..."``) as ``CUDA_VISIBLE_DEVICES`` takes them."""


@dataclasses.dataclass(frozen=True)
class InstancePlacement:
    """Where one model instance runs: what an `InstanceSetup`'s factory is given.

    Attributes:
        model_name: the model the instance serves.
        model_version: its version.
        instance: the instance's number (0, 1, ...), as Triton numbers its instances.
        device: the device `ModelConfig.devices` gave this instance, as listed there; None when
            the model lists no devices.
        visible_devices: the ``CUDA_VISIBLE_DEVICES`` its worker process was started with (the
            one device it sees, so frameworks address it as ``"cuda"`` or ``"cuda:0"``); None
            when the model lists no devices and the process inherited yours.
    """

    model_name: str
    model_version: int
    instance: int
    device: Optional[Device] = None
    visible_devices: Optional[str] = None


@dataclasses.dataclass(frozen=True)
class InstanceSetup:
    """Build each instance's inference callable in its worker process, once, before it serves.

    Pass it to `Triton.bind` in place of the callable (or as entries of the list of callables),
    with ``ModelConfig(process_instances=True)``: each worker process calls ``factory`` with its
    `InstancePlacement` after the fork, and serves the callable it returns. A model loaded there
    is loaded onto the process's own device, and your process never touches CUDA. A worker
    process forked again after a crash runs the factory again. An exception of the factory, a
    result that is not a callable, or a factory still running after ``timeout_s`` fails the
    `bind`, naming the model and the instance.

    Args:
        factory: ``factory(placement) -> infer_func``; runs in the worker process.
        asynchronous: the callable it returns is a coroutine or async generator function. The
            model's configuration is written before the worker processes run their factories,
            so it must be said here; a factory that returns the other kind fails the `bind`.
        timeout_s: how long `bind` waits for each factory (a model's load can take minutes).
        continuous: the callable it returns is a ``@continuous`` step function (continuous
            batching); said here for the same reason as `asynchronous`.
    """

    factory: Callable[[InstancePlacement], Callable[..., Any]]
    asynchronous: bool = False
    timeout_s: float = 600.0
    continuous: bool = False

    def __post_init__(self) -> None:
        if not callable(self.factory):
            raise PyTritonBadParameterError(
                f"InstanceSetup.factory must be a callable that takes an InstancePlacement and returns the "
                f"inference callable, got {self.factory!r}"
            )
        if not isinstance(self.asynchronous, bool):
            raise PyTritonBadParameterError(
                f"InstanceSetup.asynchronous must be a bool (True or False), got {self.asynchronous!r}"
            )
        if not isinstance(self.continuous, bool):
            raise PyTritonBadParameterError(
                f"InstanceSetup.continuous must be a bool (True or False), got {self.continuous!r}"
            )
        timeout: Any = self.timeout_s
        if isinstance(timeout, bool) or not isinstance(timeout, numbers.Real) or not math.isfinite(timeout) or (
                timeout <= 0):
            raise PyTritonBadParameterError(
                f"InstanceSetup.timeout_s must be a positive number of seconds, got {timeout!r}"
            )
        object.__setattr__(self, "timeout_s", float(timeout))


def checked_devices(value: Any, process_instances: bool) -> Optional[Tuple[Device, ...]]:
    """`ModelConfig.devices` as a tuple, or None; a clear error for anything else.

    Raises:
        PyTritonBadParameterError: not a non-empty list of CUDA ordinals (ints >= 0) or UUID
            strings, or given without ``process_instances=True``.
    """
    if value is None:
        return None
    expected = "a non-empty list of CUDA device ordinals (ints >= 0) or GPU/MIG UUID strings"
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence) or not value:
        raise PyTritonBadParameterError(f"ModelConfig.devices must be {expected}, got {value!r}")
    devices: List[Device] = []
    device: Any
    for device in value:
        if _is_int(device) and device >= 0:
            devices.append(int(device))
        elif isinstance(device, str) and device.strip() and "," not in device:
            devices.append(device.strip())
        else:
            raise PyTritonBadParameterError(
                f"ModelConfig.devices must be {expected}; entry {device!r} of {value!r} is not"
            )
    if not process_instances:
        # Threads of one process share its CUDA context: only a process of its own can be given one device.
        raise PyTritonBadParameterError(
            f"ModelConfig.devices={value!r} puts each instance's worker process on a device of its own: it needs "
            "ModelConfig(process_instances=True)"
        )
    return tuple(devices)


def instance_devices(devices: Optional[Sequence[Device]], count: int) -> List[Optional[Device]]:
    """The device of each of `count` instances: the listed devices in turn (round robin); all None
    without devices."""
    if not devices:
        return [None] * count
    return [devices[index % len(devices)] for index in range(count)]
