"""CUDA in forked model instances (``ModelConfig(process_instances=True)``): GPU machines only.

`bind` refuses process instances once torch has initialised CUDA in the user's process (a forked
child cannot use a CUDA context it inherits). What must work is the other order, the one the docs
recommend: the parent never touches the device, and each forked instance starts CUDA on its own.
A script does this in a fresh interpreter (this test process may have probed CUDA already):

* it never asks torch about CUDA: the forked instance computes on the GPU;
* it first checks ``torch.cuda.is_available()``, as many scripts do. That starts the CUDA driver
  and torch marks every later fork as unable to use CUDA (measured on an H100: each request then
  failed with "Cannot re-initialize CUDA in forked subprocess"), so `bind` must refuse, naming
  the way out;
* the same check with ``PYTORCH_NVML_BASED_CUDA_CHECK=1`` (torch asks NVML instead): serves.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch
from support import free_ports

pytestmark = [
    pytest.mark.functional,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (torch.cuda.is_available() is False)"),
]

SCRIPT = textwrap.dedent(
    """
    import json, os, sys
    import numpy as np
    import torch
    from pytriton.client import ModelClient
    from pytriton.decorators import batch
    from pytriton.model_config import ModelConfig, Tensor
    from pytriton.triton import Triton, TritonConfig

    http, grpc, metrics, probe = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "probe"
    if probe:
        assert torch.cuda.is_available()

    @batch
    def double(x):
        y = torch.from_numpy(x).to("cuda") * 2
        return {"y": y, "pid": np.full((len(x), 1), os.getpid(), np.int64)}

    config = TritonConfig(http_port=http, grpc_port=grpc, metrics_port=metrics, exit_timeout_secs=5)
    with Triton(config=config) as triton:
        triton.bind(
            "Double", double,
            inputs=[Tensor(name="x", dtype=np.float32, shape=(-1,))],
            outputs=[Tensor(name="y", dtype=np.float32, shape=(-1,)), Tensor(name="pid", dtype=np.int64, shape=(1,))],
            config=ModelConfig(max_batch_size=8, process_instances=True),
        )
        triton.run()
        with ModelClient(f"http://127.0.0.1:{http}", "Double", init_timeout_s=60) as client:
            result = client.infer_batch(x=np.array([[1.0, 2.5], [3.0, 4.0]], np.float32))
    print(json.dumps({"y": result["y"].tolist(), "pid": int(result["pid"][0][0]), "me": os.getpid(),
                      "parent_cuda": torch.cuda.is_initialized()}))
    """
)


def _serve(tmp_path, probe: str, **env: str) -> subprocess.CompletedProcess:
    script = tmp_path / "serve_cuda.py"
    script.write_text(SCRIPT)
    return subprocess.run([sys.executable, str(script), *map(str, free_ports(3)), probe],
                          capture_output=True, text=True, timeout=240, env={**os.environ, **env})


@pytest.mark.parametrize("probe,env", [("no-probe", {}), ("probe", {"PYTORCH_NVML_BASED_CUDA_CHECK": "1"})],
                         ids=["never-asked", "asked-through-nvml"])
def test_forked_instance_runs_cuda_while_the_parent_never_initialises_it(tmp_path, probe, env):
    done = _serve(tmp_path, probe, **env)
    assert done.returncode == 0, done.stderr[-4000:]
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    assert answer["y"] == [[2.0, 5.0], [6.0, 8.0]]
    assert answer["pid"] != answer["me"]  # computed in the forked instance, not in the parent
    assert answer["parent_cuda"] is False


def test_bind_refuses_process_instances_after_torch_probed_cuda(tmp_path):
    done = _serve(tmp_path, "probe", PYTORCH_NVML_BASED_CUDA_CHECK="0")
    assert done.returncode != 0
    assert "PyTritonModelConfigError" in done.stderr and "model 'Double'" in done.stderr, done.stderr[-4000:]
    assert "PYTORCH_NVML_BASED_CUDA_CHECK=1" in done.stderr
    assert "Cannot re-initialize CUDA" not in done.stderr  # refused at bind, before any request


PLACED_SCRIPT = textwrap.dedent(
    """
    import json, os, sys
    import numpy as np
    from pytriton.client import FuturesModelClient
    from pytriton.decorators import batch
    from pytriton.model_config import InstanceSetup, ModelConfig, Tensor
    from pytriton.triton import Triton, TritonConfig

    http, grpc, metrics = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    devices = json.loads(sys.argv[4])

    def load(placement):  # in each worker process, after CUDA_VISIBLE_DEVICES names its one device
        import torch
        weights = torch.full((1,), 2.0, device="cuda")
        uuid = str(torch.cuda.get_device_properties(0).uuid)

        @batch
        def double(x):
            y = torch.from_numpy(x).to("cuda") * weights
            seen = json.dumps({"instance": placement.instance, "device": placement.device, "uuid": uuid,
                               "visible": os.environ["CUDA_VISIBLE_DEVICES"], "count": torch.cuda.device_count()})
            return {"y": y.cpu().numpy(), "seen": np.array([[seen.encode()]] * len(x), dtype=object)}

        return double

    import torch  # imported, never asked about CUDA: the worker processes may use it
    config = TritonConfig(http_port=http, grpc_port=grpc, metrics_port=metrics, exit_timeout_secs=5)
    with Triton(config=config) as triton:
        triton.bind(
            "Placed", InstanceSetup(load),
            inputs=[Tensor(name="x", dtype=np.float32, shape=(-1,))],
            outputs=[Tensor(name="y", dtype=np.float32, shape=(-1,)), Tensor(name="seen", dtype=bytes, shape=(1,))],
            config=ModelConfig(max_batch_size=8, process_instances=True, devices=devices),
        )
        triton.run()
        with FuturesModelClient(f"http://127.0.0.1:{http}", "Placed", max_workers=8, init_timeout_s=120) as client:
            futures = [client.infer_sample(x=np.array([1.0, 2.5], np.float32)) for _ in range(32)]
            results = [future.result() for future in futures]
    print(json.dumps({"y": sorted({tuple(r["y"].tolist()) for r in results}),
                      "seen": sorted({r["seen"][0].decode() for r in results}),
                      "parent_cuda": torch.cuda.is_initialized()}))
    """
)


def test_each_process_instance_computes_on_its_own_gpu(tmp_path):
    """One instance per GPU of the machine (two on one GPU where it has one): each worker process
    sees exactly its device, and the setup loaded the model there."""
    count = torch.cuda.device_count()
    devices = list(range(count)) if count > 1 else [0, 0]
    script = tmp_path / "serve_placed.py"
    script.write_text(PLACED_SCRIPT)
    done = subprocess.run([sys.executable, str(script), *map(str, free_ports(3)), json.dumps(devices)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    assert answer["y"] == [[2.0, 5.0]]
    assert answer["parent_cuda"] is False
    seen = [json.loads(text) for text in answer["seen"]]
    assert all(entry["count"] == 1 for entry in seen), seen  # each process sees one device
    assert all(entry["visible"] == str(entry["device"]) for entry in seen), seen
    assert {entry["instance"] for entry in seen} <= set(range(len(devices)))
    if count > 1:  # instances on different GPUs: different devices answered
        by_device = {entry["device"]: entry["uuid"] for entry in seen}
        assert len(set(by_device.values())) == len(by_device), seen
