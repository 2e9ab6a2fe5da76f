"""The models of the benchmark served through pytriton, the way a user would write them.

The reference's names, tensors and batching (see bench/servers.py):

* ``identity`` returns its input (``@batch``);
* ``sleep_10ms`` does the same after a fixed 10 ms per call, with a 2 ms queue delay so that
  Triton gathers batches;
* ``cpu_5ms`` spins a pure-Python loop (`cpu_work.spin`, the count the harness calibrated and
  passes as ``--loop-count``) once per batch, with two instances: two callables, in worker
  processes when this pytriton's `ModelConfig` has ``process_instances`` (else threads, which
  share one GIL). The script says which on stderr (``bench: cpu_5ms instances: ...``);
* ``stream_100`` is a generator bound with ``ModelConfig(decoupled=True)``: 100 steps, each
  answering every request of the batch with its input.

With ``--torch-device DEVICE`` (the GPU path, ``run.py --gpu``) it serves only the torch MLP of
bench/torch_mlp.py on that device: ``torch_mlp`` returns the device's tensor as it is (pytriton
copies it to the host), ``torch_mlp_numpy`` the same result as a numpy array.

The harness launches this script as its own process, waits for every model to answer ready,
and stops it with SIGTERM. Run by hand:
``python bench/serve_ours.py --http-port 8000 --grpc-port 8001 --metrics-port 8002``.
The statistics API the harness reads is restricted by default; the harness chooses the token and
passes it in ``$PYTRITON_BENCH_ACCESS_TOKEN``.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from typing import Any, Dict, List

import numpy as np
from cpu_work import spin
from torch_mlp import build

from pytriton.decorators import batch
from pytriton.model_config import DynamicBatcher, ModelConfig, Tensor
from pytriton.triton import Triton, TritonConfig

MAX_BATCH_SIZE = 64
SLEEP_S = 0.01
SLEEP_QUEUE_DELAY_US = 2000
CPU_INSTANCES = 2
STREAM_STEPS = 100
TORCH_QUEUE_DELAY_US = 100


@batch
def identity(INPUT_1: np.ndarray) -> dict:
    return {"OUTPUT_1": INPUT_1}


@batch
def sleep_10ms(INPUT_1: np.ndarray) -> dict:
    time.sleep(SLEEP_S)
    return {"OUTPUT_1": INPUT_1}


def cpu_model(loop_count: int):
    @batch
    def cpu_5ms(INPUT_1: np.ndarray) -> dict:
        spin(loop_count)
        return {"OUTPUT_1": INPUT_1}

    return cpu_5ms


def stream_100(requests: List[Dict[str, np.ndarray]]):
    for _ in range(STREAM_STEPS):
        yield [{"OUTPUT_1": request["INPUT_1"]} for request in requests]


def torch_models(device: str):
    """(``torch_mlp``, ``torch_mlp_numpy``): the MLP answering with a tensor, or with an array."""
    import torch

    model = build(device)

    @batch
    def torch_mlp(INPUT_1: np.ndarray) -> dict:
        with torch.inference_mode():
            return {"OUTPUT_1": model(torch.from_numpy(INPUT_1).to(device))}

    @batch
    def torch_mlp_numpy(INPUT_1: np.ndarray) -> dict:
        with torch.inference_mode():
            return {"OUTPUT_1": model(torch.from_numpy(INPUT_1).to(device)).cpu().numpy()}

    return torch_mlp, torch_mlp_numpy


def _security() -> Dict[str, Any]:
    """`Triton` arguments for the harness's token; none for a pytriton from before access restriction."""
    token = os.environ.get("PYTRITON_BENCH_ACCESS_TOKEN")
    try:
        from pytriton.triton import TritonSecurityConfig
    except ImportError:  # --ours-pythonpath with an older revision: nothing is restricted there
        return {}
    return {"security_config": TritonSecurityConfig(access_token=token or None)}


def _instances_in_processes() -> Dict[str, Any]:
    """``process_instances=True`` where this pytriton's `ModelConfig` has the field (else threads)."""
    has_field = any(field.name == "process_instances" for field in dataclasses.fields(ModelConfig))
    return {"process_instances": True} if has_field else {}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--http-port", type=int, required=True)
    parser.add_argument("--grpc-port", type=int, required=True)
    parser.add_argument("--metrics-port", type=int, required=True)
    parser.add_argument("--loop-count", type=int, default=20_000, help="cpu_5ms's loop count (the harness calibrates)")
    parser.add_argument("--torch-device", help="serve only the torch MLP, on this device (the GPU path)")
    parser.add_argument("--trace-file", help="Triton traces every request's timestamps into this file (--breakdown)")
    args = parser.parse_args()

    trace = [f"triton,file={args.trace_file}", "level=TIMESTAMPS", "rate=1"] if args.trace_file else None
    config = TritonConfig(
        http_port=args.http_port, grpc_port=args.grpc_port, metrics_port=args.metrics_port, exit_timeout_secs=5,
        trace_config=trace,
    )
    inputs = [Tensor(name="INPUT_1", dtype=np.float32, shape=(-1,))]
    outputs = [Tensor(name="OUTPUT_1", dtype=np.float32, shape=(-1,))]
    if args.torch_device:
        serve_torch(config, inputs, outputs, args.torch_device)
        return
    processes = _instances_in_processes()
    print(f"bench: cpu_5ms instances: {'processes' if processes else 'threads'}", file=sys.stderr, flush=True)
    with Triton(config=config, **_security()) as triton:
        triton.bind(
            "identity", identity, inputs, outputs,
            config=ModelConfig(max_batch_size=MAX_BATCH_SIZE, batcher=DynamicBatcher()),
        )  # fmt: skip
        triton.bind(
            "sleep_10ms", sleep_10ms, inputs, outputs,
            config=ModelConfig(
                max_batch_size=MAX_BATCH_SIZE,
                batcher=DynamicBatcher(max_queue_delay_microseconds=SLEEP_QUEUE_DELAY_US),
            ),
        )  # fmt: skip
        cpu_5ms = cpu_model(args.loop_count)
        triton.bind(
            "cpu_5ms", [cpu_5ms] * CPU_INSTANCES, inputs, outputs,
            config=ModelConfig(max_batch_size=MAX_BATCH_SIZE, batcher=DynamicBatcher(), **processes),
        )  # fmt: skip
        triton.bind(
            "stream_100", stream_100, inputs, outputs,
            config=ModelConfig(max_batch_size=MAX_BATCH_SIZE, batcher=DynamicBatcher(), decoupled=True),
        )  # fmt: skip
        triton.serve()


def serve_torch(config: TritonConfig, inputs: List[Tensor], outputs: List[Tensor], device: str) -> None:
    with Triton(config=config, **_security()) as triton:
        # Same batching as the reference's torch_mlp (bench/servers.py TORCH_MODELS).
        batching = ModelConfig(
            max_batch_size=MAX_BATCH_SIZE, batcher=DynamicBatcher(max_queue_delay_microseconds=TORCH_QUEUE_DELAY_US)
        )
        # One callable (one Triton instance) as the reference has; PYTRITON_BENCH_GPU_INSTANCES=2
        # binds the same callable twice, so that one batch's hop overlaps the other's forward pass.
        instances = int(os.environ.get("PYTRITON_BENCH_GPU_INSTANCES", "1"))
        print(f"bench: torch instances: {instances}", file=sys.stderr, flush=True)
        for name, model in zip(("torch_mlp", "torch_mlp_numpy"), torch_models(device)):
            triton.bind(name, [model] * instances if instances > 1 else model, inputs, outputs, config=batching)
        triton.serve()


if __name__ == "__main__":
    main()
