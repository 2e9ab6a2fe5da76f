"""Helpers shared by the test layers: free ports, server configs, leftovers of our servers."""

from __future__ import annotations

import contextlib
import os
import socket
from typing import Iterator

from pytriton.triton import Triton, TritonConfig


def free_ports(count: int) -> list:
    """Ports nothing listens on right now (the kernel picks them, so parallel servers don't collide)."""
    sockets, ports = [], []
    for _ in range(count):
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        sockets.append(probe)
        ports.append(probe.getsockname()[1])
    for probe in sockets:
        probe.close()
    return ports


def server_config(**overrides) -> TritonConfig:
    """A TritonConfig on free ports, quiet, with a short exit timeout for fast tests."""
    http, grpc, metrics = free_ports(3)
    options = {"http_port": http, "grpc_port": grpc, "metrics_port": metrics, "exit_timeout_secs": 5}
    options.update(overrides)
    return TritonConfig(**options)


@contextlib.contextmanager
def running_triton(**config_overrides) -> Iterator[Triton]:
    """A `Triton` on free ports; the body binds models and calls `run()`; always stopped."""
    triton = Triton(config=server_config(**config_overrides))
    try:
        yield triton
    finally:
        triton.stop()


def http_url(triton_config: TritonConfig) -> str:
    return f"http://127.0.0.1:{triton_config.http_port}"


def grpc_url(triton_config: TritonConfig) -> str:
    return f"grpc://127.0.0.1:{triton_config.grpc_port}"


def our_leftovers() -> dict:
    """Processes and shared-memory segments of pytriton servers owned by this test process."""
    import psutil

    marker = f"pytriton-{os.getpid()}-"
    processes = []
    for process in psutil.process_iter(["cmdline"]):
        cmdline = " ".join(process.info.get("cmdline") or [])
        if marker in cmdline and process.pid != os.getpid():
            processes.append(cmdline[:120])
    segments = shm_entries(marker)
    return {"processes": processes, "segments": segments}


def shm_entries(prefix: str) -> list:
    """The /dev/shm names starting with `prefix`, sorted."""
    return sorted(name for name in os.listdir("/dev/shm") if name.startswith(prefix))


def http_status(url: str, timeout_s: float = 2.0):
    """The HTTP status of a GET of `url`, or the name of the error when nothing answered."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError as exc:
        return type(exc).__name__


def stub_processes(model_name: str, root_pid: int = None) -> list:
    """The live Python-backend stub processes serving `model_name` under `root_pid` (default: this process)."""
    import psutil

    found = []
    for process in psutil.Process(root_pid or os.getpid()).children(recursive=True):
        try:
            cmdline = process.cmdline()
            if process.status() == psutil.STATUS_ZOMBIE:
                continue
        except psutil.NoSuchProcess:
            continue
        if cmdline and cmdline[0].endswith("triton_python_backend_stub") and f"/{model_name}/" in " ".join(cmdline):
            found.append(process)
    return found


def wait_until(condition, timeout_s: float, interval_s: float = 0.05):
    """Poll `condition` until it returns a truthy value (returned) or `timeout_s` passes (None)."""
    import time

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(interval_s)
    return None
