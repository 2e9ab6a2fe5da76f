"""Helpers shared by the test layers: free ports, server configs, leftovers of our servers."""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
from typing import Iterator

import psutil

from pytriton.triton import Triton, TritonConfig


def _ephemeral_range() -> range:
    try:
        low, high = map(int, pathlib.Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    except (OSError, ValueError):
        low, high = 32768, 60999
    return range(low, high + 1)


def free_ports(count: int) -> list:
    """Ports nothing uses right now, outside the kernel's ephemeral range.

    A port the kernel hands out for `bind(0)` is also one it may give the next outgoing
    connection as its local port, between this pick and the server's bind (a second or more
    later); tritonserver then fails to open that endpoint and exits. Below the ephemeral range
    no connection takes a port by itself; random picks keep parallel runs apart.
    """
    ephemeral = _ephemeral_range()
    candidates = [port for port in range(10000, 30000) if port not in ephemeral] or list(range(10000, 30000))
    ports: list = []
    while len(ports) < count:
        port = random.choice(candidates)
        if port in ports:
            continue
        probe = socket.socket()
        try:
            probe.bind(("0.0.0.0", port))
        except OSError:
            continue
        finally:
            probe.close()
        ports.append(port)
    return ports


def server_config(**overrides) -> TritonConfig:
    """A TritonConfig on free ports, quiet, with a short exit timeout for fast tests."""
    http, grpc, metrics = free_ports(3)
    options = {"http_port": http, "grpc_port": grpc, "metrics_port": metrics, "exit_timeout_secs": 5}
    options.update(overrides)
    return TritonConfig(**options)


PROXY_ENV = {"PYTRITON_TRITON_CONFIG_MODEL_BACKEND": "python"}
"""The environment of a serving script on the proxy path (stubs to kill: pytriton's backend runs none)."""


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
    """Processes, shared-memory segments and temporary folders of pytriton servers owned by this
    test process."""
    import tempfile

    import psutil

    marker = f"pytriton-{os.getpid()}-"
    processes = []
    for process in psutil.process_iter(["cmdline"]):
        cmdline = " ".join(process.info.get("cmdline") or [])
        if marker in cmdline and process.pid != os.getpid():
            processes.append(cmdline[:120])
    segments = shm_entries(marker)
    folders = sorted(name for name in os.listdir(tempfile.gettempdir()) if name.startswith(marker))
    return {"processes": processes, "segments": segments, "folders": folders}


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


def forked_children() -> list:
    """Our live children that run this very program: the worker processes forked from us."""
    import psutil

    me = psutil.Process()
    found = []
    for child in me.children():
        try:
            if child.status() != psutil.STATUS_ZOMBIE and child.cmdline() == me.cmdline():
                found.append(child.pid)
        except psutil.NoSuchProcess:
            pass
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


SERVING_SCRIPT = pathlib.Path(__file__).parent / "functional" / "faults" / "serving_script.py"


class ServingScript:
    """`SERVING_SCRIPT` (``Triton.serve()`` as users write it) in a child process, optionally wrapped
    (``unshare``, ``setpriv``); its first stdout line (JSON: pid, segments) is read as `info`."""

    def __init__(
        self, exit_timeout_s: int = 10, wrapper: tuple = (), env: dict = None, wait_ready: bool = True
    ) -> None:
        self.http, self.grpc, self.metrics = free_ports(3)
        argv = [*wrapper, sys.executable, str(SERVING_SCRIPT), str(self.http), str(self.grpc), str(self.metrics),
                str(exit_timeout_s)]
        self._stderr = tempfile.TemporaryFile(mode="w+")
        self.process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=self._stderr, text=True, env=env)
        self.base = f"http://127.0.0.1:{self.http}"
        self.info: dict = {}
        if not wait_ready:
            return
        line = self.process.stdout.readline()
        if not line:
            self.process.wait()
            raise AssertionError(f"the serving script did not start: {self.stderr()[-3000:]}")
        self.info = json.loads(line)

    def root(self) -> psutil.Process:
        """The process that runs the script (inside a wrapper, its descendant running Python)."""
        process = psutil.Process(self.process.pid)
        for child in [process, *process.children(recursive=True)]:
            cmdline = child.cmdline()
            if cmdline and cmdline[0] == sys.executable and str(SERVING_SCRIPT) in cmdline:
                return child
        raise AssertionError("no process runs the serving script")

    def server(self) -> psutil.Process:
        found = [p for p in self.root().children() if p.name() == "tritonserver"]
        assert len(found) == 1, found
        return found[0]

    def stderr(self) -> str:
        self._stderr.seek(0)
        return self._stderr.read()

    def finish(self, timeout_s: float) -> tuple:
        try:
            self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            try:
                self.root().send_signal(signal.SIGUSR1)
                time.sleep(1)
            except (psutil.NoSuchProcess, AssertionError):
                pass
            self.kill()
            raise AssertionError(f"the serving script did not exit within {timeout_s} s; its stderr:\n"
                                 f"{self.stderr()[-3000:]}") from None
        return self.process.returncode, self.stderr()

    def kill(self) -> None:
        for process in [*psutil.Process(self.process.pid).children(recursive=True)]:
            try:
                process.kill()
            except psutil.NoSuchProcess:
                pass
        self.process.kill()
        self.process.wait()


# A model configuration as tritonserver 2.51 answers it over HTTP (every field, numbers), for
# the tests of the clients' and the parser's reading of it.
HTTP_MODEL_CONFIG = {
    "name": "Echo",
    "backend": "python",
    "max_batch_size": 8,
    "input": [
        {"name": "x", "data_type": "TYPE_FP32", "dims": [-1], "optional": False},
        {"name": "mask", "data_type": "TYPE_BOOL", "dims": [-1], "optional": True},
    ],
    "output": [{"name": "y", "data_type": "TYPE_FP32", "dims": [-1]}],
    "dynamic_batching": {
        "preferred_batch_size": [2, 4],
        "max_queue_delay_microseconds": 100,
        "preserve_ordering": False,
        "priority_levels": 2,
        "default_priority_level": 1,
        "default_queue_policy": {
            "timeout_action": "REJECT",
            "default_timeout_microseconds": 0,
            "allow_timeout_override": False,
            "max_queue_size": 5,
        },
        "priority_queue_policy": {
            "2": {
                "timeout_action": "DELAY",
                "default_timeout_microseconds": 7,
                "allow_timeout_override": True,
                "max_queue_size": 3,
            }
        },
    },
    "instance_group": [
        {"name": "Echo_0", "kind": "KIND_CPU", "count": 2, "gpus": []},
        {"name": "Echo_1", "kind": "KIND_CPU", "count": 1, "gpus": []},
    ],
    "response_cache": {"enable": True},
    "parameters": {"pytriton.protocol": {"string_value": "2"}},
}


def served_backend() -> str:
    """The Triton backend this installation serves bound models with (``TritonConfig.model_backend`` unset)."""
    from pytriton.server.distribution import find_distribution, serving_backend

    return serving_backend(find_distribution())


def triton_instances(server: TritonConfig | str, model_name: str) -> int:
    """How many Triton instances serve `model_name` (`server`: its config or HTTP URL), as its loaded configuration says
    (stub processes exist on the proxy path only, so they cannot be counted on both)."""
    import urllib.request

    base = server if isinstance(server, str) else http_url(server)
    with urllib.request.urlopen(f"{base}/v2/models/{model_name}/config", timeout=10) as answer:
        config = json.loads(answer.read())
    return sum(int(group.get("count", 1)) for group in config.get("instance_group", []))
