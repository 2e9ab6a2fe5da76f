"""`python -m pytriton check` on this machine: every check passes here; a busy port or a missing
server tree fails it with the remedy; `--build` leaves out the checks of the running container."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from typing import Dict, List, Optional

import pytest
from support import free_ports

pytestmark = pytest.mark.functional

ALL_CHECKS = ["glibc", "libpython", "server tree", "backend", "stub libraries", "stub numpy", "server start",
              "/dev/shm", "gpu", "ports", "metrics, tracing", "workspace"]
RUNTIME_ONLY = ["/dev/shm", "gpu", "ports", "metrics, tracing"]


def run_check(*args: str, env: Optional[Dict[str, str]] = None) -> subprocess.CompletedProcess:
    """The command on free ports (the default 8000-8002 may be taken by other servers on this host)."""
    http, grpc, metrics = free_ports(3)
    environ = dict(os.environ, PYTRITON_TRITON_CONFIG_HTTP_PORT=str(http),
                   PYTRITON_TRITON_CONFIG_GRPC_PORT=str(grpc), PYTRITON_TRITON_CONFIG_METRICS_PORT=str(metrics))
    environ.update(env or {})
    return subprocess.run([sys.executable, "-m", "pytriton", "check", *args], env=environ, capture_output=True,
                          text=True, timeout=120, check=False)


def verdicts(output: str) -> Dict[str, List[str]]:
    """Check name -> the verdicts printed for it."""
    found: Dict[str, List[str]] = {}
    for line in output.splitlines():
        verdict, _, rest = line.partition("  ")
        if verdict in ("PASS", "INFO", "WARN", "FAIL"):
            found.setdefault(rest.split(":")[0], []).append(verdict)
    return found


def line_of(output: str, name: str) -> str:
    (line,) = [line for line in output.splitlines() if line[6:].startswith(f"{name}:")]
    return line


def test_every_check_passes_on_this_machine():
    result = run_check()
    assert result.returncode == 0, result.stdout + result.stderr
    assert verdicts(result.stdout) == {name: ["PASS"] for name in ALL_CHECKS}, result.stdout
    assert result.stdout.splitlines()[-1] == f"pytriton check: {len(ALL_CHECKS)} PASS"
    assert result.stdout.splitlines()[0].startswith("pytriton ") and "Triton Inference Server 2.51.0" in result.stdout
    # without the script, the port check says what it looked at
    assert "the defaults and PYTRITON_TRITON_CONFIG_* only" in line_of(result.stdout, "ports")


@pytest.mark.parametrize("command", [["-m", "pytriton"], None], ids=["python -m pytriton", "pytriton"])
def test_version_names_the_library_and_the_bundled_server(command):
    from pytriton import __version__

    argv = [sys.executable, *command] if command else [shutil.which("pytriton", path=os.path.dirname(sys.executable))]
    result = subprocess.run([*argv, "--version"], capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"pytriton {__version__}, Triton Inference Server 2.51.0 (bundled), Python 3.")


def test_a_script_given_is_read_for_its_ports_and_a_busy_one_is_named_with_its_holder(tmp_path):
    busy = socket.socket()
    busy.bind(("0.0.0.0", 0))
    busy.listen()
    port = busy.getsockname()[1]
    http, metrics = free_ports(2)
    script = tmp_path / "serve.py"
    script.write_text(
        "from pytriton.triton import Triton, TritonConfig\n"
        f"config = TritonConfig(http_port={http}, grpc_port={port}, metrics_port={metrics})\n"
        "with Triton(config=config) as triton:\n    triton.serve()\n"
    )
    try:
        result = run_check(str(script))
    finally:
        busy.close()
    assert result.returncode == 1, result.stdout
    line = line_of(result.stdout, "ports")
    assert f"port {port} (grpc_port) is already in use on all interfaces by pid {os.getpid()}" in line
    assert f"serve.py sets http_port={http}, grpc_port={port}, metrics_port={metrics} in TritonConfig(...)" in line
    assert result.stdout.splitlines()[-1].endswith("on other ports this machine can serve")


def test_a_busy_port_fails_the_check_with_the_remedy():
    busy = socket.socket()
    busy.bind(("0.0.0.0", 0))
    busy.listen()
    port = busy.getsockname()[1]
    try:
        result = run_check(env={"PYTRITON_TRITON_CONFIG_GRPC_PORT": str(port)})
        build = run_check("--build", env={"PYTRITON_TRITON_CONFIG_GRPC_PORT": str(port)})
    finally:
        busy.close()
    assert result.returncode == 1, result.stdout
    line = line_of(result.stdout, "ports")
    assert line.startswith("FAIL") and f"port {port} (grpc_port) is already in use" in line
    assert "fix: stop what uses it, or choose another port: PYTRITON_TRITON_CONFIG_GRPC_PORT=<port>" in line
    assert verdicts(result.stdout)["server start"] == ["PASS"]  # the throwaway server picks its own ports
    # An image build has other ports than the container that will serve: --build does not look at them.
    assert build.returncode == 0, build.stdout
    assert set(verdicts(build.stdout)) == set(ALL_CHECKS) - set(RUNTIME_ONLY)


def test_an_empty_server_dir_fails_with_the_remedy(tmp_path):
    result = run_check("--build", env={"PYTRITON_TRITON_SERVER_DIR": str(tmp_path)})
    assert result.returncode == 1, result.stdout
    line = line_of(result.stdout, "server tree")
    assert line.startswith("FAIL") and f"PYTRITON_TRITON_SERVER_DIR='{tmp_path}' has no bin/tritonserver" in line
    assert "fix: reinstall pytriton with pip" in line
    assert verdicts(result.stdout)["server start"] == ["FAIL"]
    assert "cannot serve yet" in result.stdout.splitlines()[-1]


def test_a_server_that_does_not_start_fails_the_start_check(tmp_path):
    """A tree whose binary exits at once: the tree looks right, the throwaway start says what it printed."""
    from pytriton.server.distribution import BUNDLED_ROOT

    (tmp_path / "bin").mkdir()
    binary = tmp_path / "bin" / "tritonserver"
    binary.write_text("#!/bin/sh\necho 'E0101 00:00:00 cannot load libtritonserver.so'\nexit 3\n")
    binary.chmod(0o755)
    for name in ("backends", "python_backend_stubs", "stub_python", "lib"):
        (tmp_path / name).symlink_to(BUNDLED_ROOT / name)
    result = run_check("--build", env={"PYTRITON_TRITON_SERVER_DIR": str(tmp_path)})
    assert result.returncode == 1, result.stdout
    line = line_of(result.stdout, "server start")
    assert line.startswith("FAIL") and "exited with code 3" in line and "cannot load libtritonserver.so" in line
    assert verdicts(result.stdout)["stub libraries"] == ["PASS"]


def test_dockers_default_shm_warns_with_the_fix_but_does_not_fail():
    """In a private mount namespace with Docker's 64 MB /dev/shm (needs root and unshare)."""
    mount = "mount -t tmpfs -o size=64m tmpfs /dev/shm"
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare to mount a private 64 MB /dev/shm")
    probe = subprocess.run(["unshare", "-m", "sh", "-c", mount], capture_output=True, text=True, timeout=10)
    if probe.returncode != 0:
        pytest.skip(f"unshare -m with a tmpfs mount is not permitted here: {probe.stderr.strip()}")
    http, grpc, metrics = free_ports(3)
    command = (f"{mount} && PYTRITON_TRITON_CONFIG_HTTP_PORT={http} PYTRITON_TRITON_CONFIG_GRPC_PORT={grpc} "
               f"PYTRITON_TRITON_CONFIG_METRICS_PORT={metrics} exec {sys.executable} -m pytriton check")
    result = subprocess.run(["unshare", "-m", "sh", "-c", command], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr  # a WARN does not fail
    line = line_of(result.stdout, "/dev/shm")
    assert line.startswith("WARN") and "/dev/shm is 64.0 MiB" in line and "docker run --shm-size=256m" in line
    assert verdicts(result.stdout)["server start"] == ["PASS"]


def test_the_console_script_runs_the_same_command():
    script = shutil.which("pytriton", path=os.path.dirname(sys.executable))
    assert script, "no `pytriton` script next to this Python: reinstall the package (make install)"
    result = subprocess.run([script, "check", "--help"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and "--build" in result.stdout, result.stdout + result.stderr
    wrong = subprocess.run([script, "chek"], capture_output=True, text=True, timeout=60)
    assert wrong.returncode == 2 and "invalid choice: 'chek'" in wrong.stderr
