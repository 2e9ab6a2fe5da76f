"""The per-server workspace: one folder and one name prefix for everything a server creates.

Every name (the workspace folder, shared-memory segments, Triton's own Python-backend regions)
carries ``pytriton-<owner pid>-<random>``, so two servers on one host never collide and the next
start can sweep what a killed one left: whatever carries the pid of a dead process is removed.
"""

from __future__ import annotations

import logging
import os
import pathlib
import secrets
import shutil
import signal
import tempfile
from typing import List, Optional, Set

import psutil

from pytriton.exceptions import PyTritonBadParameterError
from pytriton.ipc.shm import SHM_DIR

logger = logging.getLogger("pytriton.server")

PREFIX = "pytriton"
# Unix socket paths are limited to 107 bytes; leave room for the socket file name.
_MAX_SOCKET_DIR = 80


def _owner_pid(name: str) -> Optional[int]:
    """The owner pid in a ``pytriton-<pid>-...`` name, or None for other names."""
    parts = name.split("-")
    if len(parts) >= 3 and parts[0] == PREFIX and parts[1].isdigit():
        return int(parts[1])
    return None


class Workspace:
    """Folders and names of one server.

    Args:
        path: a folder chosen by the user (created if missing, kept on cleanup if it existed);
            None for a private temporary folder removed on cleanup.
    """

    def __init__(self, path: Optional[pathlib.Path] = None) -> None:
        self.server_id = f"{PREFIX}-{os.getpid()}-{secrets.token_hex(4)}"
        if path is None:
            self.path = pathlib.Path(tempfile.mkdtemp(prefix=f"{self.server_id}-"))
            self._owned = True
        else:
            self.path = pathlib.Path(path).expanduser().resolve()
            self._owned = not self.path.exists()
            self.path.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.model_repository = self._subdir("models")
        self.sockets = self._subdir("sockets")
        self.backends = self._subdir("backends")
        if len(str(self.sockets)) > _MAX_SOCKET_DIR:
            self.cleanup()
            raise PyTritonBadParameterError(
                f"workspace path {str(path)!r} is too long for Unix sockets ({len(str(self.sockets))} characters "
                f"with its sockets folder; at most {_MAX_SOCKET_DIR}); choose a shorter workspace path"
            )

    def _subdir(self, name: str) -> pathlib.Path:
        folder = self.path / name
        folder.mkdir(mode=0o700, exist_ok=True)
        # A folder left by an earlier run keeps its mode; it holds sockets and model code.
        folder.chmod(0o700)
        return folder

    @property
    def shm_prefix(self) -> str:
        """Prefix of every shared-memory segment of this server (ours and Triton's)."""
        return self.server_id

    def restrict_segments(self) -> List[str]:
        """Make every shared-memory segment of this server readable and writable by its user only.

        Ours are created 0600; the Python backend's own regions (which carry this server's prefix
        and the request tensors) are created 0644 whatever the umask, so the facade calls this
        once their models are loaded.

        Returns:
            The names whose mode was changed.
        """
        changed: List[str] = []
        for name in _segment_names(self.server_id):
            path = os.path.join(SHM_DIR, name)
            try:
                if os.stat(path).st_mode & 0o077:
                    os.chmod(path, 0o600)
                    changed.append(name)
            except FileNotFoundError:  # the server dropped it meanwhile
                pass
        return changed

    def cleanup(self) -> None:
        """Remove the folders and segments this server created."""
        remove_segments(self.server_id)
        if self._owned:
            shutil.rmtree(self.path, ignore_errors=True)
        else:
            for folder in (self.model_repository, self.sockets, self.backends):
                shutil.rmtree(folder, ignore_errors=True)


def _segment_names(prefix: str) -> List[str]:
    try:
        return [name for name in os.listdir(SHM_DIR) if name.startswith(prefix)]
    except FileNotFoundError:
        return []


def remove_segments(prefix: str) -> List[str]:
    """Unlink every /dev/shm entry whose name starts with `prefix`."""
    removed: List[str] = []
    for name in _segment_names(prefix):
        try:
            os.unlink(os.path.join(SHM_DIR, name))
            removed.append(name)
        except (FileNotFoundError, PermissionError):
            pass
    return removed


def sweep_stale(tmp_dir: Optional[str] = None) -> List[str]:
    """Remove what servers of dead processes left: their processes, segments and temporary folders.

    Returns:
        The names removed (for logging and tests).
    """
    removed: List[str] = []
    dead_ids = set()
    tmp = pathlib.Path(tmp_dir or tempfile.gettempdir())
    candidates = list(os.listdir(SHM_DIR)) if os.path.isdir(SHM_DIR) else []
    candidates += [p.name for p in tmp.glob(f"{PREFIX}-*") if p.is_dir()]
    for name in candidates:
        pid = _owner_pid(name)
        if pid is not None and not psutil.pid_exists(pid):
            dead_ids.add("-".join(name.split("-")[:3]))
    if not dead_ids:
        return removed
    _kill_orphans(dead_ids)
    for server_id in dead_ids:
        removed += remove_segments(server_id)
        for folder in tmp.glob(f"{server_id}-*"):
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(str(folder))
    if removed:
        logger.info("Removed %d leftovers of servers whose process died: %s", len(removed), removed)
    return removed


def _kill_orphans(server_ids: Set[str]) -> None:
    """Kill tritonserver and stub processes still running for servers whose owner died."""
    for process in psutil.process_iter(["pid", "cmdline"]):
        cmdline = " ".join(process.info.get("cmdline") or [])
        if any(server_id in cmdline for server_id in server_ids):
            try:
                process.send_signal(signal.SIGKILL)
                logger.info("Killed orphaned process %d: %s", process.pid, cmdline[:200])
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                pass
