"""How a stop tells the code inside tritonserver to refuse new work, and, on a second signal, to
give up the work in flight.

**The refusal** happens at Triton's front: a stop loads each model again under a configuration
that refuses (`refusing_config`): a model of pytriton's backend with no worker, whose every request
is answered at once with Triton's UNAVAILABLE (HTTP 503, gRPC UNAVAILABLE), which clients retry
elsewhere. Triton swaps a model it reloads only once the new one is ready, and the requests the
old one accepted (running, or waiting in its batcher's queue behind a busy instance) stay with
it until answered: so every request accepted before the refusal is answered, and every later one
is refused within milliseconds, whatever the instances are doing (a refusal decided where a batch
starts would wait behind them, and would refuse the queued requests too). Models with sequences
are not reloaded: the later requests of a sequence already begun are still answered.

**The flag**, one small file per server in its workspace, mapped read-only by pytriton's backend
and the proxy, whose first byte they read (a memory read, no message, no syscall):

- `REFUSING`, where a model could not be reloaded: its batches are refused where they start
  (the earlier mechanism, kept as the fallback; it refuses the queued requests too);
- `ABANDONED`, at a second signal: the waits for the workers' answers end within 0.1 s, each
  request in flight answered with the retryable `abandoned` error, so that its client hears
  something before the server ends.
"""

from __future__ import annotations

import json
import mmap
import os
from typing import Any, Dict, Optional

from pytriton.ipc.protocol import PARAM_REFUSE, PARAM_WORKER_PID

FLAG_BYTES = 8
"""The file's size (the backend's ``PYT_STOPPING_BYTES``): the flag is its first byte."""
LOWERED = 0
REFUSING = 1
"""The flag's value where a model's new batches are refused where they start (the backend's
``PYT_STOPPING_REFUSING``)."""
ABANDONED = 2
"""The flag's value once a second signal gives up the requests in flight (``PYT_STOPPING_ABANDONED``)."""

_DROPPED_FOR_REFUSAL = ("model_warmup", "response_cache", "instance_group", "runtime", "default_model_filename")
"""What the refusing configuration leaves out of the model's: warm-ups (refused, they would fail
the load), the response cache (a cached answer is no refusal), the instances (one, on the CPU,
answers in microseconds), and the Python backend's file names (pytriton's backend has none)."""


def refusal(model_name: str) -> str:
    """The error a refused request gets: retryable, and says so."""
    return (f"Model '{model_name}': the server is stopping and takes no new requests; send the request again "
            "(to another replica)")


def abandoned(model_name: str) -> str:
    """The error of a request in flight when the server stops at once (a second signal, a hung
    callable): retryable too."""
    return (f"Model '{model_name}': the server stopped at once, before this request was answered; send the request "
            "again (to another replica)")


def refusing_config(config: Dict[str, Any], backend: str, owner_pid: int) -> str:
    """The configuration (JSON, for Triton's load with a config override) that replaces a served
    model's at the refusal: the same name, versions, tensors, batching limit and transaction
    policy (so that a request is checked as before and a stream stays a stream), served by
    `backend` (``pytriton``: no worker, no stub; ``python``: the proxy, told to refuse) with one
    instance that refuses every request. `owner_pid`: the process that owns the server."""
    refusing = {key: value for key, value in config.items() if key not in _DROPPED_FOR_REFUSAL}
    parameters = dict(refusing.get("parameters") or {})
    parameters[PARAM_REFUSE] = {"string_value": "1"}
    parameters[PARAM_WORKER_PID] = {"string_value": str(owner_pid)}
    refusing["parameters"] = parameters
    refusing["backend"] = backend
    if isinstance(refusing.get("dynamic_batching"), dict):  # a refusal waits for no batch to fill
        refusing["dynamic_batching"] = {**refusing["dynamic_batching"], "max_queue_delay_microseconds": 0}
    refusing["instance_group"] = [{"kind": "KIND_CPU", "count": 1}]
    return json.dumps(refusing)


def create_flag(path: os.PathLike[str]) -> None:
    """Write the flag lowered (a start reuses the file of a workspace the user chose), in place:
    a file truncated under a mapping would fault its reader."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        os.pwrite(fd, bytes(FLAG_BYTES), 0)
    finally:
        os.close(fd)


def raise_flag(path: os.PathLike[str], value: int = REFUSING) -> None:
    """Set the flag to `value`: every mapping sees it at once (a shared page of the page cache)."""
    fd = os.open(path, os.O_WRONLY)
    try:
        os.pwrite(fd, bytes((value,)), 0)
    finally:
        os.close(fd)


class FlagView:
    """The flag as the proxy reads it, mapped once at the model's initialize."""

    def __init__(self, mapping: mmap.mmap) -> None:
        self._mapping = mapping

    @classmethod
    def open(cls, path: Optional[str]) -> Optional[FlagView]:
        """Map the flag at `path`; None without a path or a readable file (then nothing is refused)."""
        if not path:
            return None
        try:
            with open(path, "rb") as file:
                return cls(mmap.mmap(file.fileno(), FLAG_BYTES, prot=mmap.PROT_READ))
        except (OSError, ValueError):
            return None

    def raised(self) -> bool:
        """Whether new batches are refused where they start (`REFUSING`, or `ABANDONED`)."""
        return self._mapping[0] != LOWERED

    def abandoned(self) -> bool:
        """Whether the requests in flight are given up (`ABANDONED`)."""
        return self._mapping[0] == ABANDONED
