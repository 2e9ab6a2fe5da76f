"""Setup step 1: what the user declares — how Triton should schedule and serve one model.

`ModelConfig` is the per-model part of a `Triton.bind` call: batching on or off, the largest
batch, the `DynamicBatcher`, the response cache and decoupled (streaming) responses. It checks
the combinations tritonserver would refuse at load time, so the error points at the user's line.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from typing import Any, Optional, Sequence, Tuple, Union

import numpy as np

from pytriton.exceptions import PyTritonBadParameterError
from pytriton.model_config.common import DynamicBatcher, _check_bool, _check_int
from pytriton.model_config.warmup import ModelWarmup


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """The Triton-side options of one model.

    Args:
        batching: whether requests carry a leading batch axis that Triton may merge across requests.
            When False the model is served with ``max_batch_size: 0`` and no dynamic batcher.
        max_batch_size: the largest batch Triton hands to the callable; >= 1 when batching
            (ignored otherwise).
        batcher: the `DynamicBatcher` options, used only when batching.
        response_cache: let Triton answer repeated requests from its cache; needs
            ``TritonConfig(response_cache_byte_size=...)`` and cannot be combined with ``decoupled``.
        decoupled: the callable may send any number of responses per request (streaming).
        warmup: `ModelWarmup` requests Triton sends through the callable while loading the
            model, before reporting it ready (one `ModelWarmup` or a sequence of them).
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
    """

    batching: bool = True
    max_batch_size: int = 4
    batcher: DynamicBatcher = dataclasses.field(default_factory=DynamicBatcher)
    response_cache: bool = False
    decoupled: bool = False
    warmup: Union[ModelWarmup, Sequence[ModelWarmup]] = ()
    max_restarts: int = 5
    restart_window_s: float = 300.0
    isolate_failures: bool = False
    execution_timeout_s: Optional[float] = None

    @property
    def warmups(self) -> Tuple[ModelWarmup, ...]:
        """`warmup` as a tuple (which is what `__post_init__` stores)."""
        return tuple(self.warmup) if not isinstance(self.warmup, ModelWarmup) else (self.warmup,)

    def __post_init__(self) -> None:
        set_ = object.__setattr__  # the dataclass is frozen; normalising happens only here
        batching = _check_bool("ModelConfig.batching", self.batching)
        set_(self, "batching", batching)
        set_(
            self, "max_batch_size", _check_int("ModelConfig.max_batch_size", self.max_batch_size, 1 if batching else 0)
        )
        if not isinstance(self.batcher, DynamicBatcher):
            raise PyTritonBadParameterError(f"ModelConfig.batcher must be a DynamicBatcher, got {self.batcher!r}")
        set_(self, "response_cache", _check_bool("ModelConfig.response_cache", self.response_cache))
        set_(self, "decoupled", _check_bool("ModelConfig.decoupled", self.decoupled))
        warmup: Any = (self.warmup,) if isinstance(self.warmup, ModelWarmup) else self.warmup
        if isinstance(warmup, (str, bytes)) or not isinstance(warmup, Sequence) or not all(
            isinstance(item, ModelWarmup) for item in warmup
        ):
            raise PyTritonBadParameterError(
                f"ModelConfig.warmup must be a ModelWarmup or a sequence of them, got {self.warmup!r}"
            )
        names = [item.name for item in warmup]
        if len(set(names)) != len(names):
            raise PyTritonBadParameterError(f"ModelConfig.warmup entries need distinct names, got {names!r}")
        set_(self, "warmup", tuple(warmup))
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
        set_(self, "execution_timeout_s", _check_timeout_s(self.execution_timeout_s))
        for name, on in (("isolate_failures", self.isolate_failures),
                         ("execution_timeout_s", self.execution_timeout_s is not None)):
            if on and self.decoupled:
                # A stream's requesters may already hold some of their responses: neither a retry
                # of part of the batch nor a timeout of the whole stream has a meaning to offer.
                raise PyTritonBadParameterError(
                    f"ModelConfig.{name}={getattr(self, name)!r} cannot be combined with ModelConfig.decoupled=True: "
                    "it applies only to callables that return one response per request"
                )
        if batching:
            for size in self.batcher.preferred_batch_size or ():
                if size > self.max_batch_size:
                    raise PyTritonBadParameterError(
                        f"ModelConfig.batcher.preferred_batch_size entries must be <= max_batch_size "
                        f"({self.max_batch_size}), got {size}"
                    )


def _check_timeout_s(value: Any) -> Optional[float]:
    """`execution_timeout_s` as a float, or None; a clear error for anything but a positive finite number."""
    if value is None:
        return None
    is_number = isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_))
    if not is_number or not math.isfinite(value) or value <= 0:
        raise PyTritonBadParameterError(
            f"ModelConfig.execution_timeout_s must be None (no limit) or a positive number of seconds, got {value!r}"
        )
    return float(value)
