"""What the user declares — tensors and per-model options; pure data, no I/O.

Flow: these declarations -> `pytriton.repository` (config.pbtxt) -> `pytriton.server` -> `pytriton.triton`.
"""

from pytriton.model_config.common import (
    DeviceKind,
    DynamicBatcher,
    ModelWarmup,
    QueuePolicy,
    SequenceBatcher,
    TimeoutAction,
    WarmupInput,
)
from pytriton.model_config.ensemble import EnsembleStep
from pytriton.model_config.instances import InstancePlacement, InstanceSetup
from pytriton.model_config.model_config import ModelConfig
from pytriton.model_config.tensor import Tensor

__all__ = [
    "DeviceKind",
    "DynamicBatcher",
    "EnsembleStep",
    "InstancePlacement",
    "InstanceSetup",
    "ModelConfig",
    "ModelWarmup",
    "QueuePolicy",
    "SequenceBatcher",
    "Tensor",
    "TimeoutAction",
    "WarmupInput",
]
