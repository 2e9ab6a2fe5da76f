"""Setup step 1: what the user declares — how Triton should schedule and serve one model.

`ModelConfig` is the per-model part of a `Triton.bind` call: batching on or off, the largest
batch, the `DynamicBatcher`, the response cache and decoupled (streaming) responses. It checks
the combinations tritonserver would refuse at load time, so the error points at the user's line.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence, Tuple, Union

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
    """

    batching: bool = True
    max_batch_size: int = 4
    batcher: DynamicBatcher = dataclasses.field(default_factory=DynamicBatcher)
    response_cache: bool = False
    decoupled: bool = False
    warmup: Union[ModelWarmup, Sequence[ModelWarmup]] = ()

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
        if self.response_cache and self.decoupled:
            # tritonserver refuses to load such a model; say so before it gets that far.
            raise PyTritonBadParameterError(
                "ModelConfig.response_cache=True cannot be combined with ModelConfig.decoupled=True: "
                "Triton's response cache does not support decoupled models"
            )
        if batching:
            for size in self.batcher.preferred_batch_size or ():
                if size > self.max_batch_size:
                    raise PyTritonBadParameterError(
                        f"ModelConfig.batcher.preferred_batch_size entries must be <= max_batch_size "
                        f"({self.max_batch_size}), got {size}"
                    )
