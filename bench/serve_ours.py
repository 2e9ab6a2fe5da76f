"""The models of the benchmark served through pytriton, the way a user would write it.

Two models with the reference's names, tensors and batching (see bench/servers.py):
``identity`` returns its input; ``sleep_10ms`` does the same after a fixed 10 ms per call, with
a 2 ms queue delay so that Triton gathers batches. The harness launches this script as its own
process, waits for both models to answer ready, and stops it with SIGTERM.

Run by hand: ``python bench/serve_ours.py --http-port 8000 --grpc-port 8001 --metrics-port 8002``.
The statistics API the harness reads is restricted by default; the harness chooses the token and
passes it in ``$PYTRITON_BENCH_ACCESS_TOKEN``.
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any, Dict

import numpy as np

from pytriton.decorators import batch
from pytriton.model_config import DynamicBatcher, ModelConfig, Tensor
from pytriton.triton import Triton, TritonConfig

MAX_BATCH_SIZE = 64
SLEEP_S = 0.01
SLEEP_QUEUE_DELAY_US = 2000


@batch
def identity(INPUT_1: np.ndarray) -> dict:
    return {"OUTPUT_1": INPUT_1}


@batch
def sleep_10ms(INPUT_1: np.ndarray) -> dict:
    time.sleep(SLEEP_S)
    return {"OUTPUT_1": INPUT_1}


def _security() -> Dict[str, Any]:
    """`Triton` arguments for the harness's token; none for a pytriton from before access restriction."""
    token = os.environ.get("PYTRITON_BENCH_ACCESS_TOKEN")
    try:
        from pytriton.triton import TritonSecurityConfig
    except ImportError:  # --ours-pythonpath with an older revision: nothing is restricted there
        return {}
    return {"security_config": TritonSecurityConfig(access_token=token or None)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--http-port", type=int, required=True)
    parser.add_argument("--grpc-port", type=int, required=True)
    parser.add_argument("--metrics-port", type=int, required=True)
    args = parser.parse_args()

    config = TritonConfig(
        http_port=args.http_port, grpc_port=args.grpc_port, metrics_port=args.metrics_port, exit_timeout_secs=5
    )
    inputs = [Tensor(name="INPUT_1", dtype=np.float32, shape=(-1,))]
    outputs = [Tensor(name="OUTPUT_1", dtype=np.float32, shape=(-1,))]
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
        triton.serve()


if __name__ == "__main__":
    main()
