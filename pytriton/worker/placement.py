"""Where a process instance runs, and its setup step: the device its worker process sees, and the
callable an `InstanceSetup` builds there.

Step of the setup flow: `pytriton.facade.binding` -> `pytriton.worker.process_instance` (forks) ->
here, in the child, before the handler starts. The parent works out each instance's device and
the ``CUDA_VISIBLE_DEVICES`` its child gets (`visible_devices`, at `bind`, so a device that is
not there fails the `bind`); the child sets it first thing after the fork, before any of its code
can initialise CUDA, and then runs the setup (`set_up`), which checks what the factory returned
as `bind` checks a callable it is given.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, List, Optional, Sequence, Union

from pytriton.exceptions import PyTritonBadParameterError, PyTritonModelConfigError
from pytriton.model_config.instances import Device, InstancePlacement, InstanceSetup, instance_devices
from pytriton.repository.warmup import LocalWarmup
from pytriton.worker.context import TritonContext
from pytriton.worker.continuous import is_continuous
from pytriton.worker.handler import check_callables, is_async_callable
from pytriton.worker.warmup import run_local_warmups

logger = logging.getLogger("pytriton.worker")

CUDA_VISIBLE_DEVICES = "CUDA_VISIBLE_DEVICES"

Entry = Union[Callable[..., Any], InstanceSetup]
"""What `bind` takes for one instance: the inference callable, or the setup that builds it."""


def visible_devices(model_name: str, device: Optional[Device], inherited: Optional[str]) -> Optional[str]:
    """The ``CUDA_VISIBLE_DEVICES`` of the worker process placed on `device` (None: leave it as inherited).

    An ordinal counts the devices this process sees: when it runs with ``CUDA_VISIBLE_DEVICES``
    set (`inherited`), ordinal 1 is the second device listed there, as torch's ``cuda:1`` would
    be in this process. A UUID is passed on as it is.

    Raises:
        PyTritonBadParameterError: the ordinal is past the devices `inherited` lists.
    """
    if device is None:
        return None
    if isinstance(device, str) or inherited is None:
        return str(device)
    listed = [entry.strip() for entry in inherited.split(",") if entry.strip()]
    if device >= len(listed):
        raise PyTritonBadParameterError(
            f"model '{model_name}': ModelConfig.devices lists device {device}, but this process sees "
            f"{len(listed)} device(s) ({CUDA_VISIBLE_DEVICES}={inherited!r}); list ordinals below {len(listed)}"
        )
    return listed[device]


def instance_entries(model_name: str, infer_func: Any, config: Any) -> List[Any]:
    """The entry of each instance of a model, from `bind`'s `infer_func`: a list gives one instance
    per entry; a single entry is repeated once per listed device (once without devices).

    Raises:
        PyTritonBadParameterError: an entry is neither a callable nor an `InstanceSetup`, or an
            `InstanceSetup` is given for instances that are not worker processes.
    """
    listed = isinstance(infer_func, (list, tuple))
    entries = list(infer_func) if listed else [infer_func]
    if not entries or not all(callable(entry) or isinstance(entry, InstanceSetup) for entry in entries):
        raise PyTritonBadParameterError(f"infer_func of model '{model_name}' must be a callable (or an InstanceSetup) "
                                        f"or a non-empty list of them, got {infer_func!r}")
    if any(isinstance(entry, InstanceSetup) for entry in entries) and not config.process_instances:
        raise PyTritonBadParameterError(
            f"model '{model_name}': an InstanceSetup runs in each instance's worker process; bind it with "
            "ModelConfig(process_instances=True) (for instances on threads, build the callables before bind)"
        )
    if config.devices and not listed:
        return entries * len(config.devices)
    return entries


def plain_callables(entries: Sequence[Entry]) -> List[Callable[..., Any]]:
    """The entries that are callables already (not built by an `InstanceSetup`)."""
    return [entry for entry in entries if not isinstance(entry, InstanceSetup)]


def is_async_entry(entry: Entry) -> bool:
    """Whether the instance's callable is a coroutine or async generator function (an
    `InstanceSetup` says so itself)."""
    return entry.asynchronous if isinstance(entry, InstanceSetup) else is_async_callable(entry)


def placement_of(context: TritonContext, instance: int, inherited: Optional[str]) -> InstancePlacement:
    """Where instance `instance` of the model runs: the model's devices are taken in turn.

    Raises:
        PyTritonBadParameterError: its listed ordinal is not a device this process sees.
    """
    device = instance_devices(context.config.devices, instance + 1)[instance]
    return InstancePlacement(context.model_name, context.model_version, instance, device,
                             visible_devices(context.model_name, device, inherited))


def set_up(setup: InstanceSetup, placement: InstancePlacement, context: TritonContext,
           warmups: Sequence[LocalWarmup]) -> Callable[..., Any]:
    """Run `setup` in the worker process and check what it built; the callable to serve.

    The checks are those `bind` makes of a callable it is given, plus the kind the setup
    declared; pytriton's own warm-ups of the model run on it here, as `bind` runs them on
    callables before it forks.

    Raises:
        PyTritonModelConfigError: the factory raised, returned something not callable, or a
            callable of the other kind than declared; a warm-up failed.
    """
    where = f"model '{context.model_name}' instance {placement.instance}"
    name = getattr(setup.factory, "__name__", type(setup.factory).__name__)
    logger.debug("%s: running its setup %s on device %s", where, name, placement.visible_devices)
    try:
        func = setup.factory(placement)
    except Exception as exc:
        raise PyTritonModelConfigError(f"{where}: its setup {name} raised {type(exc).__name__}: {exc}") from exc
    if not callable(func):
        raise PyTritonModelConfigError(
            f"{where}: its setup {name} returned {func!r}; it must return the inference callable"
        )
    if is_async_callable(func) != setup.asynchronous:
        kind = "an async" if is_async_callable(func) else "a plain (not async)"
        raise PyTritonModelConfigError(
            f"{where}: its setup {name} returned {kind} callable, but was declared with "
            f"InstanceSetup(asynchronous={setup.asynchronous}); declare "
            f"InstanceSetup({name}, asynchronous={not setup.asynchronous})"
        )
    if is_continuous(func) != setup.continuous:
        raise PyTritonModelConfigError(
            f"{where}: its setup {name} returned {'a' if is_continuous(func) else 'no'} @continuous step function, "
            f"but was declared with InstanceSetup(continuous={setup.continuous}); declare "
            f"InstanceSetup({name}, continuous={not setup.continuous})"
        )
    check_callables(context.model_name, [func], bool(context.config.decoupled), context.input_names)
    run_local_warmups(context, [func], warmups)
    return func
