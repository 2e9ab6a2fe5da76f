"""The per-server workspace: one folder and one name prefix for everything a server creates.

Every name (the workspace folder, shared-memory segments, Triton's own Python-backend regions)
carries ``pytriton-<owner pid>-<random>``, so two servers on one host never collide and the next
start can sweep what a killed one left. Whether the owner still lives is told by a lease: the
owner holds an exclusive ``flock`` on ``/dev/shm/<prefix>-lock`` from before it creates anything
until it removed everything else, and the kernel drops the lock however the process ends. Pids
cannot tell: in a container the owner is PID 1, which always exists, and two containers of one
pod sharing ``/dev/shm`` do not see each other's pids. A temporary workspace folder holds a lease
of its own, ``<folder>/.lease``, for its whole life: a server whose ``/dev/shm`` is private (a
tmpfs of its own) but whose folder is on a ``/tmp`` others see would otherwise be judged by its
pid alone, and from another PID namespace every pid looks dead. Names without any lease (from
older versions, or a folder made a moment ago) are judged by their pid, as before.

`SharedWorkspace` is the same idea for a tritonserver that something else started: several
binding processes share its model repository, each with a session of its own in the folder.
"""

from __future__ import annotations

import fcntl
import logging
import os
import pathlib
import secrets
import shutil
import tempfile
import time
from typing import Callable, Dict, List, Optional, Sequence, Set

import psutil

from pytriton.client_regions import LockedLease
from pytriton.exceptions import PyTritonBadParameterError, PyTritonInvalidOperationError
from pytriton.ipc.shm import SHM_DIR
from pytriton.ipc.stopping import create_flag
from pytriton.server.process import wait_gone

logger = logging.getLogger("pytriton.server")

PREFIX = "pytriton"
# Unix socket paths are limited to 107 bytes; leave room for the socket file name.
_MAX_SOCKET_DIR = 80


LEASE_SUFFIX = "-lock"
FOLDER_LEASE = ".lease"


class ShmLease(LockedLease):
    """The lease that tells other processes the owner of prefix `prefix` is alive (see module doc)."""

    def __init__(self, prefix: str) -> None:
        self.path = os.path.join(SHM_DIR, f"{prefix}{LEASE_SUFFIX}")
        self._fd = _locked_new_file(self.path)


class FolderLease(LockedLease):
    """The lease of a temporary workspace folder, a file inside it (see module doc)."""

    def __init__(self, folder: pathlib.Path) -> None:
        self.path = str(folder / FOLDER_LEASE)
        self._fd = _locked_new_file(self.path)


def _locked_new_file(path: str) -> int:
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    return fd


def _lease_state(server_id: str, tmp: pathlib.Path) -> Optional[int]:
    """For a prefix with a lease: a descriptor holding its lock when the owner is dead, -1 while it
    lives; None when the prefix has no lease (judge it by its pid). The lease in /dev/shm first,
    then that of its temporary folders under `tmp`."""
    state = _lock_state(os.path.join(SHM_DIR, f"{server_id}{LEASE_SUFFIX}"))
    if state is None:
        for folder in tmp.glob(f"{server_id}-*"):
            state = _lock_state(str(folder / FOLDER_LEASE))
            if state is not None:
                break
    return state


def _lock_state(path: str) -> Optional[int]:
    try:
        fd = os.open(path, os.O_RDWR)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except PermissionError:  # another user's server: not ours to judge
        return -1
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return -1
    return fd


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
        self._lease: Optional[ShmLease] = None
        self._folder_lease: Optional[FolderLease] = None
        if path is None:
            self.path = pathlib.Path(tempfile.mkdtemp(prefix=f"{self.server_id}-"))
            self._folder_lease = FolderLease(self.path)
            self._owned = True
        else:
            self.path = pathlib.Path(path).expanduser().resolve()
            self._owned = not self.path.exists()
            self.path.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.model_repository = self._subdir("models")
        self.sockets = self._subdir("sockets")
        self.backends = self._subdir("backends")
        self.stopping_flag = self.sockets / "stopping"
        """The server's stopping flag (`pytriton.ipc.stopping`), written lowered here."""
        if len(str(self.sockets)) > _MAX_SOCKET_DIR:
            self.cleanup()
            raise PyTritonBadParameterError(
                f"workspace path {str(path)!r} is too long for Unix sockets ({len(str(self.sockets))} characters "
                f"with its sockets folder; at most {_MAX_SOCKET_DIR}); choose a shorter workspace path"
            )
        create_flag(self.stopping_flag)

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

    def hold_lease(self) -> None:
        """Take this server's lease (see the module doc); call before anything creates a segment.

        Taken when the server starts rather than when the folder is made, so that a server that
        never started leaves no entry in /dev/shm; its folder alone is judged by its pid.
        """
        if self._lease is None:
            self._lease = ShmLease(self.server_id)

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
        """Remove the folders and segments this server created; the lease goes last."""
        remove_segments(self.server_id, keep_lease=True)
        if self._owned:
            shutil.rmtree(self.path, ignore_errors=True)
        else:
            for folder in (self.model_repository, self.sockets, self.backends):
                shutil.rmtree(folder, ignore_errors=True)
        if self._folder_lease is not None:
            self._folder_lease.release()
            self._folder_lease = None
        if self._lease is not None:
            self._lease.release()
            self._lease = None


def _segment_names(prefix: str) -> List[str]:
    try:
        return [name for name in os.listdir(SHM_DIR) if name.startswith(prefix)]
    except FileNotFoundError:
        return []


def remove_segments(prefix: str, keep_lease: bool = False) -> List[str]:
    """Unlink every /dev/shm entry whose name starts with `prefix` (but its lease with `keep_lease`)."""
    removed: List[str] = []
    for name in _segment_names(prefix):
        if keep_lease and name == f"{prefix}{LEASE_SUFFIX}":
            continue
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
    dead_ids: Set[str] = set()
    held: Dict[str, int] = {}  # dead owner -> descriptor holding its lease while its things go
    judged: Set[str] = set()
    tmp = pathlib.Path(tmp_dir or tempfile.gettempdir())
    candidates = list(os.listdir(SHM_DIR)) if os.path.isdir(SHM_DIR) else []
    candidates += [p.name for p in tmp.glob(f"{PREFIX}-*") if p.is_dir()]
    try:
        for name in candidates:
            pid = _owner_pid(name)
            server_id = "-".join(name.split("-")[:3])
            if pid is None or server_id in judged:
                continue
            judged.add(server_id)
            lease = _lease_state(server_id, tmp)
            if lease is None:
                if not psutil.pid_exists(pid):
                    dead_ids.add(server_id)
            elif lease >= 0:
                held[server_id] = lease
                dead_ids.add(server_id)
        if not dead_ids:
            return removed
        kill_server_processes(dead_ids)
        for server_id in dead_ids:
            removed += remove_segments(server_id)
            for folder in tmp.glob(f"{server_id}-*"):
                shutil.rmtree(folder, ignore_errors=True)
                removed.append(str(folder))
    finally:
        for fd in held.values():
            os.close(fd)
    if removed:
        logger.info("Removed %d leftovers of servers whose process died: %s", len(removed), removed)
    copies = sweep_load_copies(tmp)
    if copies:
        logger.info("Removed %d copies tritonserver made of pytriton's own models and left in %s", len(copies), tmp)
    return removed + copies


LOAD_COPY_AGE_S = 60.0
"""How old a copy of a load's files must be before `sweep_load_copies` takes it (its load long over)."""


def sweep_load_copies(tmp: pathlib.Path, now: Optional[float] = None) -> List[str]:
    """Remove the ``folder*`` copies tritonserver made of pytriton's own models (the readiness
    gate, the stopping model) and never removed.

    A load that sends a model's files (Triton's load with a config override) makes Triton write
    them into a new ``<tmp>/folderXXXXXX`` that nothing removes, not even its unload or its
    exit. pytriton's stops write their model into the repository instead; this takes what
    earlier versions and the gate's loads left, once its load is surely over. Only folders whose
    ``config.pbtxt`` names one of pytriton's reserved models are touched.
    """
    now = time.time() if now is None else now
    removed = []
    for folder in tmp.glob("folder??????"):
        if not folder.name[len("folder"):].isalnum():  # Triton's mkdtemp template: six letters or digits
            continue
        try:
            if now - folder.stat().st_mtime < LOAD_COPY_AGE_S:
                continue
            with open(folder / "config.pbtxt", encoding="utf-8", errors="replace") as config:
                first = config.readline()
        except OSError:
            continue
        if first.strip() in _RESERVED_NAME_LINES:
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(str(folder))
    return removed


_RESERVED_NAME_LINES = frozenset({'name: "pytriton_readiness_gate"', 'name: "pytriton_stopping"'})
"""The first line of the config.pbtxt Triton writes for pytriton's own models (`readiness.RESERVED_MODELS`)."""


def kill_server_processes(
    server_ids: Set[str], exclude: Optional[int] = None, known: Sequence[psutil.Process] = ()
) -> List[int]:
    """SIGKILL the processes whose command line carries one of `server_ids` (a server's stubs carry
    it in their model path or shared-memory region name), plus `known` ones; their pids.

    Stubs of a killed server are reparented and would live on; this is how none outlives it,
    whether its owner noticed the death (the supervisor, `stop()`) or the next start's sweep did.
    """
    victims: Dict[int, psutil.Process] = {process.pid: process for process in known}
    for process in psutil.process_iter(["pid", "cmdline"]):
        try:
            cmdline = " ".join(process.info.get("cmdline") or [])
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        if any(server_id in cmdline for server_id in server_ids) and process.pid not in (exclude, os.getpid()):
            victims.setdefault(process.pid, process)
    for process in victims.values():
        try:
            process.kill()
            logger.info("Killed leftover process %d of server(s) %s", process.pid, sorted(server_ids))
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    wait_gone(list(victims.values()), timeout_s=2)
    return sorted(victims)


MODELS_FOLDER = "models"
"""Subfolder of a shared workspace that the remote server serves (``--model-repository``)."""
SOCKETS_FOLDER = "sockets"
"""Subfolder of a shared workspace holding one folder of ipc sockets per binding session."""
OWNER_FILE = "pytriton-owner"
"""File in a model folder naming the session that wrote it (Triton ignores it)."""
_LOCK_FILE = "lock"


def remote_server_flags(model_repository: pathlib.Path) -> str:
    """The tritonserver flags a server needs to serve the models of a shared workspace."""
    return f"--model-repository={model_repository} --model-control-mode=explicit"


class SharedWorkspace:
    """This process's share of a workspace folder it shares with a tritonserver it did not start.

    Layout of the folder (created by whoever starts the server; this class adds what it needs)::

        <path>/models/                 the server's --model-repository
        <path>/models/<model>/         one model of a session: config.pbtxt, <version>/model.py and
                                       pytriton-owner (the session id)
        <path>/sockets/<session id>/   one session's ipc sockets, and its lock file

    A session id is ``pytriton-<pid>-<random>``; it also prefixes the session's shared-memory
    segments. The session holds an exclusive ``flock`` on its lock file for as long as it lives,
    and the kernel drops the lock however the process ends, so `sweep` tells dead sessions from
    live ones without trusting pids (which another PID namespace does not see, or may reuse).

    Args:
        path: the workspace folder; it and its ``models`` folder must exist.

    Raises:
        PyTritonBadParameterError: a folder is missing, or the path is too long for Unix sockets.
    """

    def __init__(self, path: pathlib.Path) -> None:
        self.path = pathlib.Path(path).expanduser().absolute()
        self.model_repository = self.path / MODELS_FOLDER
        if not self.path.is_dir() or not self.model_repository.is_dir():
            missing = self.path if not self.path.is_dir() else self.model_repository
            raise PyTritonBadParameterError(
                f"workspace={str(path)!r} is invalid: {missing} is not a folder. Create {self.model_repository} and "
                f"start tritonserver with {remote_server_flags(self.model_repository)}"
            )
        self.session_id = f"{PREFIX}-{os.getpid()}-{secrets.token_hex(4)}"
        sockets_root = self.path / SOCKETS_FOLDER
        self.sockets = sockets_root / self.session_id
        if len(str(self.sockets)) > _MAX_SOCKET_DIR:
            raise PyTritonBadParameterError(
                f"workspace={str(path)!r} is too long for Unix sockets ({len(str(self.sockets))} characters with "
                f"its session's sockets folder; at most {_MAX_SOCKET_DIR}); choose a shorter workspace path"
            )
        sockets_root.mkdir(mode=0o700, exist_ok=True)
        self._lease = ShmLease(self.session_id)  # so a Triton's sweep on this host sees its segments alive
        try:
            self._lock_fd: Optional[int] = self._open_session(sockets_root)
        except BaseException:
            self._lease.release()
            raise
        self._claimed: List[str] = []

    def _open_session(self, sockets_root: pathlib.Path) -> int:
        # Locked before it gets its name, so a sweep never sees this session's folder unlocked.
        staging = sockets_root / f".{self.session_id}"
        staging.mkdir(mode=0o700)
        fd = os.open(staging / _LOCK_FILE, os.O_CREAT | os.O_RDWR, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.rename(staging, self.sockets)
        return fd

    @property
    def shm_prefix(self) -> str:
        """Prefix of this session's shared-memory segments."""
        return self.session_id

    def claim(self, model_name: str) -> pathlib.Path:
        """Create the folder of model `model_name` for this session; the name is then taken.

        Raises:
            PyTritonBadParameterError: the name cannot be a folder name.
            PyTritonInvalidOperationError: the repository already has a folder of that name.
        """
        if model_name in (".", "..") or "/" in model_name or "\0" in model_name:
            raise PyTritonBadParameterError(
                f"model_name={model_name!r} is invalid for a model repository: it must be a folder name"
            )
        folder = self.model_repository / model_name
        try:
            folder.mkdir(mode=0o700)  # atomic: of two sessions claiming one name, one fails here
        except FileExistsError:
            owner = _read_owner(folder)
            whose = f"by pytriton session {owner}" if owner else "and no pytriton session owns it"
            raise PyTritonInvalidOperationError(
                f"model '{model_name}' is already in the model repository ({folder} exists, {whose}); "
                "choose another model name"
            ) from None
        (folder / OWNER_FILE).write_text(self.session_id)
        self._claimed.append(model_name)
        return folder

    def release(self, model_name: str) -> None:
        """Remove the folder of a model this session claimed."""
        if model_name in self._claimed:
            self._claimed.remove(model_name)
            shutil.rmtree(self.model_repository / model_name, ignore_errors=True)

    def cleanup(self) -> None:
        """Remove this session's model folders, sockets and segments, then end the session."""
        for name in list(self._claimed):
            self.release(name)
        shutil.rmtree(self.sockets, ignore_errors=True)
        remove_segments(self.session_id, keep_lease=True)
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None
        self._lease.release()

    def sweep(self, unload: Callable[[List[str]], None]) -> List[str]:
        """Remove what dead sessions left in the workspace; returns the names removed.

        `unload` gets the models of dead sessions first, so the server drops them before their
        folders go. A session is dead when its lock is free, or when its sockets folder is gone
        while a model folder still names it (a session creates that folder, locked, before it
        claims a model, and removes it last). Model folders without an owner file are not
        pytriton's and stay.
        """
        sockets_root = self.path / SOCKETS_FOLDER
        held: Dict[str, int] = {}  # dead session -> descriptor holding its lock while it is removed
        gone: Set[str] = set()  # dead sessions whose folder is already gone
        live: Set[str] = {self.session_id}

        def is_dead(session_id: str) -> bool:
            # Judged when first met, not from an earlier listing: a session that started since
            # then and already claimed a model must be seen alive.
            if session_id in live or session_id in held or session_id in gone:
                return session_id not in live
            if not (sockets_root / session_id).is_dir():
                gone.add(session_id)
                return True
            fd = _lock_if_dead(sockets_root / session_id / _LOCK_FILE)
            if fd is None:
                live.add(session_id)
                return False
            held[session_id] = fd
            return True

        removed: List[str] = []
        try:
            models = []
            for folder in sorted(self.model_repository.iterdir()):
                owner = _read_owner(folder)
                if owner and is_dead(owner):
                    models.append(folder.name)
            for entry in os.scandir(sockets_root):
                if entry.name.startswith(PREFIX) and entry.is_dir():
                    is_dead(entry.name)
                elif entry.name.startswith(f".{PREFIX}"):  # a session that died while starting
                    pid = _owner_pid(entry.name[1:])
                    if pid is not None and not psutil.pid_exists(pid):
                        shutil.rmtree(entry.path, ignore_errors=True)
            if models:
                unload(models)
                for name in models:
                    shutil.rmtree(self.model_repository / name, ignore_errors=True)
                    removed.append(str(self.model_repository / name))
            for session_id in held:
                shutil.rmtree(sockets_root / session_id, ignore_errors=True)
                removed.append(str(sockets_root / session_id))
            for session_id in (*held, *gone):
                removed += remove_segments(session_id)
        finally:
            for fd in held.values():
                os.close(fd)
        if removed:
            logger.info("Removed %d leftovers of pytriton sessions that died: %s", len(removed), removed)
        return removed


def _read_owner(folder: pathlib.Path) -> Optional[str]:
    try:
        return (folder / OWNER_FILE).read_text().strip() or None
    except (FileNotFoundError, NotADirectoryError):
        return None


def _lock_if_dead(lock_file: pathlib.Path) -> Optional[int]:
    """A descriptor holding the lock of a session that is gone, or None while it lives."""
    try:
        fd = os.open(lock_file, os.O_RDWR)
    except (FileNotFoundError, PermissionError):  # removed meanwhile, or another user's: leave it
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd
