"""The server's stopping flag: how a stop tells the code inside tritonserver to refuse new work.

One small file per server, in its workspace. The owner raises it when a stop begins (after
`TritonConfig`'s ``drain_serving_s``); pytriton's backend and the proxy map it read-only and look
at its first byte before each batch: a batch that reaches a model after that is answered at once
with Triton's UNAVAILABLE (HTTP 503, gRPC UNAVAILABLE), which clients retry elsewhere, while the
batches already with the workers finish. Models with sequences are exempt: the later requests of
a sequence already begun are still answered. A memory read per batch, no message, no syscall.
"""

from __future__ import annotations

import mmap
import os
from typing import Optional

FLAG_BYTES = 8
"""The file's size (the backend's ``PYT_STOPPING_BYTES``): the flag is its first byte."""


def refusal(model_name: str) -> str:
    """The error a refused request gets: retryable, and says so."""
    return (f"Model '{model_name}': the server is stopping and takes no new requests; send the request again "
            "(to another replica)")


def create_flag(path: os.PathLike[str]) -> None:
    """Write the flag lowered (a start reuses the file of a workspace the user chose), in place:
    a file truncated under a mapping would fault its reader."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        os.pwrite(fd, bytes(FLAG_BYTES), 0)
    finally:
        os.close(fd)


def raise_flag(path: os.PathLike[str]) -> None:
    """Raise the flag: every mapping sees it at once (a shared page of the page cache)."""
    fd = os.open(path, os.O_WRONLY)
    try:
        os.pwrite(fd, b"\x01", 0)
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
        return self._mapping[0] != 0
