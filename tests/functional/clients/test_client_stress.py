"""Stress: 4 FuturesModelClients × 8 worker threads send 10,000 requests of mixed batch sizes.

Two clients speak HTTP and two gRPC, each fed by its own submitting thread, against one model
with dynamic batching (so Triton merges requests of different clients into one batch). Every
request carries values unique to it; every response must hold exactly its own request's values
transformed, and every future must complete: nothing lost, nothing swapped.
"""

from __future__ import annotations

import concurrent.futures
import threading
import time

import numpy as np
import pytest
from support import grpc_url, http_url, server_config

from pytriton.client import FuturesModelClient
from pytriton.decorators import batch
from pytriton.model_config import DynamicBatcher, ModelConfig, Tensor
from pytriton.triton import Triton

pytestmark = pytest.mark.functional

CLIENTS = 4
WORKERS = 8
REQUESTS = 10_000
MAX_BATCH = 8
WIDTH = 3


@batch
def _affine(INPUT_1):
    return {"OUTPUT_1": INPUT_1 * 2 + 1}


def _request(index: int) -> np.ndarray:
    rows = index % MAX_BATCH + 1  # batch sizes 1..8, interleaved
    # Values unique to the request (index * 1000 + position): a swapped answer cannot match.
    return (index * 1000 + np.arange(rows * WIDTH, dtype=np.int64)).reshape(rows, WIDTH)


def test_ten_thousand_mixed_requests_all_answered_with_their_own_data():
    config = server_config()
    triton = Triton(config=config)
    triton.bind(
        "Affine",
        _affine,
        inputs=[Tensor(dtype=np.int64, shape=(WIDTH,))],
        outputs=[Tensor(dtype=np.int64, shape=(WIDTH,))],
        config=ModelConfig(max_batch_size=64, batcher=DynamicBatcher(max_queue_delay_microseconds=500)),
    )
    triton.run()
    try:
        urls = [http_url(config), grpc_url(config)] * (CLIENTS // 2)
        clients = [FuturesModelClient(url, "Affine", max_workers=WORKERS, init_timeout_s=30) for url in urls]
        futures: dict[int, concurrent.futures.Future] = {}
        lock = threading.Lock()

        def feed(client_index: int) -> None:
            client = clients[client_index]
            for index in range(client_index, REQUESTS, CLIENTS):
                future = client.infer_batch(_request(index))
                with lock:
                    futures[index] = future

        start = time.monotonic()
        try:
            feeders = [threading.Thread(target=feed, args=(i,)) for i in range(CLIENTS)]
            for feeder in feeders:
                feeder.start()
            for feeder in feeders:
                feeder.join()
            done, not_done = concurrent.futures.wait(futures.values(), timeout=120)
        finally:
            for client in clients:
                client.close()
        elapsed = time.monotonic() - start
    finally:
        triton.stop()

    assert not not_done and len(futures) == REQUESTS
    mismatched = [
        index
        for index, future in futures.items()
        if not np.array_equal(future.result()["OUTPUT_1"], _request(index) * 2 + 1)
    ]
    assert not mismatched, f"{len(mismatched)} responses did not match their requests, e.g. {mismatched[:5]}"
    samples = sum(index % MAX_BATCH + 1 for index in range(REQUESTS))
    print(f"[stress] {REQUESTS} requests ({samples} samples) in {elapsed:.1f} s: {REQUESTS / elapsed:.0f} req/s")
