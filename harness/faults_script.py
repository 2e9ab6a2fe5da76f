"""The user process of the fault matrix, and what the matrix reads about it from outside.

`ServingScript` starts ``harness/serve.py`` (``Triton.serve()`` with the ``echo``, ``stream`` and
``text`` models) on free ports on 127.0.0.1, in its own session and dying with the harness,
either as an ordinary child or as PID 1 of a new PID namespace (``faults_pid1.py``). It finds
its tritonserver and the Python-backend stubs, the server id (``pytriton-<pid>-<random>``,
read from tritonserver's ``shm-region-prefix-name``) and the zombies under it, and reads its
exit code (for PID 1, the one its launcher recorded).

The module functions measure what a server leaves: its processes (any whose command line
carries the server id), its /dev/shm entries and its temporary folders.
"""

from __future__ import annotations

import ctypes
import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import tempfile
import time
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

import psutil
from common import HARNESS, MODELS, REPO, SHM_DIR, free_ports, http_status

SERVE = HARNESS / "serve.py"
PID1_LAUNCHER = HARNESS / "faults_pid1.py"
STUB = "triton_python_backend_stub"
_SERVER_ID = re.compile(r"shm-region-prefix-name=(pytriton-\d+-[0-9a-f]+)-tpb")
_PR_SET_PDEATHSIG = 1
PLANTS = {
    # A planted bug in the user process, so that the matrix can show that its checks notice one.
    "no_sweep": "pytriton.triton.sweep_stale = lambda *args, **kwargs: []",
    "no_heal": "pytriton.server.supervisor.Supervisor._check_instances = lambda self: None",
}
_PLANT_MODULE = """\
# Written by harness/faults_script.py: plants bugs in pytriton for the fault matrix's self-test.
import pytriton.server.supervisor
import pytriton.triton

{lines}
"""


def _die_with_parent() -> None:
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def _alive(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _cmdline(process: psutil.Process) -> List[str]:
    try:
        return process.cmdline()
    except psutil.Error:
        return []


def can_run_as_pid1() -> Tuple[bool, str]:
    """Whether this host lets the harness make a PID namespace; the reason when it does not."""
    if os.geteuid() != 0:
        return False, "not root (a PID namespace needs CAP_SYS_ADMIN)"
    with tempfile.NamedTemporaryFile(suffix=".json") as status:
        probe = subprocess.run([sys.executable, str(PID1_LAUNCHER), status.name, "/bin/true"],
                               capture_output=True, text=True, timeout=30, check=False)
    if probe.returncode != 0:
        return False, f"making a PID namespace failed here: {probe.stderr.strip()[:200]}"
    return True, ""


class ServingScript:
    """``harness/serve.py`` in a child process (as PID 1 of its own PID namespace with `pid1`)."""

    def __init__(self, pid1: bool = False, plant: Sequence[str] = ()) -> None:
        self.pid1 = pid1
        self.http_port, self.grpc_port, self.metrics_port = free_ports(3)
        self._log = tempfile.NamedTemporaryFile("w+", prefix="faults-harness-", suffix=".log")
        self._status = tempfile.NamedTemporaryFile("w+", prefix="faults-harness-", suffix=".json")
        env = dict(os.environ)
        self._plant_dir: Optional[tempfile.TemporaryDirectory] = None
        paths = [str(REPO), env.get("PYTHONPATH", "")]
        if plant:
            self._plant_dir = tempfile.TemporaryDirectory(prefix="faults-harness-plant-")
            pathlib.Path(self._plant_dir.name, "sitecustomize.py").write_text(
                _PLANT_MODULE.format(lines="\n".join(PLANTS[name] for name in plant)))
            paths.insert(0, self._plant_dir.name)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, paths))
        argv = [sys.executable, str(SERVE), "--http-port", str(self.http_port), "--grpc-port", str(self.grpc_port),
                "--metrics-port", str(self.metrics_port)]
        if pid1:
            argv = [sys.executable, str(PID1_LAUNCHER), self._status.name, *argv]
        self.process = subprocess.Popen(
            argv, env=env, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
            start_new_session=True, preexec_fn=_die_with_parent,
        )  # fmt: skip
        self.started = time.monotonic()
        self._root: Optional[psutil.Process] = None
        self.server_id: Optional[str] = None

    http_url = property(lambda self: f"http://127.0.0.1:{self.http_port}")
    grpc_url = property(lambda self: f"grpc://127.0.0.1:{self.grpc_port}")

    # -- the processes ------------------------------------------------------------------------

    def root(self) -> Optional[psutil.Process]:
        """The process running serve.py (for PID 1: the launcher's child), None before or after."""
        if self._root is None:
            try:
                launcher = psutil.Process(self.process.pid)
                if not self.pid1:
                    self._root = launcher
                else:
                    children = launcher.children()
                    self._root = children[0] if children and str(SERVE) in " ".join(_cmdline(children[0])) else None
            except psutil.NoSuchProcess:
                return None
        return self._root

    def own_pids(self) -> List[int]:
        """The script and its launcher (the harness's own children)."""
        root = self._root
        return sorted({self.process.pid} | ({root.pid} if root is not None else set()))

    def descendants(self) -> List[psutil.Process]:
        root = self.root()
        if root is None:
            return []
        try:
            return root.children(recursive=True)
        except psutil.NoSuchProcess:
            return []

    def host_pid(self, pid: int) -> Optional[int]:
        """The pid this harness sees for a process of the script that reported `pid` about
        itself: as PID 1 the script lives in a PID namespace of its own, where its processes
        have other numbers (the last field of ``NSpid`` in /proc/<pid>/status). None when no
        process of the script has that number: the namespace's number is never signalled as it
        is, which would hit a stranger of the host."""
        if not self.pid1:
            return pid
        root = self.root()
        for process in ([root] if root is not None else []) + self.descendants():
            try:
                with open(f"/proc/{process.pid}/status") as status:
                    for line in status:
                        if line.startswith("NSpid:") and int(line.split()[-1]) == pid:
                            return process.pid
            except (OSError, ValueError):
                continue
        return None

    def tritonserver(self) -> Optional[psutil.Process]:
        root = self.root()
        try:
            children = root.children() if root is not None else []
        except psutil.NoSuchProcess:
            return None
        for child in children:
            # One read of the command line: a child that ends between two reads has none left.
            argv = _cmdline(child)
            if argv and argv[0].endswith("/tritonserver") and _alive(child):
                if self.server_id is None:
                    found = _SERVER_ID.search(" ".join(argv))
                    self.server_id = found.group(1) if found else None
                return child
        return None

    def stubs(self) -> Dict[str, List[psutil.Process]]:
        """Live stubs by model name (a stub's command line holds ``.../models/<model>/<version>/model.py``)."""
        server = self.tritonserver()
        found: Dict[str, List[psutil.Process]] = {}
        try:
            children = server.children() if server is not None else []
        except psutil.NoSuchProcess:
            return found
        for child in children:
            argv = _cmdline(child)
            if argv and argv[0].endswith(STUB) and _alive(child) and len(argv) > 1:
                model = argv[1].split("/models/")[-1].split("/")[0]
                found.setdefault(model, []).append(child)
        return found

    def zombies(self) -> List[str]:
        """Zombies under the script right now, as ``pid name (parent ppid)``."""
        found = []
        for process in self.descendants():
            try:
                if process.status() == psutil.STATUS_ZOMBIE:
                    parent = psutil.Process(process.ppid())
                    found.append(f"{process.pid} {process.name()} (parent {parent.pid} {parent.name()})")
            except psutil.NoSuchProcess:
                pass
        return found

    # -- its state as clients see it ---------------------------------------------------------------

    def is_running(self) -> bool:
        return self.process.poll() is None

    def models_ready(self) -> bool:
        return all(http_status(f"{self.http_url}/v2/models/{model}/ready", 1.0) == 200 for model in MODELS)

    def model_ready(self, model: str) -> bool:
        return http_status(f"{self.http_url}/v2/models/{model}/ready", 1.0) == 200

    def wait_ready(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and self.is_running():
            if self.models_ready():
                self.tritonserver()  # learn the server id while it runs
                return True
            time.sleep(0.1)
        return False

    def wait_exit(self, timeout_s: float) -> Optional[int]:
        """The exit code once the script ended (negative: the signal), None if it still runs."""
        try:
            self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            return None
        if not self.pid1:
            return self.process.returncode
        self._status.seek(0)
        text = self._status.read()
        return int(json.loads(text)["returncode"]) if text else self.process.returncode

    def kill_all(self) -> None:
        """SIGKILL the script's whole tree and its launcher (after a hang), and wait for the launcher."""
        for process in [*self.descendants(), *([self._root] if self._root else [])]:
            try:
                process.kill()
            except psutil.Error:
                pass
        self.process.kill()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            pass

    def log_tail(self, chars: int = 3000) -> str:
        self._log.flush()
        self._log.seek(0)
        return self._log.read()[-chars:]

    def close(self) -> None:
        self._log.close()
        self._status.close()
        if self._plant_dir is not None:
            self._plant_dir.cleanup()


# -- what a server leaves --------------------------------------------------------------------------


def describe(process: psutil.Process) -> str:
    argv = _cmdline(process)
    name = os.path.basename(argv[0]) if argv else "?"
    if name == STUB and len(argv) > 1:
        name = "stub:" + argv[1].split("/models/")[-1].split("/")[0]
    elif name.startswith("python") and len(argv) > 1:
        name = os.path.basename(argv[1])
    return f"{name}({process.pid})"


def processes_of(server_ids: Iterable[str], pids: Iterable[int] = ()) -> List[psutil.Process]:
    """Live processes whose command line carries one of `server_ids`, or whose pid is in `pids`."""
    ids, wanted = [i for i in server_ids if i], set(pids)
    found = []
    for process in psutil.process_iter(["pid", "cmdline"]):
        cmdline = " ".join(process.info.get("cmdline") or [])
        if (process.pid in wanted or any(i in cmdline for i in ids)) and _alive(process) \
                and process.pid != os.getpid():
            found.append(process)
    return found


def shm_entries(server_ids: Iterable[str]) -> Dict[str, int]:
    """/dev/shm entries of `server_ids`: name -> bytes."""
    ids = tuple(i for i in server_ids if i)
    return _sizes(name for name in os.listdir(SHM_DIR) if ids and name.startswith(ids))


def shm_of_matrix(own_ids: Iterable[str], used: Iterable[str] = (), exclude: Iterable[str] = ()) -> Dict[str, int]:
    """/dev/shm entries the matrix answers for: those of its servers `own_ids` (but `exclude`: the
    one running now), and the entries without a server prefix that its processes were seen using
    (`used`). Other pytriton servers and other programs on the host are left out."""
    skip = set(exclude)
    own = tuple(i for i in own_ids if i and i not in skip)
    extra = set(used)
    return _sizes(name for name in os.listdir(SHM_DIR) if (own and name.startswith(own)) or name in extra)


def shm_all() -> Dict[str, int]:
    """Every /dev/shm entry of the host (other engineers' processes included)."""
    return _sizes(os.listdir(SHM_DIR))


def _sizes(names: Iterable[str]) -> Dict[str, int]:
    sizes = {}
    for name in names:
        try:
            sizes[name] = os.stat(os.path.join(SHM_DIR, name)).st_size
        except FileNotFoundError:  # removed between the listing and the stat
            pass
    return sizes


def tmp_folders(server_ids: Iterable[str]) -> List[str]:
    """Temporary workspace folders (``/tmp/<server id>-*``) of `server_ids`."""
    tmp = tempfile.gettempdir()
    ids = tuple(i for i in server_ids if i)
    return sorted(name for name in os.listdir(tmp) if ids and name.startswith(ids))


def shm_names_used(processes: Iterable[psutil.Process]) -> List[str]:
    """The /dev/shm entries `processes` have mapped or open right now (from /proc)."""
    names = set()
    for process in processes:
        try:
            with open(f"/proc/{process.pid}/maps", encoding="utf-8", errors="replace") as maps:
                for line in maps:
                    path = line.split(maxsplit=5)[-1].strip()
                    if path.startswith(SHM_DIR + "/"):
                        names.add(path[len(SHM_DIR) + 1:].replace(" (deleted)", ""))
            for fd in os.listdir(f"/proc/{process.pid}/fd"):
                target = os.readlink(f"/proc/{process.pid}/fd/{fd}")
                if target.startswith(SHM_DIR + "/"):
                    names.add(target[len(SHM_DIR) + 1:].replace(" (deleted)", ""))
        except OSError:  # the process ended meanwhile
            pass
    return sorted(names)
