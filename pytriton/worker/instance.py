"""A served model instance: what `bind` decides for it (`InstanceSpec`), and the interface it
offers, whichever process runs its callable.

`pytriton.worker.handler.InstanceHandler` runs the callable on a thread of the user's process;
`pytriton.worker.process_instance.ProcessInstance` in a worker process forked from it. The
bindings build one `InstanceSpec` per instance and hand it to either; the supervisor sees both
through the one `Instance` interface.
"""

from __future__ import annotations

import ctypes
import dataclasses
import mmap
from typing import Any, Callable, Optional, Protocol, Sequence

from pytriton.repository.warmup import LocalWarmup
from pytriton.worker.context import TritonContext
from pytriton.worker.outcomes import WholeBatch


def _no_whole(func: Any) -> Optional[WholeBatch]:
    return None


@dataclasses.dataclass(frozen=True)
class InstanceSpec:
    """One model instance as `bind` decided it: what it serves, where it listens, how it calls.

    Read by every layer that serves the instance: the handler (`InstanceHandler`), the process
    that runs it (`ProcessInstance`) and the steps of each batch (`pytriton.worker.batches`).

    Attributes:
        context: the model served (name, version, tensors, config).
        infer_func: the user's callable for this instance, or the `InstanceSetup` that builds it
            in its worker process.
        endpoint: the ZeroMQ control endpoint to bind (`protocol.instance_endpoint`); the data
            socket goes beside it.
        instance: the instance number.
        shm_prefix: prefix of this model's shared-memory segments.
        strict: validate output dtypes and shapes.
        asynchronous: the callable is a coroutine or async generator function: an asyncio loop
            serves it, and the proxy relays, so batches may overlap.
        pipelined: the model's callables are all plain, so the handler's proxy waits for each
            answer before it sends another batch: large outputs then travel in an arena. False
            when the proxies relay (some callable of the model is async), so their batches
            overlap: outputs then go inline.
        whole: `infer_func` taken apart when it is a plain ``@batch`` function
            (`pytriton.decorating.shaping.whole_batch`): its batches may skip the request objects.
        warmups: pytriton's own warm-ups of the model, run in the worker process on what an
            `InstanceSetup` built there (`bind` runs them on other callables before it forks).
        whole_of: takes a callable an `InstanceSetup` built apart as `whole` is (the decorators
            know how; the worker does not import them).
    """

    context: TritonContext
    infer_func: Any
    endpoint: str
    instance: int
    shm_prefix: str
    strict: bool = False
    asynchronous: bool = False
    pipelined: bool = True
    whole: Optional[WholeBatch] = None
    warmups: Sequence[LocalWarmup] = ()
    whole_of: Callable[[Any], Optional[WholeBatch]] = _no_whole


class Instance(Protocol):
    """One model instance being served."""

    @property
    def proxy_pid(self) -> Optional[int]:
        """The pid of the stub process whose proxy greeted last (None before the first)."""

    def launch(self) -> None:
        """Begin starting, without waiting (a worker process runs its setup meanwhile); `start` waits."""

    def start(self) -> None:
        """Start serving (unless `launch` began it); returns once the instance listens.

        Raises:
            PyTritonModelConfigError: the callable cannot be served as configured.
        """

    def is_serving(self) -> bool:
        """Whether the instance still serves (it stops only when told to)."""

    def idle(self) -> bool:
        """Whether no batch is being served (no callable running, no stream open) right now."""

    def busy_for(self, now: float) -> float:
        """How long (seconds, at `time.monotonic` `now`) the oldest batch being served has run; 0.0 when idle."""

    def stuck_stack(self) -> str:
        """Where a hung callable is: its stack, or where it was written (for the log)."""

    def free_stuck(self) -> bool:
        """End a hung callable if it can be ended (a worker process is killed and forked anew)."""

    def end_streams(self) -> None:
        """Cut the streams in flight short: the server is stopping."""

    def stop(self, timeout_s: float = 5.0) -> bool:
        """Stop serving and release sockets and shared memory; False if a callable still runs."""


class BusySince:
    """When the oldest batch an instance serves began (`time.monotonic`; 0.0 while it serves none).

    The loops set it as batches begin and end; whether the instance is idle and how long its
    oldest batch has run follow from it. It lives in an anonymous shared mapping, so a worker
    process forked from the user's writes it and the parent reads it.
    """

    __slots__ = ("_map", "_since")

    def __init__(self) -> None:
        self._map = mmap.mmap(-1, ctypes.sizeof(ctypes.c_double))
        self._since = ctypes.c_double.from_buffer(self._map)

    @property
    def value(self) -> float:
        return float(self._since.value)

    @value.setter
    def value(self, started: float) -> None:
        self._since.value = started

    def idle(self) -> bool:
        """Whether no batch is being served."""
        return self._since.value == 0.0

    def busy_for(self, now: float) -> float:
        """How long the oldest batch has been served at `now` (0.0 when idle)."""
        since = self._since.value
        return now - since if since else 0.0
