"""Serves an identity model on a small /dev/shm and prints what happened as one JSON line.

Run by test_small_shm.py inside a mount namespace whose /dev/shm is a 64 MB tmpfs:
``python small_shm_server.py MIB [MIB ...]`` sends one float32 request of each size in MiB, in
order, and reports per request whether the answer came back equal or the error text; then
whether the server and its stub are still the same live processes, and what is left in
/dev/shm and among the children once the server stopped.
"""

from __future__ import annotations

import json
import os
import pathlib
import sys
import time

import numpy as np
import psutil

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))  # tests/, for support.py

from support import free_ports

from pytriton.client import ModelClient
from pytriton.decorators import batch
from pytriton.model_config import ModelConfig, Tensor
from pytriton.server.preflight import warn_if_shm_small
from pytriton.triton import Triton, TritonConfig
from pytriton.worker.context import TritonContext

MIB = 1 << 20
INPUTS = [Tensor(name="INPUT_1", dtype=np.float32, shape=(-1,))]
OUTPUTS = [Tensor(name="OUTPUT_1", dtype=np.float32, shape=(-1,))]
CONFIG = ModelConfig(max_batch_size=2)


@batch
def _identity(INPUT_1):
    return {"OUTPUT_1": INPUT_1}


def _children(kind: str) -> list:
    return [p.pid for p in psutil.Process().children(recursive=True) if kind in " ".join(p.cmdline())]


def _shm_used() -> int:
    info = os.statvfs("/dev/shm")
    return (info.f_blocks - info.f_bfree) * info.f_frsize


def main(sizes_mib: list) -> dict:
    report: dict = {"shm_total": os.statvfs("/dev/shm").f_blocks * os.statvfs("/dev/shm").f_frsize}
    # What the start-up check says here, for a model whose full batch is declared: 16 MiB a sample,
    # 4 samples a batch, in and out.
    fixed = Tensor(name="X", dtype=np.float32, shape=(4 * MIB,))
    declared = TritonContext("fixed", 1, (fixed,), (fixed,), ModelConfig(max_batch_size=4))
    report["warning"] = warn_if_shm_small([declared])
    http, grpc, metrics = free_ports(3)
    triton = Triton(config=TritonConfig(http_port=http, grpc_port=grpc, metrics_port=metrics, exit_timeout_secs=5))
    try:
        triton.bind("identity", _identity, INPUTS, OUTPUTS, config=CONFIG)
        triton.run()
        servers, stubs = _children("bin/tritonserver"), _children("triton_python_backend_stub")
        results = []
        with ModelClient(f"http://127.0.0.1:{http}", "identity", inference_timeout_s=60) as client:
            for mib in sizes_mib:
                data = np.random.default_rng(mib).random((1, mib * MIB // 4), dtype=np.float32)
                started = time.monotonic()
                try:
                    answer = client.infer_batch(INPUT_1=data)["OUTPUT_1"]
                    entry = {"mib": mib, "equal": bool(np.array_equal(answer, data)), "error": None}
                except Exception as exc:  # noqa: BLE001 - the report carries whatever the requester got
                    entry = {"mib": mib, "equal": False, "error": f"{type(exc).__name__}: {exc}"}
                entry["seconds"] = round(time.monotonic() - started, 3)
                entry["shm_used_mib"] = round(_shm_used() / MIB, 1)
                results.append(entry)
        report["results"] = results
        proxy = os.environ.get("PYTRITON_TRITON_CONFIG_MODEL_BACKEND") == "python"
        report["same_processes"] = bool(servers and (stubs or not proxy)) and (
            _children("bin/tritonserver") == servers and _children("triton_python_backend_stub") == stubs
        )
        report["alive"] = all(psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
                              for pid in servers + stubs)
    finally:
        triton.stop()
    report["left_in_shm"] = sorted(os.listdir("/dev/shm"))
    report["left_children"] = [p.pid for p in psutil.Process().children(recursive=True)]
    return report


if __name__ == "__main__":
    print(json.dumps(main([int(arg) for arg in sys.argv[1:]])), flush=True)
