"""The multiplexing case's server (bench/multiplex.py): one model served three ways.

The model: a LoRA-style variant of a linear layer. The base weight W0 (d x d) and each variant's
low-rank pair A (d x r), B (r x d) are files the harness wrote; loading a variant reads its pair
and merges it (W = W0 + A @ B), as an adapter is merged into its base for serving; a request
computes ``x @ W`` for its rows.

* ``mux``: ``@multiplexed(load, max_loaded=8)`` above ``@batch``, two process instances: each
  request names its variant in the request parameter ``variant``.
* ``lru``: what a user writes today without it: the same computation in one process instance,
  the variant read from each request's parameters and loaded through ``functools.lru_cache``
  (maxsize 8), the batch grouped by variant by hand.
* ``top_0`` ... ``top_7``: one bound model per variant for the 8 most requested (ranks 0-7 of the
  Zipf law), each holding its merged weight from the start (one thread instance each).

``mux`` and ``lru`` count their loads and time them in the user metrics
``bench_variant_loads_total`` and ``bench_variant_load_seconds`` (``mux`` also reports
pytriton's own ``pytriton_variant_*``), so the harness reads the hit rate and the load time of
both alike from ``/metrics``. BLAS runs one thread per process (the harness sets ``OMP_NUM_THREADS=1``), so two
instances are two cores' worth of work on the 2-core machine.

Run by hand: ``python bench/serve_multiplex.py --variants DIR --http-port 8000 --grpc-port 8001
--metrics-port 8002``.
"""

from __future__ import annotations

import argparse
import functools
import pathlib
import sys
import time
from typing import Any, Dict, List

import numpy as np

from pytriton.decorators import batch, multiplexed
from pytriton.metrics import Counter, Histogram
from pytriton.model_config import DynamicBatcher, ModelConfig, Tensor
from pytriton.triton import Triton, TritonConfig

MAX_LOADED = 8
INSTANCES = 2
MAX_BATCH_SIZE = 16
TOP = 8

LOADS = Counter("bench_variant_loads_total", "Variants loaded by the benchmark's loader")
LOAD_SECONDS = Histogram("bench_variant_load_seconds", "Time the benchmark's loader took per variant")


def merger(folder: pathlib.Path) -> Any:
    """``merge(variant)``: the variant's weight, read from its file and merged into the base."""
    base = np.load(folder / "base.npy")

    def merge(variant: str) -> np.ndarray:
        path = folder / f"{variant}.npz"
        if not path.is_file():
            raise KeyError(variant)
        with np.load(path) as pair:
            return base + pair["a"] @ pair["b"]  # type: ignore[no-any-return]

    return merge


def models(folder: pathlib.Path) -> Dict[str, Any]:
    merge = merger(folder)

    def load(variant: str) -> np.ndarray:
        started = time.perf_counter()
        weight = merge(variant)
        LOADS.inc()  # in the instance that loads it (a callable's metric)
        LOAD_SECONDS.observe(time.perf_counter() - started)
        return weight  # type: ignore[no-any-return]

    @multiplexed(load, max_loaded=MAX_LOADED)
    @batch
    def mux(x: np.ndarray, model: np.ndarray) -> Dict[str, np.ndarray]:
        return {"y": x @ model}

    @functools.lru_cache(maxsize=MAX_LOADED)
    def cached(variant: str) -> np.ndarray:
        return load(variant)  # type: ignore[no-any-return]

    def lru(requests: List[Any]) -> List[Dict[str, np.ndarray]]:
        groups: Dict[str, List[int]] = {}
        for index, request in enumerate(requests):
            groups.setdefault(request.parameters["variant"], []).append(index)
        answers: List[Any] = [None] * len(requests)
        for variant, indices in groups.items():
            weight = cached(variant)
            rows = [len(requests[i]["x"]) for i in indices]
            outputs = np.concatenate([requests[i]["x"] for i in indices]) @ weight
            for index, part in zip(indices, np.split(outputs, np.cumsum(rows)[:-1])):
                answers[index] = {"y": part}
        return answers

    return {"mux": mux, "lru": lru, "merge": merge}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", type=pathlib.Path, required=True)
    parser.add_argument("--http-port", type=int, required=True)
    parser.add_argument("--grpc-port", type=int, required=True)
    parser.add_argument("--metrics-port", type=int, required=True)
    args = parser.parse_args()
    built = models(args.variants)
    dim = int(np.load(args.variants / "base.npy", mmap_mode="r").shape[0])
    tensors = ([Tensor(name="x", dtype=np.float32, shape=(dim,))], [Tensor(name="y", dtype=np.float32, shape=(dim,))])
    batcher = DynamicBatcher(max_queue_delay_microseconds=0)
    config = TritonConfig(http_port=args.http_port, grpc_port=args.grpc_port, metrics_port=args.metrics_port)
    with Triton(config=config) as triton:
        triton.bind("mux", [built["mux"]] * INSTANCES, *tensors,
                    config=ModelConfig(max_batch_size=MAX_BATCH_SIZE, batcher=batcher, process_instances=True))
        triton.bind("lru", built["lru"], *tensors,
                    config=ModelConfig(max_batch_size=MAX_BATCH_SIZE, batcher=batcher, process_instances=True))
        for rank in range(TOP):
            weight = built["merge"](f"v{rank:03d}")

            def fixed(weight: np.ndarray = weight) -> Any:
                @batch
                def infer(x: np.ndarray) -> Dict[str, np.ndarray]:
                    return {"y": x @ weight}

                return infer

            triton.bind(f"top_{rank}", fixed(), *tensors, config=ModelConfig(max_batch_size=MAX_BATCH_SIZE,
                                                                                  batcher=batcher))
        print("bench: multiplex server ready", file=sys.stderr, flush=True)
        triton.serve()
    return 0


if __name__ == "__main__":
    sys.exit(main())
