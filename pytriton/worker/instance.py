"""The interface of a served model instance, whichever process runs its callable.

`pytriton.worker.handler.InstanceHandler` runs the callable on a thread of the user's process;
`pytriton.worker.process_instance.ProcessInstance` in a worker process forked from it. The
bindings and the supervisor see both through this one interface.
"""

from __future__ import annotations

from typing import Optional, Protocol


class Instance(Protocol):
    """One model instance being served."""

    @property
    def proxy_pid(self) -> Optional[int]:
        """The pid of the stub process whose proxy greeted last (None before the first)."""

    def start(self) -> None:
        """Start serving; returns once the instance listens.

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
