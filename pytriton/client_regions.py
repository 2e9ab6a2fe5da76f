"""The names of the shared-memory regions a client registers with Triton, and the lease of their owner.

A client on the server's host may pass its tensors through Triton's system shared-memory
protocol (``shared_memory=`` of ``pytriton.client``): it creates segments in /dev/shm, registers
them with the server, and unregisters and unlinks them when it closes. A client killed before
that leaves them behind, still registered (Triton keeps each one mapped until it is
unregistered). Two parties clear them, and both read the names defined here:

- a starting server's sweep (``pytriton.server.workspace.sweep_stale``), which judges every
  ``pytriton-<pid>-<random>`` name by the owner's lease, servers' and clients' alike;
- a running server's supervisor (``pytriton.server.client_sweep``), which unregisters the
  regions of dead owners from its server and unlinks their names.

The lease is the one the workspace uses for servers: ``/dev/shm/<owner id>-lock``, held under an
exclusive ``flock`` for as long as the owner lives (the kernel drops it however the process
ends). A live owner always has its lease before its first segment and keeps it until its last
one is gone, so a region whose owner's lease is missing or unlocked is an orphan.
"""

from __future__ import annotations

import fcntl
import os
import secrets
from typing import Optional

SHM_DIR = "/dev/shm"
PREFIX = "pytriton"
CLIENT_TAG = "client"
LEASE_SUFFIX = "-lock"


def new_owner_id() -> str:
    """A fresh owner id for one client: ``pytriton-<pid>-<random>``, the shape server ids have."""
    return f"{PREFIX}-{os.getpid()}-{secrets.token_hex(4)}"


def region_name(owner_id: str, number: int) -> str:
    """The /dev/shm name (and Triton region name) of an owner's `number`-th region."""
    return f"{owner_id}-{CLIENT_TAG}-{number}"


def region_owner(name: str) -> Optional[str]:
    """The owner id in a client region's name or key (a leading ``/`` allowed); None for other names."""
    parts = name.lstrip("/").split("-")
    if len(parts) == 5 and parts[0] == PREFIX and parts[1].isdigit() and parts[3] == CLIENT_TAG and parts[4].isdigit():
        return "-".join(parts[:3])
    return None


def lease_path(owner_id: str) -> str:
    return os.path.join(SHM_DIR, f"{owner_id}{LEASE_SUFFIX}")


class LockedLease:
    """A lease file in /dev/shm held locked by its owner (`path`, and `_fd` its locked descriptor).

    The servers' leases (`pytriton.server.workspace.ShmLease`) and the clients' (`OwnerLease`)
    differ only in how they are taken; both are given back the same way.
    """

    path: str
    _fd: Optional[int]

    def release(self) -> None:
        """Unlink the lease, then drop the lock: call after everything else of the owner is gone. Idempotent."""
        if self._fd is None:
            return
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        os.close(self._fd)
        self._fd = None


class OwnerLease(LockedLease):
    """The lease of `owner_id`, taken at once; `release` it after every region of the owner is gone.

    The file is locked under a hidden name and then renamed into place, so no one ever sees it
    unlocked while its owner lives (a sweep would take that for a dead owner).

    Raises:
        OSError: /dev/shm is missing or refuses the file.
    """

    def __init__(self, owner_id: str) -> None:
        self.path = lease_path(owner_id)
        staging = os.path.join(SHM_DIR, f".{owner_id}{LEASE_SUFFIX}")
        fd = os.open(staging, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.rename(staging, self.path)
        except BaseException:
            os.close(fd)
            os.unlink(staging)
            raise
        self._fd = fd



def owner_alive(owner_id: str) -> bool:
    """Whether the owner of `owner_id` still holds its lease (a lease of another user counts as alive)."""
    try:
        fd = os.open(lease_path(owner_id), os.O_RDWR)
    except FileNotFoundError:
        return False
    except PermissionError:  # not ours to judge
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False
