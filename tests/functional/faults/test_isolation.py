"""Failure isolation inside a batch, through the real tritonserver.

17 concurrent requests (16 good, one poison that makes the callable raise) reach a `@batch`
model whose dynamic batcher waits long enough to put them in one or a few batches. With
``ModelConfig(isolate_failures=True)`` only the poison fails; without it, every good request
that shared the poison's batch fails too (which shows the test can tell the two apart).
"""

from __future__ import annotations

import concurrent.futures
import threading

import numpy as np
import pytest
from support import grpc_url, our_leftovers, server_config

from pytriton.client import ModelClient
from pytriton.client.exceptions import PyTritonClientInferenceServerError
from pytriton.decorators import batch
from pytriton.model_config import DynamicBatcher, ModelConfig, Tensor
from pytriton.triton import Triton

pytestmark = pytest.mark.functional

POISON = -1.0
GOOD = [float(value) for value in range(1, 17)]


class Doubler:
    """Doubles its input; raises on a batch holding the poison value. Records each batch it saw."""

    def __init__(self) -> None:
        self.batches: list = []
        self.lock = threading.Lock()

    @batch
    def __call__(self, x):
        values = sorted(x[:, 0].tolist())
        with self.lock:
            self.batches.append(values)
        if POISON in values:
            raise ValueError(f"poison in a batch of {len(values)}")
        return {"y": x * 2}


def _fire(url: str, model: str, values: list) -> dict:
    """Sends one request per value, all at once; each value's answer, or its error text."""
    clients = [ModelClient(url, model, lazy_init=False) for _ in values]
    start = threading.Barrier(len(values))

    def one(client, value):
        start.wait()
        try:
            return client.infer_sample(x=np.array([value], dtype=np.float32))["y"].tolist()
        except PyTritonClientInferenceServerError as exc:
            return str(exc)

    try:
        with concurrent.futures.ThreadPoolExecutor(len(values)) as pool:
            return dict(zip(values, pool.map(one, clients, values)))
    finally:
        for client in clients:
            client.close()


@pytest.fixture(scope="module")
def served():
    isolating, plain = Doubler(), Doubler()
    io = {"inputs": [Tensor(name="x", dtype=np.float32, shape=(1,))],
          "outputs": [Tensor(name="y", dtype=np.float32, shape=(1,))]}
    gather = DynamicBatcher(max_queue_delay_microseconds=500_000)
    config = server_config()
    with Triton(config=config) as triton:
        triton.bind("Isolating", isolating, config=ModelConfig(max_batch_size=32, batcher=gather,
                                                              isolate_failures=True), **io)
        triton.bind("Plain", plain, config=ModelConfig(max_batch_size=32, batcher=gather), **io)
        triton.run()
        yield grpc_url(config), isolating, plain
    assert our_leftovers() == {"processes": [], "segments": [], "folders": []}


def test_with_isolation_only_the_poison_request_fails(served):
    url, isolating, _ = served
    answers = _fire(url, "Isolating", [*GOOD, POISON])
    poison_batches = [b for b in isolating.batches if POISON in b and len(b) > 1]
    assert poison_batches, f"the poison never shared a batch: {isolating.batches}"
    for value in GOOD:
        assert answers[value] == [value * 2], f"good request {value} got {answers[value]!r}"
    assert "Model 'Isolating' failed: ValueError: poison in a batch of 1" in answers[POISON]
    # The poison's error is its own: no other requester's value in it.
    assert not any(f"{value:g}" in answers[POISON].replace("of 1", "") for value in GOOD)


def test_without_isolation_good_requests_sharing_the_poisons_batch_fail(served):
    url, _, plain = served
    answers = _fire(url, "Plain", [*GOOD, POISON])
    shared = {value for b in plain.batches if POISON in b for value in b if value != POISON}
    assert shared, f"the poison never shared a batch: {plain.batches}"
    for value in shared:
        assert "Model 'Plain' failed: ValueError: poison in a batch of" in answers[value]
    for value in set(GOOD) - shared:
        assert answers[value] == [value * 2]
