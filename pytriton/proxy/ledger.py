"""The ids of the relayed requests a stub has not answered, in a file that outlives the stub.

A relayed request (decoupled models, async callables) is answered from the relay thread through
Triton's response sender. When the stub dies, Triton 2.51 never answers such a request: its
client waits for its own timeout. So the relay writes each relayed request's id here while it is
open, and the supervisor, healing the instance, reads what a dead stub left (`read_ledger`) and
publishes those ids with the model (`pytriton.constants.LOST_REQUESTS_PARAMETER`), where
pytriton's clients find their request and end it with an error that names the death.

The file is a memory map of fixed slots: writing an id costs a copy into memory, no system call.
A slot holds the id's length in its first byte (0: free) and the id's bytes after it; ids longer
than a slot holds (not pytriton's clients' ids) are not recorded. The map doubles when full.

Imports only the standard library and `pytriton.ipc`, like the rest of the proxy.
"""

from __future__ import annotations

import mmap
import os
from typing import List, Sequence

from pytriton.ipc.lost import ID_LIMIT, SLOT_BYTES

_INITIAL_SLOTS = 256


class InflightLedger:
    """Open relayed requests' ids, one slot each, in the file at `path` (created, emptied).

    Not thread safe: the relay calls it under its own lock.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        self._slots = _INITIAL_SLOTS
        os.ftruncate(self._fd, self._slots * SLOT_BYTES)
        self._map = mmap.mmap(self._fd, self._slots * SLOT_BYTES)
        self._free = list(range(self._slots - 1, -1, -1))

    def add(self, request_ids: Sequence[str]) -> List[int]:
        """Record the ids (empty and overlong ones are skipped); the slots to give `remove`."""
        taken = []
        for request_id in request_ids:
            encoded = request_id.encode("utf-8", "replace") if request_id else b""
            if not encoded or len(encoded) > ID_LIMIT:
                continue
            if not self._free:
                self._grow()
            slot = self._free.pop()
            start = slot * SLOT_BYTES
            self._map[start + 1:start + 1 + len(encoded)] = encoded
            self._map[start] = len(encoded)  # last: a reader never sees a length without its bytes
            taken.append(slot)
        return taken

    def remove(self, slots: Sequence[int]) -> None:
        if self._map.closed:  # a relay thread that outlived the proxy's close
            return
        for slot in slots:
            self._map[slot * SLOT_BYTES] = 0
            self._free.append(slot)

    def _grow(self) -> None:
        grown = self._slots * 2
        os.ftruncate(self._fd, grown * SLOT_BYTES)
        self._map.resize(grown * SLOT_BYTES)
        self._free.extend(range(grown - 1, self._slots - 1, -1))
        self._slots = grown

    def close(self) -> None:
        """Close and remove the file (a clean end: nothing was lost)."""
        self._map.close()
        os.close(self._fd)
        try:
            os.unlink(self.path)
        except OSError:
            pass
