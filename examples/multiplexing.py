"""Serve an adapter per customer under one model: `@multiplexed`, with two worker processes.

Each customer's adapter is a small weight matrix in a file (written here at start, as a
fine-tuning job would leave them). A request names its customer in the request parameter
``variant``; each worker process holds at most 3 adapters and unloads the least recently used to
make room, and pytriton's backend sends each batch to the process that already holds its
customers' adapters. The script sends requests from 8 clients at once, checks every answer
against its own customer's weights, and prints what the model's metrics counted.

    python examples/multiplexing.py              # serve, send 400 requests, stop
    python examples/multiplexing.py --serve      # only serve, until Ctrl-C

The ports follow PYTRITON_TRITON_CONFIG_HTTP_PORT / _GRPC_PORT / _METRICS_PORT (8000, 8001 and
8002 by default).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import pathlib
import random
import sys
import tempfile
import time
import urllib.request
from typing import Dict

import numpy as np

from pytriton.client import ModelClient
from pytriton.decorators import batch, multiplexed
from pytriton.model_config import ModelConfig, Tensor
from pytriton.triton import Triton, TritonConfig

CUSTOMERS = [f"customer-{number:02d}" for number in range(12)]
DIM = 64


def write_adapters(folder: pathlib.Path) -> None:
    for number, customer in enumerate(CUSTOMERS):
        np.save(folder / f"{customer}.npy", np.eye(DIM, dtype=np.float32) * (number + 1))


def adapter_loader(folder: pathlib.Path):
    def load(customer: str) -> np.ndarray:
        path = folder / f"{customer}.npy"
        if not path.is_file():
            raise KeyError(customer)  # an unknown customer: a 400 naming it
        time.sleep(0.02)  # reading a real adapter takes a while: here, 20 ms
        return np.load(path)

    return load


def build(folder: pathlib.Path):
    @multiplexed(adapter_loader(folder), max_loaded=3)
    @batch
    def adapt(x: np.ndarray, model: np.ndarray) -> Dict[str, np.ndarray]:
        return {"y": x @ model}

    return adapt


def send(url: str, requests: int) -> None:
    rng = random.Random(45)
    weights = [1 / (rank + 1) for rank in range(len(CUSTOMERS))]  # a few customers send most requests
    asked = rng.choices(CUSTOMERS, weights=weights, k=requests)

    def ask(customer: str) -> None:
        with ModelClient(url, "Adapt") as client:
            x = np.ones((1, DIM), dtype=np.float32)
            y = client.infer_batch(x=x, parameters={"variant": customer})["y"]
        expected = CUSTOMERS.index(customer) + 1
        assert np.all(y == expected), f"{customer}: got {y[0, :3]}, expected {expected}"

    started = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        list(pool.map(ask, asked))
    print(f"{requests} requests for {len(set(asked))} customers answered, each by its own adapter, in "
          f"{time.monotonic() - started:.1f} s")


def counted(metrics_url: str) -> Dict[str, float]:
    with urllib.request.urlopen(metrics_url, timeout=10) as answer:
        text = answer.read().decode()
    totals: Dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("pytriton_variant") and 'model="Adapt"' in line and not line.startswith("#"):
            name = line.split("{", 1)[0]
            totals[name] = totals.get(name, 0.0) + float(line.rsplit(" ", 1)[1])
    return totals


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--serve", action="store_true", help="only serve, until Ctrl-C")
    parser.add_argument("--requests", type=int, default=400)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        write_adapters(pathlib.Path(folder))
        adapt = build(pathlib.Path(folder))
        with Triton(config=TritonConfig.from_env()) as triton:
            triton.bind("Adapt", [adapt, adapt], inputs=[Tensor(name="x", dtype=np.float32, shape=(DIM,))],
                        outputs=[Tensor(name="y", dtype=np.float32, shape=(DIM,))],
                        config=ModelConfig(max_batch_size=8, process_instances=True))
            if args.serve:
                triton.serve()
                return 0
            triton.run()
            config = TritonConfig.from_env()
            send(f"http://127.0.0.1:{config.http_port or 8000}", args.requests)
            time.sleep(2.5)  # the workers' metrics reach /metrics about once a second
            totals = counted(f"http://127.0.0.1:{config.metrics_port or 8002}/metrics")
            hits, misses = totals.get("pytriton_variant_hits_total", 0), totals.get("pytriton_variant_misses_total", 0)
            print(f"loads {totals.get('pytriton_variant_loads_total', 0):.0f}, evictions "
                  f"{totals.get('pytriton_variant_evictions_total', 0):.0f}, hit rate "
                  f"{hits / max(1.0, hits + misses):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
