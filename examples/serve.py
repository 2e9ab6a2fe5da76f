"""Serve the demo's two models until SIGTERM or Ctrl-C: the program of the container image.

The top-level Dockerfile runs this script (``CMD ["python", "/app/serve.py"]``). It binds

- ``Linear``: a fixed linear layer, ``scores = features @ WEIGHTS + BIAS`` (3 float32 in, 2 out),
  with dynamic batching;
- ``Upper``: text in, the same text upper-cased out (BYTES tensors);

then blocks in `Triton.serve()`, which installs SIGTERM/SIGINT handlers, lets requests in flight
finish when one arrives, and exits 0 (non-zero if tritonserver crashed). The ports follow
``PYTRITON_TRITON_CONFIG_HTTP_PORT`` / ``_GRPC_PORT`` / ``_METRICS_PORT`` (8000, 8001 and 8002
by default), like every other server option (see docs/deploying.md). Try it::

    python examples/serve.py &
    python -c "from pytriton.client import ModelClient; import numpy as np; \\
        print(ModelClient('localhost:8000', 'Linear').infer_sample(features=np.ones(3, np.float32)))"
"""

from __future__ import annotations

import logging
from typing import Dict

import numpy as np

from pytriton.decorators import batch
from pytriton.model_config import DynamicBatcher, ModelConfig, Tensor
from pytriton.triton import Triton

WEIGHTS = np.array([[1.0, -1.0], [0.5, 2.0], [0.0, 1.0]], dtype=np.float32)
BIAS = np.array([10.0, 0.0], dtype=np.float32)


@batch
def linear(features: np.ndarray) -> Dict[str, np.ndarray]:
    return {"scores": features @ WEIGHTS + BIAS}


@batch
def upper(text: np.ndarray) -> Dict[str, np.ndarray]:
    return {"loud": np.char.upper(text)}


def main() -> None:
    # A container's log is its stdout/stderr: show the library's start and stop messages there.
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    with Triton() as triton:
        triton.bind(
            model_name="Linear",
            infer_func=linear,
            inputs=[Tensor(name="features", dtype=np.float32, shape=(3,))],
            outputs=[Tensor(name="scores", dtype=np.float32, shape=(2,))],
            config=ModelConfig(max_batch_size=16, batcher=DynamicBatcher(max_queue_delay_microseconds=2_000)),
        )
        triton.bind(
            model_name="Upper",
            infer_func=upper,
            inputs=[Tensor(name="text", dtype=np.bytes_, shape=(1,))],
            outputs=[Tensor(name="loud", dtype=np.bytes_, shape=(1,))],
            config=ModelConfig(max_batch_size=8),
        )
        triton.serve()


if __name__ == "__main__":
    main()
