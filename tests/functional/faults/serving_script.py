"""A serving script as users write it, for fault tests that need a process of its own.

``python serving_script.py HTTP GRPC METRICS [EXIT_TIMEOUT_S]`` serves two models with
`Triton.serve()` (after `Triton.run()` with ``SERVING_SCRIPT_RUN_FIRST=1``) and prints one JSON
line once they are ready: its pid, and the names of the
shared-memory entries its server created (so a test can check they are gone afterwards).

- ``Sleep``: sleeps for the largest ``seconds`` value of the batch, then echoes it (its warm-up
  sleeps ``SERVING_SCRIPT_LOAD_S`` seconds, 0 by default: a slow model load);
- ``Tokens``: decoupled; for each request yields ``count`` tokens, ``seconds`` apart.
"""

import faulthandler
import json
import os
import signal
import sys
import threading
import time
import urllib.request

import numpy as np

from pytriton.decorators import batch
from pytriton.model_config import ModelConfig, ModelWarmup, Tensor
from pytriton.triton import Triton, TritonConfig, TritonLifecyclePolicy


@batch
def sleep(seconds):
    time.sleep(float(seconds.max()))
    return {"seconds": seconds}


def tokens(requests):
    request = requests[0]
    for index in range(int(request["count"][0])):
        time.sleep(float(request["seconds"][0]))
        yield [{"token": np.array([index], dtype=np.int32)}]


def announce_when_ready(http_port: int, before: set) -> None:
    """Print the JSON line once the server answers ready (serve() blocks the main thread)."""
    url = f"http://127.0.0.1:{http_port}/v2/health/ready"
    while True:
        try:
            with urllib.request.urlopen(url, timeout=1) as response:
                if response.status == 200:
                    break
        except OSError:
            pass
        time.sleep(0.05)
    prefix = f"pytriton-{os.getpid()}-"
    segments = sorted(name for name in set(os.listdir("/dev/shm")) - before if name.startswith(prefix))
    print(json.dumps({"pid": os.getpid(), "segments": segments}), flush=True)


def main() -> None:
    faulthandler.register(signal.SIGUSR1)  # a test that times out dumps the stacks into stderr
    http, grpc, metrics = (int(port) for port in sys.argv[1:4])
    exit_timeout = int(sys.argv[4]) if len(sys.argv) > 4 else 10
    before = set(os.listdir("/dev/shm"))
    config = TritonConfig(http_port=http, grpc_port=grpc, metrics_port=metrics, exit_timeout_secs=exit_timeout)
    # SERVING_SCRIPT_LATE_START=1: the server starts in run()/serve() with both models, instead of
    # on entering `with` (each bind then loads its model).
    late = TritonLifecyclePolicy(launch_triton_on_startup=os.environ.get("SERVING_SCRIPT_LATE_START") != "1")
    with Triton(config=config, triton_lifecycle_policy=late) as triton:
        triton.bind(
            "Sleep", sleep,
            inputs=[Tensor(name="seconds", dtype=np.float32, shape=(1,))],
            outputs=[Tensor(name="seconds", dtype=np.float32, shape=(1,))],
            # SERVING_SCRIPT_LOAD_S: a warm-up that keeps the model loading that long (a slow model load).
            config=ModelConfig(max_batch_size=8, model_warmup=[ModelWarmup(inputs={
                "seconds": np.array([float(os.environ.get("SERVING_SCRIPT_LOAD_S", "0"))], dtype=np.float32)})]),
        )
        triton.bind(
            "Tokens", tokens,
            inputs=[Tensor(name="count", dtype=np.int32, shape=(1,)),
                    Tensor(name="seconds", dtype=np.float32, shape=(1,))],
            outputs=[Tensor(name="token", dtype=np.int32, shape=(1,))],
            config=ModelConfig(batching=False, decoupled=True),
        )
        if os.environ.get("SERVING_SCRIPT_RUN_FIRST") == "1":
            triton.run()  # the background start first, then serve(): a pattern users have too
        threading.Thread(target=announce_when_ready, args=(http, before), daemon=True).start()
        triton.serve()


if __name__ == "__main__":
    main()
