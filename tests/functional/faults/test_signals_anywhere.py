"""SIGTERM anywhere inside ``with Triton()`` (here: in the script's own code between two `bind`
calls) stops the server and ends the script cleanly, also as PID 1; Ctrl+C there still raises
``KeyboardInterrupt`` in the script, and the ``with`` block cleans up. Against the real server."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest
from support import free_ports, wait_until

pytestmark = pytest.mark.functional

SCRIPT = textwrap.dedent("""
    import json, os, sys, time
    import numpy as np
    from pytriton.decorators import batch
    from pytriton.model_config import ModelConfig, Tensor
    from pytriton.triton import Triton, TritonConfig

    http, grpc, metrics = (int(port) for port in sys.argv[1:4])
    tensors = dict(inputs=[Tensor(name="x", dtype=np.float32, shape=(1,))],
                   outputs=[Tensor(name="y", dtype=np.float32, shape=(1,))])
    with Triton(config=TritonConfig(http_port=http, grpc_port=grpc, metrics_port=metrics)) as triton:
        triton.bind("First", batch(lambda x: {"y": x}), config=ModelConfig(max_batch_size=2), **tensors)
        print(json.dumps({"server_id": triton._workspace.server_id, "workspace": str(triton._workspace.path)}),
              flush=True)
        time.sleep(60)  # the script's own work (say, fetching the next model's weights)
        triton.bind("Second", batch(lambda x: {"y": x}), config=ModelConfig(max_batch_size=2), **tensors)
        triton.serve()
    print("after the with block", flush=True)
""")


def _can_unshare() -> bool:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return False
    return subprocess.run(["unshare", "-p", "-f", "--mount-proc", "true"], capture_output=True).returncode == 0


def _leftovers(server_id: str, workspace: str) -> dict:
    processes = []
    for process in psutil.process_iter(["cmdline"]):
        cmdline = " ".join(process.info.get("cmdline") or [])
        if server_id in cmdline:
            processes.append(cmdline[:120])
    segments = [name for name in os.listdir("/dev/shm") if name.startswith(server_id)]
    return {"processes": processes, "segments": segments, "workspace": pathlib.Path(workspace).exists()}


def _run(tmp_path, signum: int, wrapper=()) -> tuple:
    script = tmp_path / "script.py"
    script.write_text(SCRIPT)
    ports = [str(port) for port in free_ports(3)]
    process = subprocess.Popen([*wrapper, sys.executable, str(script), *ports], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    try:
        line = process.stdout.readline()
        assert line, process.stderr.read()[-3000:]
        info = json.loads(line)
        time.sleep(0.5)  # past the print, into the script's own sleep
        target = process.pid
        if wrapper:  # signal the script itself, PID 1 of its namespace, not unshare
            children = psutil.Process(process.pid).children(recursive=True)
            target = next(p.pid for p in children if str(script) in " ".join(p.cmdline()))
        os.kill(target, signum)
        out, err = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    assert wait_until(lambda: _leftovers(info["server_id"], info["workspace"]) == {
        "processes": [], "segments": [], "workspace": False}, 5.0), _leftovers(info["server_id"], info["workspace"])
    return process.returncode, out, err


def test_sigterm_in_the_scripts_own_code_stops_cleanly(tmp_path):
    returncode, out, err = _run(tmp_path, signal.SIGTERM)
    assert returncode == 143, err[-3000:]  # 128 + SIGTERM, after the with block stopped the server
    assert "after the with block" not in out
    assert "Traceback" not in err, err[-3000:]


@pytest.mark.skipif(not _can_unshare(), reason="needs root and unshare for a PID namespace")
def test_sigterm_as_pid_1_stops_cleanly(tmp_path):
    returncode, _, err = _run(tmp_path, signal.SIGTERM, wrapper=("unshare", "-p", "-f", "--mount-proc"))
    assert returncode == 143, err[-3000:]


def test_ctrl_c_in_the_scripts_own_code_raises_keyboard_interrupt_and_cleans_up(tmp_path):
    returncode, _, err = _run(tmp_path, signal.SIGINT)
    assert "KeyboardInterrupt" in err and "time.sleep(60)" in err, err[-3000:]
    assert returncode != 0
