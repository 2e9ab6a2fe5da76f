"""What the user declares — how Triton should schedule and serve one model.

`ModelConfig` is the per-model part of a `Triton.bind` call: batching on or off, the largest
batch, the `DynamicBatcher`, the response cache and decoupled (streaming) responses. It checks
the combinations tritonserver would refuse at load time, so the error points at the user's line.
Its fields may be assigned after construction, as in the published PyTriton; `Triton.bind` checks
the config again (`rechecked`), so a bad assigned value still gets an error naming the field.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import warnings
from typing import Any, Optional, Sequence, Tuple, Union

import numpy as np

from pytriton.exceptions import PyTritonBadParameterError
from pytriton.model_config.common import DynamicBatcher, ModelWarmup, SequenceBatcher, _check_bool, _check_int
from pytriton.model_config.instances import Device, checked_devices


@dataclasses.dataclass
class ModelConfig:
    """The Triton-side options of one model.

    Args:
        batching: whether requests carry a leading batch axis that Triton may merge across requests.
            When False the model is served with ``max_batch_size: 0`` and no dynamic batcher.
        max_batch_size: the largest batch Triton hands to the callable; >= 1 when batching
            (ignored otherwise).
        batcher: the `DynamicBatcher` options (used only when batching), or a `SequenceBatcher`
            for a stateful model whose requests belong to sequences (with or without batching).
        response_cache: let Triton answer repeated requests from its cache; needs
            ``TritonConfig(response_cache_byte_size=...)`` and cannot be combined with ``decoupled``.
        decoupled: the callable may send any number of responses per request (streaming).
        model_warmup: `ModelWarmup` requests Triton sends through the callable while loading the
            model, before reporting it ready: a list of them (one `ModelWarmup` alone is taken
            too); stored as a tuple, and None (the default) when there is none.
        max_restarts: how many times pytriton restarts the model after one of its instances'
            stub processes died (killed, crashed) within `restart_window_s`; one more death in
            that window gives the model up: the server stops and `Triton.serve()` raises
            `PyTritonModelRestartLimitError`. 0 never restarts.
        restart_window_s: the sliding window, in seconds, that `max_restarts` counts in.
        isolate_failures: when the callable raises on a batch of several requests, call it again
            on halves of the batch (recursively) so that only the requests that fail on their own
            get the error; the callable must be safe to call twice on the same requests. Not for
            decoupled or async models.
        execution_timeout_s: seconds a call of the callable may take (None: no limit). A call
            still running then is abandoned: its requesters get an error and the instance goes
            on serving on a fresh thread. Not for decoupled or async models.
        hang_timeout_s: seconds after which a batch still in the callable counts as hung (None:
            never; streams count until their last response). A hung callable in a worker process
            (``process_instances``) is dumped (its stack goes to the log) and killed, and a fresh
            process serves on; one on a thread of your process cannot be freed, so its stack is
            logged and the server stops: readiness and liveness fail and `serve()` raises
            `PyTritonModelHangError`, so the orchestrator restarts the process. Unlike
            ``execution_timeout_s``, which abandons the call and serves on, this is for callables
            that hold what the next calls need (a lock, a wedged CUDA call).
        process_instances: run each model instance in a worker process forked from yours,
            instead of a thread of your process. Threads share one GIL, so a callable that
            spends its time in Python code serves one batch at a time however many instances
            it has; processes run on as many cores as there are instances. The callable and
            what it closes over reach the process by fork (nothing is pickled), but each
            process has its own copy: state the callable changes is not seen by your process
            or the other instances. Refused at `bind` once CUDA is initialised in your process
            (a forked child cannot use it). Each process costs its memory and a fork at start.
            To load the model in each process instead (on its own GPU), bind an
            `InstanceSetup` in place of the callable.
        devices: the GPU of each process instance (needs ``process_instances=True``): CUDA
            ordinals as your process counts them (``[0, 1]``) or GPU/MIG UUIDs. Each worker
            process starts with ``CUDA_VISIBLE_DEVICES`` naming only its device, so its code
            addresses it as ``"cuda"``. A single callable (or `InstanceSetup`) bound with
            devices is served by one instance per listed device; a list of callables keeps one
            instance per callable, placed on the listed devices in turn. None (the default):
            each process sees what yours sees.
        warmup: deprecated spelling of `model_warmup` (an earlier pytriton name); warns, moves
            its value to `model_warmup` and reads back as None.
    """

    batching: bool = True
    max_batch_size: int = 4
    batcher: Union[DynamicBatcher, SequenceBatcher] = dataclasses.field(default_factory=DynamicBatcher)
    response_cache: bool = False
    decoupled: bool = False
    model_warmup: Optional[Union[ModelWarmup, Sequence[ModelWarmup]]] = None
    max_restarts: int = 5
    restart_window_s: float = 300.0
    isolate_failures: bool = False
    execution_timeout_s: Optional[float] = None
    process_instances: bool = False
    hang_timeout_s: Optional[float] = None
    devices: Optional[Sequence[Device]] = None
    # Last, so positional calls of the fields above keep working; out of repr and eq because it
    # always reads back as None (kept None so that dataclasses.replace() does not pass it again).
    warmup: Optional[Union[ModelWarmup, Sequence[ModelWarmup]]] = dataclasses.field(
        default=None, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        set_ = object.__setattr__  # normalising is not an assignment a user made
        batching = _check_bool("ModelConfig.batching", self.batching)
        set_(self, "batching", batching)
        if batching and self.max_batch_size == 0 and type(self.max_batch_size) is int:
            raise PyTritonBadParameterError(
                "ModelConfig.max_batch_size must be an integer >= 1, got 0; for a model that takes no batches "
                "(Triton's max_batch_size 0) write ModelConfig(batching=False)"
            )
        set_(
            self, "max_batch_size", _check_int("ModelConfig.max_batch_size", self.max_batch_size, 1 if batching else 0)
        )
        if not isinstance(self.batcher, (DynamicBatcher, SequenceBatcher)):
            raise PyTritonBadParameterError(
                f"ModelConfig.batcher must be a DynamicBatcher or a SequenceBatcher, got {self.batcher!r}"
            )
        set_(self, "response_cache", _check_bool("ModelConfig.response_cache", self.response_cache))
        set_(self, "decoupled", _check_bool("ModelConfig.decoupled", self.decoupled))
        set_(self, "model_warmup", self._checked_warmups())
        set_(self, "warmup", None)
        set_(self, "max_restarts", _check_int("ModelConfig.max_restarts", self.max_restarts, 0))
        window = self.restart_window_s
        if isinstance(window, bool) or not isinstance(window, (int, float)) or not window > 0:
            raise PyTritonBadParameterError(
                f"ModelConfig.restart_window_s must be a number of seconds > 0, got {window!r}"
            )
        set_(self, "restart_window_s", float(window))
        if self.response_cache and self.decoupled:
            # tritonserver refuses to load such a model; say so before it gets that far.
            raise PyTritonBadParameterError(
                "ModelConfig.response_cache=True cannot be combined with ModelConfig.decoupled=True: "
                "Triton's response cache does not support decoupled models"
            )
        set_(self, "isolate_failures", _check_bool("ModelConfig.isolate_failures", self.isolate_failures))
        set_(self, "execution_timeout_s", _check_timeout_s(self.execution_timeout_s, "execution_timeout_s"))
        set_(self, "process_instances", _check_bool("ModelConfig.process_instances", self.process_instances))
        set_(self, "hang_timeout_s", _check_timeout_s(self.hang_timeout_s, "hang_timeout_s"))
        set_(self, "devices", checked_devices(self.devices, self.process_instances))
        for name, on in (("isolate_failures", self.isolate_failures),
                         ("execution_timeout_s", self.execution_timeout_s is not None)):
            if on and self.decoupled:
                # A stream's requesters may already hold some of their responses: neither a retry
                # of part of the batch nor a timeout of the whole stream has a meaning to offer.
                raise PyTritonBadParameterError(
                    f"ModelConfig.{name}={getattr(self, name)!r} cannot be combined with ModelConfig.decoupled=True: "
                    "it applies only to callables that return one response per request"
                )
        if isinstance(self.batcher, SequenceBatcher):
            if self.batcher.strategy == "oldest" and not batching:
                raise PyTritonBadParameterError(
                    "ModelConfig.batcher=SequenceBatcher(strategy='oldest') batches requests of several sequences: "
                    "it needs batching=True (or use strategy='direct')"
                )
            if self.isolate_failures:
                # Calling the callable again on half a batch would run a sequence's step twice.
                raise PyTritonBadParameterError(
                    "ModelConfig.isolate_failures=True cannot be combined with a SequenceBatcher: retrying part of "
                    "a batch would apply a stateful sequence's step twice"
                )
        if batching:
            for size in self.batcher.preferred_batch_size or ():
                if size > self.max_batch_size:
                    raise PyTritonBadParameterError(
                        f"ModelConfig.batcher.preferred_batch_size entries must be <= max_batch_size "
                        f"({self.max_batch_size}), got {size}"
                    )


    @property
    def triton_max_batch_size(self) -> int:
        """Triton's ``max_batch_size`` for this model: `max_batch_size` when batching, 0 when not.

        0 tells Triton the tensors have no batch axis; it is what ``config.pbtxt`` and an ensemble
        say, and ``triton_max_batch_size or 1`` is the most requests one call of the callable gets.
        """
        return self.max_batch_size if self.batching else 0

    def _checked_warmups(self) -> Optional[Tuple[ModelWarmup, ...]]:
        field, value = "model_warmup", self.model_warmup
        if self.warmup is not None:
            if self.model_warmup is not None:
                raise PyTritonBadParameterError(
                    "ModelConfig got both model_warmup and its deprecated alias warmup; give only model_warmup"
                )
            # stacklevel 4: this method, __post_init__, the generated __init__, then the user's line.
            warnings.warn(
                "ModelConfig(warmup=...) is deprecated; use ModelConfig(model_warmup=...)",
                DeprecationWarning,
                stacklevel=4,
            )
            field, value = "warmup", self.warmup
        if value is None:
            return None
        warmups: Any = (value,) if isinstance(value, ModelWarmup) else value
        if isinstance(warmups, (str, bytes)) or not isinstance(warmups, Sequence) or not all(
            isinstance(item, ModelWarmup) for item in warmups
        ):
            raise PyTritonBadParameterError(
                f"ModelConfig.{field} must be a list of ModelWarmup (or one ModelWarmup), got {value!r}"
            )
        names = [item.name for item in warmups]
        if len(set(names)) != len(names):
            raise PyTritonBadParameterError(f"ModelConfig.{field} entries need distinct names, got {names!r}")
        return tuple(warmups)


def _check_timeout_s(value: Any, name: str) -> Optional[float]:
    """A time limit field as a float, or None; a clear error for anything but a positive finite number."""
    if value is None:
        return None
    is_number = isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_))
    if not is_number or not math.isfinite(value) or value <= 0:
        raise PyTritonBadParameterError(
            f"ModelConfig.{name} must be None (no limit) or a positive number of seconds, got {value!r}"
        )
    return float(value)
