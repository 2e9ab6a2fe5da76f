"""Stateful sequences through Triton's sequence batcher (`ModelConfig(batcher=SequenceBatcher(...))`).

A running-total callable keeps its state per sequence in the callable; clients send
``sequence_id`` / ``sequence_start`` / ``sequence_end``. What must hold: each request tells the
callable its sequence, the requests of one sequence reach one callable in order (so totals are
exact under interleaving), and a request outside a live sequence gets a clear error while the
other sequences go on.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Dict, Iterator, List

import numpy as np
import pytest
from support import http_status, server_config, stub_processes, wait_until

from pytriton.client import (
    AsyncioDecoupledModelClient,
    AsyncioModelClient,
    DecoupledModelClient,
    FuturesModelClient,
    ModelClient,
)
from pytriton.client.exceptions import PyTritonClientInferenceServerError, PyTritonClientValueError
from pytriton.decorators import batch
from pytriton.model_config import ModelConfig, SequenceBatcher, Tensor
from pytriton.triton import Triton

pytestmark = pytest.mark.functional

TENSORS = {
    "inputs": [Tensor(name="x", dtype=np.float32, shape=(1,))],
    "outputs": [Tensor(name="total", dtype=np.float32, shape=(1,)), Tensor(name="calls", dtype=np.int64, shape=(1,))],
}


class RunningTotal:
    """A plain callable with a total per live sequence; records which sequences it saw."""

    def __init__(self) -> None:
        self.totals: Dict[object, float] = {}
        self.seen: set = set()
        self.batch_sizes: List[int] = []
        self.lock = threading.Lock()

    def __call__(self, requests):
        answers = []
        with self.lock:
            self.batch_sizes.append(len(requests))
            for request in requests:
                key = request.sequence_id
                self.seen.add(key)
                if request.sequence_start:
                    self.totals[key] = 0.0
                self.totals[key] += float(request["x"].sum())
                answers.append({"total": np.array([[self.totals[key]]], np.float32),
                                "calls": np.array([[len(self.batch_sizes)]], np.int64)})
                if request.sequence_end:
                    del self.totals[key]
        return answers


class BatchedTotal:
    """The same running total under @batch: the sequence arrives as arrays, one row each."""

    def __init__(self) -> None:
        self.totals: Dict[object, float] = {}
        self.batch_rows: List[int] = []
        self.infer = batch(self._infer)

    def _infer(self, x, sequence_id, sequence_start, sequence_end):
        self.batch_rows.append(len(x))
        totals = np.empty((len(x), 1), np.float32)
        for row, (key, start, end) in enumerate(zip(sequence_id[:, 0], sequence_start[:, 0], sequence_end[:, 0])):
            if start:
                self.totals[key] = 0.0
            self.totals[key] += float(x[row, 0])
            totals[row, 0] = self.totals[key]
            if end:
                del self.totals[key]
        return {"total": totals, "calls": np.full((len(x), 1), len(self.batch_rows), np.int64)}


@pytest.fixture(scope="module")
def served() -> Iterator[dict]:
    config = server_config()
    models = {
        "Direct": [RunningTotal()],
        "Oldest": [RunningTotal()],
        "Two": [RunningTotal(), RunningTotal()],
        "Idle": [RunningTotal()],
    }
    batchers = {
        "Direct": SequenceBatcher(),
        "Oldest": SequenceBatcher(strategy="oldest", max_queue_delay_microseconds=2000),
        "Two": SequenceBatcher(),
        "Idle": SequenceBatcher(max_sequence_idle_microseconds=300_000),
    }
    batched = BatchedTotal()
    with Triton(config=config) as triton:
        for name, callables in models.items():
            triton.bind(name, callables, config=ModelConfig(max_batch_size=8, batcher=batchers[name]), **TENSORS)
        oldest = SequenceBatcher(strategy="oldest", max_queue_delay_microseconds=2000)
        triton.bind("Batched", batched.infer, config=ModelConfig(max_batch_size=8, batcher=oldest), **TENSORS)
        models["Batched"] = [batched]
        yield {"models": models, "http": f"http://127.0.0.1:{config.http_port}",
               "grpc": f"grpc://127.0.0.1:{config.grpc_port}"}


def _run_sequence(client: ModelClient, sequence_id, values: List[float]) -> List[float]:
    totals = []
    for step, value in enumerate(values):
        out = client.infer_sample(np.array([value], np.float32), sequence_id=sequence_id,
                                  sequence_start=step == 0, sequence_end=step == len(values) - 1)
        totals.append(float(out["total"][0]))
    return totals


@pytest.mark.parametrize("model", ["Direct", "Oldest", "Two", "Batched"])
@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_32_interleaved_sequences_from_8_clients_keep_exact_totals(served, model, protocol):
    base = 1000 * (1 + ["Direct", "Oldest", "Two", "Batched"].index(model)) + 100 * ["http", "grpc"].index(protocol)
    ids = [f"{protocol}-{model}-{n}" if n % 2 else base + n for n in range(32)]  # int and str ids alike, unique

    def client_work(worker: int) -> Dict[object, List[float]]:
        results = {}
        with ModelClient(served[protocol], model) as client:
            for sequence_id in ids[worker::8]:
                values = [float(worker + 1), 2.0, 3.0, float(len(str(sequence_id)))]
                results[sequence_id] = (_run_sequence(client, sequence_id, values), values)
        return results

    with ThreadPoolExecutor(8) as pool:
        merged: Dict[object, tuple] = {}
        for part in pool.map(client_work, range(8)):
            merged.update(part)
    assert set(merged) == set(ids)
    for sequence_id, (totals, values) in merged.items():
        assert totals == list(np.cumsum(values)), sequence_id
    callables = served["models"][model]
    assert all(not c.totals for c in callables)  # every sequence ended
    if model == "Batched":
        assert max(callables[0].batch_rows) > 1  # rows of several sequences in one call
        return
    seen = [c.seen & set(ids) for c in callables]
    assert set().union(*seen) == set(ids)
    if model == "Two":  # each sequence stayed on one callable
        assert not seen[0] & seen[1]


def test_the_oldest_strategy_batches_requests_of_several_sequences(served):
    recorder = served["models"]["Oldest"][0]
    assert max(recorder.batch_sizes, default=0) > 1


def test_futures_and_asyncio_clients_send_sequences(served):
    import asyncio

    with FuturesModelClient(served["grpc"], "Direct") as client:
        totals = [
            client.infer_sample(np.array([v], np.float32), sequence_id="futures", sequence_start=i == 0,
                                sequence_end=i == 2).result(timeout=30)["total"][0]
            for i, v in enumerate([1, 2, 3])
        ]
    assert totals == [1.0, 3.0, 6.0]

    async def run() -> List[float]:
        async with AsyncioModelClient(served["http"], "Direct") as client:
            out = []
            for i, v in enumerate([4.0, 5.0]):
                result = await client.infer_batch(np.array([[v]], np.float32), sequence_id=77, sequence_start=i == 0,
                                                  sequence_end=i == 1)
                out.append(float(result["total"][0, 0]))
            return out

    assert asyncio.run(run()) == [4.0, 9.0]


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_requests_outside_a_live_sequence_get_a_clear_error_and_others_go_on(served, protocol):
    with ModelClient(served[protocol], "Idle") as client:
        first = client.infer_sample(np.array([1.0], np.float32), sequence_id=5, sequence_start=True)
        assert float(first["total"][0]) == 1
        no_id = r"model 'Idle' must specify a non-zero or non-empty correlation ID"
        with pytest.raises(PyTritonClientInferenceServerError, match=no_id):
            client.infer_sample(np.array([1.0], np.float32))  # no sequence id
        unstarted = r"sequence {} to model 'Idle' must specify the START"
        with pytest.raises(PyTritonClientInferenceServerError, match=unstarted.format(6)):
            client.infer_sample(np.array([1.0], np.float32), sequence_id=6)  # never started
        time.sleep(0.8)  # past max_sequence_idle_microseconds: sequence 5 is freed
        with pytest.raises(PyTritonClientInferenceServerError, match=unstarted.format(5)):
            client.infer_sample(np.array([1.0], np.float32), sequence_id=5)
        assert float(client.infer_sample(np.array([2.0], np.float32), sequence_id=5, sequence_start=True,
                                         sequence_end=True)["total"][0]) == 2


def test_a_stub_killed_mid_sequence_heals_and_its_sequences_must_start_again():
    # The sequence's place in Triton's batcher dies with the model instance; the callable (and
    # its state) lives in this process and survives. The next request of an open sequence gets
    # Triton's error asking for a START; a sequence started again counts from zero.
    total = RunningTotal()
    config = server_config(model_backend="python")  # a stub to kill: the proxy path
    url = f"http://127.0.0.1:{config.http_port}"
    with Triton(config=config) as triton:
        triton.bind("Healing", total, config=ModelConfig(max_batch_size=4, batcher=SequenceBatcher()), **TENSORS)
        with ModelClient(url, "Healing", inference_timeout_s=20) as client:
            assert _run_sequence(client, 9, [1.0, 2.0])[-1] == 3.0  # its end not sent: still open
            stubs = stub_processes("Healing")
            assert len(stubs) == 1
            os.kill(stubs[0].pid, signal.SIGKILL)
            healed = wait_until(lambda: http_status(f"{url}/v2/models/Healing/ready") == 200 and bool(
                {p.pid for p in stub_processes("Healing")} - {stubs[0].pid}), timeout_s=15)
            assert healed
            must_start = r"sequence 9 to model 'Healing' must specify the START flag"
            with pytest.raises(PyTritonClientInferenceServerError, match=must_start):
                client.infer_sample(np.array([5.0], np.float32), sequence_id=9)
            restarted = client.infer_sample(np.array([5.0], np.float32), sequence_id=9, sequence_start=True,
                                             sequence_end=True)
            assert float(restarted["total"][0]) == 5.0
        assert triton.is_alive()


class StreamedTotal:
    """A decoupled sequence model: two responses per request, the running total then its double."""

    def __init__(self) -> None:
        self.totals: Dict[object, float] = {}

    def __call__(self, requests):
        totals = []
        for request in requests:
            if request.sequence_start:
                self.totals[request.sequence_id] = 0.0
            self.totals[request.sequence_id] += float(request["x"].sum())
            totals.append(self.totals[request.sequence_id])
            if request.sequence_end:
                del self.totals[request.sequence_id]
        for factor in (1, 2):
            yield [{"total": np.array([[t * factor]], np.float32), "calls": np.zeros((1, 1), np.int64)} for t in totals]


@pytest.fixture(scope="module")
def streamed() -> Iterator[str]:
    config = server_config()
    with Triton(config=config) as triton:
        triton.bind("Streamed", StreamedTotal(), config=ModelConfig(max_batch_size=4, decoupled=True,
                                                                     batcher=SequenceBatcher()), **TENSORS)
        yield config


def test_the_streaming_clients_send_sequences_over_grpc(streamed):
    protocol = "grpc"
    url = f"grpc://127.0.0.1:{streamed.grpc_port}"
    with DecoupledModelClient(url, "Streamed") as client:
        seen = []
        for step, value in enumerate([1.0, 2.0, 3.0]):
            responses = client.infer_sample(np.array([value], np.float32), sequence_id=f"stream-{protocol}",
                                            sequence_start=step == 0, sequence_end=step == 2)
            seen.append([float(r["total"][0]) for r in responses])
    assert seen == [[1.0, 2.0], [3.0, 6.0], [6.0, 12.0]]

    async def run() -> List[List[float]]:
        async with AsyncioDecoupledModelClient(url, "Streamed") as client:
            out = []
            for step, value in enumerate([4.0, 5.0]):
                responses = client.infer_sample(np.array([value], np.float32), sequence_id=7, sequence_start=step == 0,
                                                sequence_end=step == 1)
                out.append([float(r["total"][0]) async for r in responses])
            return out

    assert asyncio.run(run()) == [[4.0, 8.0], [9.0, 18.0]]


def test_a_sequence_over_http_streaming_is_refused_with_the_way_out(streamed):
    # Triton 2.51's generate_stream endpoint drops the sequence; the server would answer "must
    # specify a non-zero or non-empty correlation ID", which hides the cause.
    with DecoupledModelClient(f"http://127.0.0.1:{streamed.http_port}", "Streamed") as client:
        with pytest.raises(PyTritonClientValueError, match=r"cannot go over HTTP streaming.*use a grpc:// URL"):
            list(client.infer_sample(np.array([1.0], np.float32), sequence_id=3, sequence_start=True))
