"""The models of the continuous-batching cases served through pytriton, as a user would write them.

Four decoupled models, each taking ``n`` (INT32, the stream's number of steps) and streaming one
``token`` (INT32, the step's index) per step:

* ``cb_step``: a ``@continuous`` step function (continuous batching), up to ``--max-streams``
  streams per step (`ModelConfig.max_batch_size`), each step costing
  ``--base-ms`` + ``--per-stream-us`` x the streams in it (bench/step_model.py);
* ``cb_whole``: today's whole-batch streaming, a ``@batch`` generator over the batch Triton's
  dynamic batcher handed it, one step of the same cost per yield, until its streams' ``n``;
* ``scn_step`` and ``scn_whole``: the same two for the scenario, with ``--scenario-streams``
  streams per step and a fixed ``--scenario-step-ms`` step.

The harness (bench/continuous.py) launches this script as its own process, waits for every model
to answer ready, and stops it with SIGTERM, as it does bench/serve_ours.py. Run by hand:
``python bench/serve_streams.py --http-port 8000 --grpc-port 8001 --metrics-port 8002``.
"""

from __future__ import annotations

import argparse
import os
from typing import Any, Dict, List

import numpy as np
from step_model import run_step

from pytriton.decorators import batch, continuous
from pytriton.model_config import DynamicBatcher, ModelConfig, Tensor
from pytriton.triton import Triton, TritonConfig

INPUTS = [Tensor(name="n", dtype=np.int32, shape=(1,))]
OUTPUTS = [Tensor(name="token", dtype=np.int32, shape=(1,))]


def step_function(base_s: float, per_stream_s: float):
    """A ``@continuous`` step: every stream gets its step index; a stream ends after its ``n`` steps.

    It answers as a batched forward pass does: one array with a row per stream (the next token of
    each), which pytriton sends as it is."""

    @continuous
    def step(streams: List[Any]) -> Dict[str, np.ndarray]:
        run_step(len(streams), base_s, per_stream_s)
        tokens = np.empty((len(streams), 1), dtype=np.int32)
        for row, stream in enumerate(streams):
            if stream.state is None:
                stream.state = int(stream.inputs["n"][0, 0])
            tokens[row, 0] = stream.steps
            if stream.steps + 1 >= stream.state:
                stream.finish()
        return {"token": tokens}

    return step


def whole_batch_generator(base_s: float, per_stream_s: float):
    """A ``@batch`` generator: the batch's streams step together until the longest has its ``n`` steps."""

    @batch
    def whole(n: np.ndarray):
        size = len(n)
        for index in range(int(n.max())):
            run_step(size, base_s, per_stream_s)
            yield {"token": np.full((size, 1), index, dtype=np.int32)}

    return whole


def _security() -> Dict[str, Any]:
    from pytriton.triton import TritonSecurityConfig

    return {"security_config": TritonSecurityConfig(access_token=os.environ.get("PYTRITON_BENCH_ACCESS_TOKEN") or None)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--http-port", type=int, required=True)
    parser.add_argument("--grpc-port", type=int, required=True)
    parser.add_argument("--metrics-port", type=int, required=True)
    parser.add_argument("--max-streams", type=int, default=64)
    parser.add_argument("--base-ms", type=float, default=2.0)
    parser.add_argument("--per-stream-us", type=float, default=20.0)
    parser.add_argument("--scenario-streams", type=int, default=8)
    parser.add_argument("--scenario-step-ms", type=float, default=10.0)
    args = parser.parse_args()

    config = TritonConfig(http_port=args.http_port, grpc_port=args.grpc_port, metrics_port=args.metrics_port,
                          exit_timeout_secs=5)
    base_s, per_stream_s, scenario_s = args.base_ms / 1000, args.per_stream_us / 1e6, args.scenario_step_ms / 1000
    with Triton(config=config, **_security()) as triton:
        for name, function, size in (
            ("cb_step", step_function(base_s, per_stream_s), args.max_streams),
            ("cb_whole", whole_batch_generator(base_s, per_stream_s), args.max_streams),
            ("scn_step", step_function(scenario_s, 0.0), args.scenario_streams),
            ("scn_whole", whole_batch_generator(scenario_s, 0.0), args.scenario_streams),
        ):
            batcher = {} if name.endswith("_step") else {"batcher": DynamicBatcher()}
            triton.bind(name, function, INPUTS, OUTPUTS,
                        config=ModelConfig(max_batch_size=size, decoupled=True, **batcher))
        triton.serve()


if __name__ == "__main__":
    main()
