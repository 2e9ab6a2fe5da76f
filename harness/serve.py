"""The "user process" of the harness: a `Triton` serving the echo models, as a user would write it.

The harness starts this script as a child process and talks to it only over HTTP and gRPC, so
what it measures (RSS, fds, threads of this process, of its tritonserver and of the stubs) is
the library's own footprint, not the harness's clients.

Models:

* ``echo`` (``@batch``, ``max_batch_size`` 16, dynamic batching): returns its ``id`` (INT64,
  one per sample) and ``payload`` (UINT8, any length) unchanged.
* ``stream`` (decoupled, ``@batch`` generator): yields `STREAM_STEPS` responses per request,
  each holding the request's ``rid`` (INT64) and the step number. Not ``id``: over HTTP the
  streaming client sends inputs as top-level keys of Triton's generate request, where ``id``
  is the request id (see harness/README.md).
* ``text`` (no batching): returns ``text`` (BYTES, any length) and ``x`` (FP32, two values)
  unchanged; the fuzzer's target for BYTES framing and a model without a batch axis.
* ``slow`` (``@batch``, process instances): answers its worker process's ``pid`` at once when
  every ``x`` is negative, else after `SLOW_S`: requests the fault matrix keeps in flight while
  it kills the worker process.
* ``slow_stream`` (decoupled, two process instances: two streams run at once): yields its
  worker's ``pid``, then, when ``x`` is positive, again after `SLOW_S`.

``PYTRITON_HARNESS_LOG`` sets the log level (DEBUG shows tritonserver's own output).
``PYTRITON_HARNESS_FAULT`` plants a bug, so that the harness can show it notices one:
``mixup`` (every 97th call of ``echo`` answers id + 1), ``leak`` (``echo`` keeps every payload
and one open file per call), ``arenaleak`` (the worker's shared-memory arenas forget the segment
they replace instead of unlinking it).

Run by hand: ``python harness/serve.py --http-port 8000 --grpc-port 8001 --metrics-port 8002``.
"""

from __future__ import annotations

import argparse
import itertools
import logging
import os
import time
from typing import Any, Dict, Iterator, List

import numpy as np

from pytriton.decorators import batch
from pytriton.model_config import DynamicBatcher, ModelConfig, Tensor
from pytriton.triton import Triton, TritonConfig

STREAM_STEPS = 3
SLOW_S = 5.0
FAULT = os.environ.get("PYTRITON_HARNESS_FAULT", "")
_calls = itertools.count(1)
_kept: List[Any] = []


@batch
def echo(id: np.ndarray, payload: np.ndarray) -> Dict[str, np.ndarray]:
    call = next(_calls)
    if FAULT == "mixup" and call % 97 == 0:
        id = id + 1
    if FAULT == "leak":
        _kept.append((payload.copy(), open(os.devnull)))  # kept open on purpose
    return {"id": id, "payload": payload}


@batch
def stream(rid: np.ndarray) -> Iterator[Dict[str, np.ndarray]]:
    for step in range(STREAM_STEPS):
        yield {"rid": rid, "step": np.full_like(rid, step)}


@batch
def slow(x: np.ndarray) -> Dict[str, np.ndarray]:
    if (x >= 0).any():
        time.sleep(SLOW_S)
    return {"pid": np.full((len(x), 1), os.getpid(), np.int64)}


@batch
def slow_stream(x: np.ndarray) -> Iterator[Dict[str, np.ndarray]]:
    yield {"pid": np.full((len(x), 1), os.getpid(), np.int64)}
    if (x >= 0).any():
        time.sleep(SLOW_S)
        yield {"pid": np.full((len(x), 1), os.getpid(), np.int64)}


def text(requests: List[Dict[str, np.ndarray]]) -> List[Dict[str, np.ndarray]]:
    return [{"text": request["text"], "x": request["x"]} for request in requests]


def plant_arena_leak() -> None:
    """The worker's arenas drop their segment's name instead of unlinking it (`Arena._release`)."""
    from pytriton.ipc.shm import Arena

    release = Arena._release

    def forgetful(self: Arena) -> None:
        self._name = None  # forgotten, so never unlinked
        release(self)

    Arena._release = forgetful  # type: ignore[method-assign]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--http-port", type=int, required=True)
    parser.add_argument("--grpc-port", type=int, required=True)
    parser.add_argument("--metrics-port", type=int, required=True)
    args = parser.parse_args()
    logging.basicConfig(
        level=os.environ.get("PYTRITON_HARNESS_LOG", "INFO"), format="%(asctime)s %(name)s %(levelname)s: %(message)s"
    )

    if FAULT == "arenaleak":
        plant_arena_leak()
    config = TritonConfig(
        http_port=args.http_port, grpc_port=args.grpc_port, metrics_port=args.metrics_port, exit_timeout_secs=10
    )
    id_tensor = Tensor(name="id", dtype=np.int64, shape=(1,))
    with Triton(config=config) as triton:
        triton.bind(
            "echo", echo,
            inputs=[id_tensor, Tensor(name="payload", dtype=np.uint8, shape=(-1,))],
            outputs=[id_tensor, Tensor(name="payload", dtype=np.uint8, shape=(-1,))],
            config=ModelConfig(max_batch_size=16, batcher=DynamicBatcher(max_queue_delay_microseconds=200)),
        )  # fmt: skip
        triton.bind(
            "stream", stream,
            inputs=[Tensor(name="rid", dtype=np.int64, shape=(1,))],
            outputs=[Tensor(name="rid", dtype=np.int64, shape=(1,)), Tensor(name="step", dtype=np.int64, shape=(1,))],
            config=ModelConfig(max_batch_size=8, decoupled=True),
        )  # fmt: skip
        triton.bind(
            "text", text,
            inputs=[Tensor(name="text", dtype=np.bytes_, shape=(-1,)), Tensor(name="x", dtype=np.float32, shape=(2,))],
            outputs=[Tensor(name="text", dtype=np.bytes_, shape=(-1,)), Tensor(name="x", dtype=np.float32, shape=(2,))],
            config=ModelConfig(batching=False),
        )  # fmt: skip
        x_tensor = Tensor(name="x", dtype=np.float32, shape=(1,))
        pid_tensor = Tensor(name="pid", dtype=np.int64, shape=(1,))
        triton.bind("slow", slow, inputs=[x_tensor], outputs=[pid_tensor],
                    config=ModelConfig(max_batch_size=16, process_instances=True))
        triton.bind("slow_stream", [slow_stream, slow_stream], inputs=[x_tensor], outputs=[pid_tensor],
                    config=ModelConfig(max_batch_size=16, process_instances=True, decoupled=True))
        triton.serve()


if __name__ == "__main__":
    main()
