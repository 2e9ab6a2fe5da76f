"""What the three harness programs share: the user process, its footprint, tables.

`UserProcess` starts ``harness/serve.py`` (a `Triton` serving the echo models) as a child on
free ports, in its own session and dying with the harness (``PR_SET_PDEATHSIG``), waits for its
models against a monotonic deadline, and stops it politely (SIGTERM, bounded wait, then SIGKILL
of the whole tree). `footprint` reads what the soak watches: RSS of the user process, of its
tritonserver and of each Python-backend stub (children of tritonserver), the bytes of the
server's /dev/shm segments (pytriton's arenas apart), and the fds and threads of the user process.
"""

from __future__ import annotations

import ctypes
import json
import os
import pathlib
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from typing import Callable, Dict, Iterable, List, Optional, Sequence

import psutil

HARNESS = pathlib.Path(__file__).resolve().parent
REPO = HARNESS.parent
MODELS = ("echo", "stream", "text", "slow", "slow_stream")
SHM_DIR = "/dev/shm"
_PR_SET_PDEATHSIG = 1


def free_ports(count: int) -> List[int]:
    """Ports nothing listens on right now, picked by the kernel (parallel servers don't collide)."""
    probes = []
    for _ in range(count):
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        probes.append(probe)
    ports = [probe.getsockname()[1] for probe in probes]
    for probe in probes:
        probe.close()
    return ports


def _die_with_parent() -> None:
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def log(message: str) -> None:
    """Progress goes to stderr; stdout holds the report."""
    print(message, file=sys.stderr, flush=True)


class UserProcess:
    """``harness/serve.py`` in a child process: the user's side of the library, watched from outside.

    Args:
        fault: value of ``PYTRITON_HARNESS_FAULT`` for the child (a planted bug), or None.
    """

    def __init__(self, fault: Optional[str] = None) -> None:
        self.http_port, self.grpc_port, self.metrics_port = free_ports(3)
        self._log = tempfile.NamedTemporaryFile("w+", prefix="pytriton-harness-", suffix=".log")
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH", "")]))
        if fault:
            env["PYTRITON_HARNESS_FAULT"] = fault
        argv = [sys.executable, str(HARNESS / "serve.py"), "--http-port", str(self.http_port),
                "--grpc-port", str(self.grpc_port), "--metrics-port", str(self.metrics_port)]
        self._process = subprocess.Popen(
            argv, env=env, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
            start_new_session=True, preexec_fn=_die_with_parent,
        )  # fmt: skip
        self.pid = self._process.pid
        self.shm_prefix = f"pytriton-{self.pid}-"

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        return f"grpc://127.0.0.1:{self.grpc_port}"

    def url(self, protocol: str) -> str:
        return self.http_url if protocol == "http" else self.grpc_url

    def __enter__(self) -> UserProcess:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def is_running(self) -> bool:
        return self._process.poll() is None

    def log_tail(self, chars: int = 4000) -> str:
        self._log.flush()
        self._log.seek(0)
        return self._log.read()[-chars:]

    def wait_ready(self, timeout_s: float = 180.0) -> float:
        """Seconds until every model answers ready; raises with the log's tail if it never does."""
        start = time.monotonic()
        deadline = start + timeout_s
        pending = list(MODELS)
        while pending:
            if not self.is_running():
                raise RuntimeError(f"user process exited ({self._process.returncode}):\n{self.log_tail()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"models {pending} not ready within {timeout_s} s:\n{self.log_tail()}")
            if http_status(f"{self.http_url}/v2/models/{pending[0]}/ready") == 200:
                pending.pop(0)
            else:
                time.sleep(0.2)
        return time.monotonic() - start

    def is_live(self) -> bool:
        return self.is_running() and http_status(f"{self.http_url}/v2/health/live") == 200

    def server(self) -> Optional[psutil.Process]:
        """The tritonserver the user process started (None if gone)."""
        try:
            children = psutil.Process(self.pid).children()
        except psutil.NoSuchProcess:
            return None
        return next((child for child in children if _name(child) == "tritonserver"), None)

    def stubs(self) -> List[psutil.Process]:
        """The Python-backend stubs: children of tritonserver, one per model instance."""
        server = self.server()
        if server is None:
            return []
        try:
            return sorted(server.children(), key=lambda process: process.pid)
        except psutil.NoSuchProcess:
            return []

    def stop(self, timeout_s: float = 60.0) -> Optional[int]:
        """SIGTERM, wait up to `timeout_s`, then SIGKILL the tree; returns the exit code."""
        try:
            tree = psutil.Process(self.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            tree = []
        if self.is_running():
            self._process.send_signal(signal.SIGTERM)
            try:
                self._process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        _, alive = psutil.wait_procs([p for p in tree if p.is_running()], timeout=5)
        for process in alive:
            try:
                process.kill()
            except psutil.NoSuchProcess:
                pass
        self._log.close()
        return self._process.returncode

    def leftovers(self) -> Dict[str, List[str]]:
        """Processes and /dev/shm segments of this server that survived `stop`."""
        processes = []
        for process in psutil.process_iter(["cmdline", "status"]):
            cmdline = " ".join(process.info.get("cmdline") or [])
            if self.shm_prefix in cmdline and process.info.get("status") != psutil.STATUS_ZOMBIE:
                processes.append(cmdline[:120])
        return {"processes": processes, "segments": shm_names(self.shm_prefix)}


def _name(process: psutil.Process) -> str:
    try:
        return process.name()
    except psutil.Error:
        return ""


def http_status(url: str, timeout_s: float = 2.0) -> int:
    """HTTP status of a GET (0 when nothing answers)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return int(error.code)
    except (OSError, ValueError):
        return 0


def shm_names(prefix: str) -> List[str]:
    return sorted(name for name in os.listdir(SHM_DIR) if name.startswith(prefix))


def shm_sizes(prefix: str) -> Dict[str, int]:
    """Size of each /dev/shm entry whose name starts with `prefix`."""
    sizes = {}
    for name in shm_names(prefix):
        try:
            sizes[name] = os.stat(os.path.join(SHM_DIR, name)).st_size
        except FileNotFoundError:  # unlinked between the listing and the stat
            pass
    return sizes


def shm_bytes(prefix: str) -> int:
    """Total size of the /dev/shm entries whose names start with `prefix`."""
    return sum(shm_sizes(prefix).values())


def rss_parts(pid: int) -> Dict[str, int]:
    """Resident bytes split by kind (/proc/<pid>/status): anonymous (the heaps) and shared memory
    (mapped /dev/shm pages this process touched), which RSS adds together."""
    parts = {"anon": 0, "shm": 0}
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith(("RssAnon:", "RssShmem:")):
                    key = "anon" if line.startswith("RssAnon:") else "shm"
                    parts[key] = int(line.split()[1]) * 1024
    except OSError:
        pass
    return parts


def _rss(process: Optional[psutil.Process]) -> int:
    if process is None:
        return 0
    try:
        return int(process.memory_info().rss)
    except psutil.Error:
        return 0


def process_counts(pid: int) -> Dict[str, int]:
    """Open fds and threads of process `pid`."""
    process = psutil.Process(pid)
    return {"fds": process.num_fds(), "threads": process.num_threads()}


ARENA_NAME = re.compile(r"-(?P<model>m[0-9a-f]{10})-(?P<instance>\d+)-(?P<direction>in|out)-\d+$")
"""How the name of a pytriton arena's segment ends (`pytriton.ipc.protocol.segment_name`): the model
version's key, the instance, the direction and the generation."""


def arena_segments(sizes: Dict[str, int]) -> Dict[str, List[int]]:
    """The arena segments among `sizes` (name -> bytes), by arena: the name up to its generation."""
    arenas: Dict[str, List[int]] = {}
    for name, size in sizes.items():
        if ARENA_NAME.search(name):
            arenas.setdefault(name.rpartition("-")[0], []).append(size)
    return arenas


def arena_model(arena: str) -> str:
    """The model version key (`pytriton.ipc.protocol.model_key`) in an arena's name."""
    match = ARENA_NAME.search(arena + "-0")
    return match.group("model") if match else ""


def footprint(user: UserProcess, arena_bound: Callable[[str], int] = lambda arena: 2**62) -> Dict[str, float]:
    """One sample of what the soak watches (bytes, counts).

    The RSS of the user process and of each stub is its own memory: RSS without the /dev/shm
    pages it maps (``shm_user_mapped``, ``info_stub*_shm``), which are the arenas and Triton's
    pool, counted in /dev/shm.
    The server's /dev/shm is split into pytriton's arenas (``shm_arenas``, whose size follows the
    payloads of their last messages within a stated bound: `pytriton.ipc.shm.arena_bound`) and
    the rest (``shm_pool``: Triton's Python-backend pool, the lease). ``arena_extra_segments``
    counts segments beyond one per arena, ``arena_over_bound`` the bytes by which the largest
    arena exceeds `arena_bound` (given the arena's name), both 0 unless something leaks.
    """
    stubs = user.stubs()
    sizes = shm_sizes(user.shm_prefix)
    arenas = arena_segments(sizes)
    arena_bytes = sum(sum(segments) for segments in arenas.values())
    user_parts = rss_parts(user.pid)
    sample: Dict[str, float] = {
        "t": time.monotonic(),
        "rss_user": _rss(psutil.Process(user.pid)) - user_parts["shm"],
        "rss_server": _rss(user.server()),
        "rss_stubs": 0,
        "stubs": len(stubs),
        "shm_pool": sum(sizes.values()) - arena_bytes,
        "shm_arenas": arena_bytes,
        "arena_extra_segments": sum(len(segments) - 1 for segments in arenas.values()),
        "arena_over_bound": max([0] + [sum(segments) - arena_bound(arena) for arena, segments in arenas.items()]),
    }
    for index, stub in enumerate(stubs):
        parts = rss_parts(stub.pid)
        sample[f"rss_stub{index}"] = _rss(stub) - parts["shm"]
        sample["rss_stubs"] += sample[f"rss_stub{index}"]
        for kind, value in parts.items():
            sample[f"info_stub{index}_{kind}"] = value
    sample["shm_user_mapped"] = user_parts["shm"]  # the arenas the user process maps, its own and the backend's
    sample["info_user_anon"] = user_parts["anon"]  # reported, not judged: the heaps, most of rss_user
    sample.update(process_counts(user.pid))
    return sample


def settle(read: Callable[[], Dict[str, float]], ok: Callable[[Dict[str, float]], bool],
           timeout_s: float, period_s: float = 0.5) -> Dict[str, float]:
    """Read until `ok` holds or `timeout_s` passes; returns the last reading (threads end lazily)."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = read()
        if ok(value) or time.monotonic() > deadline:
            return value
        time.sleep(period_s)


def table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """A plain-text table with right-aligned columns."""
    cells = [[str(header) for header in headers]] + [[str(cell) for cell in row] for row in rows]
    widths = [max(len(row[column]) for row in cells) for column in range(len(headers))]
    lines = ["  ".join(cell.rjust(width) for cell, width in zip(row, widths)) for row in cells]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(lines)


def conclude(figures: Dict[str, object], failures: Sequence[str], json_path: str) -> int:
    """Write the figures as JSON (when a path is given); the exit status: 1 when anything failed."""
    if json_path:
        with open(json_path, "w") as out:
            json.dump(figures, out, indent=1, default=str)
    return 0 if not failures else 1


def mib(value: float) -> str:
    return f"{value / 2**20:.1f}"


def served_backend() -> str:
    """The Triton backend the user process serves its models with, unless told otherwise."""
    from pytriton.server.distribution import find_distribution, serving_backend

    configured = os.environ.get("PYTRITON_TRITON_CONFIG_MODEL_BACKEND") or None
    return serving_backend(find_distribution(), configured)
