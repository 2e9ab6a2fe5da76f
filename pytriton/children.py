"""The processes pytriton forks and waits for itself, which the PID 1 reaper must leave alone.

As a container's PID 1, `pytriton.server.supervisor.reap_adopted` waits for the zombies this
process adopted (the stubs a dead tritonserver left). Were it to wait for a process instance's
worker as well, it would take that worker's exit status from the thread that reports it to the
requests the worker held: "killed by signal 9 (SIGKILL)" would read "exit status unknown". So each
fork registers its child here under `LOCK`, which the reaper holds while it looks, and the one
that waits for the child releases it.
"""

from __future__ import annotations

import os
import threading
from typing import Set

LOCK = threading.Lock()
"""Held around a fork and its registration, and by the reaper while it picks its zombies."""

_OWN: Set[int] = set()


def keep(pid: int) -> None:
    """Register a child just forked (with `LOCK` held since before the fork)."""
    _OWN.add(pid)


def release(pid: int) -> None:
    """The child was waited for: its pid may be a stranger's from now on."""
    with LOCK:
        _OWN.discard(pid)


def is_kept(pid: int) -> bool:
    """Whether `pid` is a child pytriton waits for itself (ask with `LOCK` held)."""
    return pid in _OWN


def _forget_in_child() -> None:
    """A forked child starts with no children of its own, and with a lock nobody holds."""
    global LOCK
    LOCK = threading.Lock()
    _OWN.clear()


os.register_at_fork(after_in_child=_forget_in_child)
