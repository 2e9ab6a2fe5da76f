"""The published `Triton` facade: bind callables, run or serve the real tritonserver, stop cleanly.

``from pytriton.triton import Triton, TritonConfig`` as in the published PyTriton; the code is in
``pytriton.facade`` (its setup flow, step by step with the module of each, in
docs/architecture.md). `RemoteTriton` binds callables the same way to a tritonserver that
something else started (also published as ``pytriton.remote.RemoteTriton``); `TritonBase`, the
base class of both, documents the methods they share. The security and lifecycle names below
are the published module's too.
"""

from pytriton.facade.base import TritonBase
from pytriton.facade.remote import RemoteTriton
from pytriton.facade.triton import Triton
from pytriton.server.config import TritonConfig
from pytriton.server.lifecycle import DefaultTritonLifecyclePolicy, TritonLifecyclePolicy, VertextAILifecyclePolicy
from pytriton.server.security import (
    DEFAULT_PROTECTED_ENDPOINTS,
    TRITON_ACCESS_HEADER,
    VALID_TRITON_ENDPOINTS,
    TritonSecurityConfig,
)

__all__ = [
    "DEFAULT_PROTECTED_ENDPOINTS", "TRITON_ACCESS_HEADER", "VALID_TRITON_ENDPOINTS", "Triton", "TritonConfig",
    "RemoteTriton", "DefaultTritonLifecyclePolicy", "TritonLifecyclePolicy", "TritonSecurityConfig",
    "VertextAILifecyclePolicy", "TritonBase",
]
