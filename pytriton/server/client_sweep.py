"""Clear what killed clients left in shared memory while the server runs.

A client that passes tensors through shared memory (``shared_memory=`` of ``pytriton.client``)
registers regions with the server and unregisters and unlinks them when it closes. One killed
before that leaves its segments in /dev/shm and its regions registered: Triton keeps each one
mapped until it is unregistered, so their memory stays taken for the server's life, and a
starting server's sweep (``pytriton.server.workspace.sweep_stale``) only unlinks the names.

The supervisor calls a `ClientRegionSweep` about once a second; every `PERIOD_S` it asks the
server which regions are registered, unregisters those whose owner is dead (its lease is free
or gone, `pytriton.client_regions`), and unlinks what dead clients left in /dev/shm. The
server's list is read, not the names on disk, so that a region registered with two servers is
unregistered from each, whichever sweep unlinks its name first.
"""

from __future__ import annotations

import logging
import os
import time
from typing import List, Optional

from pytriton.client_regions import SHM_DIR, owner_alive, region_owner
from pytriton.exceptions import PyTritonServerError
from pytriton.server.control import ServerControl
from pytriton.server.workspace import remove_segments

logger = logging.getLogger("pytriton.server")

PERIOD_S = 5.0
"""How often the server is asked for its registered regions."""


class ClientRegionSweep:
    """Unregisters and unlinks the regions of dead clients, at most every `period_s` (see module doc).

    Args:
        control: the library's calls to its server (with the access token).
        period_s: the least time between two sweeps.
    """

    def __init__(self, control: ServerControl, period_s: float = PERIOD_S) -> None:
        self._control = control
        self._period_s = period_s
        self._next = time.monotonic() + period_s

    def __call__(self) -> List[str]:
        """Sweep if it is time; the names unregistered or unlinked."""
        now = time.monotonic()
        if now < self._next:
            return []
        self._next = now + self._period_s
        return self.sweep()

    def sweep(self) -> List[str]:
        """Sweep now; the names unregistered or unlinked."""
        cleared: List[str] = []
        dead: set[str] = set()
        try:
            registered = self._control.shared_memory_regions()
        except PyTritonServerError as exc:
            logger.debug("Could not list the server's shared-memory regions: %s", exc)
            registered = {}
        for name, key in registered.items():
            owner = _dead_owner(key, dead)
            if owner is None:
                continue
            try:
                self._control.unregister_shared_memory(name)
                cleared.append(name)
            except PyTritonServerError as exc:
                logger.debug("Could not unregister region %s of a dead client: %s", name, exc)
        try:
            names = os.listdir(SHM_DIR)
        except OSError:
            names = []
        for name in names:
            _dead_owner(name, dead)
        for owner in dead:
            cleared += remove_segments(f"{owner}-")
        if cleared:
            logger.info("Cleared the shared memory of clients whose process died: %s", sorted(set(cleared)))
        return cleared


def _dead_owner(name: str, dead: set[str]) -> Optional[str]:
    """The owner of a client region named `name` when it is dead (then added to `dead`), else None."""
    owner = region_owner(name)
    if owner is None:
        return None
    if owner in dead or not owner_alive(owner):
        dead.add(owner)
        return owner
    return None
