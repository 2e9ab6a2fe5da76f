"""The hop hidden behind the callable: two Triton instances (lanes) feed each plain callable.

While the callable works on one lane's batch, the other lane's batch already waits in the
worker. These tests pin what that must not change: every requester gets its own answer, a
callable's error reaches only the requesters of its batch, a client that gives up does not
disturb the rest, a stop with both lanes busy finishes or fails every request (no hang), and a
small /dev/shm falls back to one lane.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from support import grpc_url, http_url, our_leftovers, running_triton, stub_processes

from pytriton.binding import PIPELINE_MIN_SHM_BYTES, pipeline_lanes
from pytriton.client import ModelClient
from pytriton.client.exceptions import PyTritonClientInferenceServerError, PyTritonClientTimeoutError
from pytriton.decorators import batch
from pytriton.ipc import protocol
from pytriton.model_config import DynamicBatcher, ModelConfig, QueuePolicy, Tensor

pytestmark = pytest.mark.functional

_TENSORS = {
    "inputs": [Tensor(name="x", dtype=np.int64, shape=(1,)), Tensor(name="delay", dtype=np.float32, shape=(1,))],
    "outputs": [Tensor(name="y", dtype=np.int64, shape=(1,))],
}


class _Recorder:
    """A slow @batch model that remembers the batches it saw and when each call ran."""

    def __init__(self, fail_on: int = -1) -> None:
        self.calls: list = []
        self.lock = threading.Lock()
        self.fail_on = fail_on
        self.infer = batch(self._infer)

    def _infer(self, x, delay):
        started = time.monotonic()
        time.sleep(float(delay.max()))
        with self.lock:
            self.calls.append((started, time.monotonic(), x[:, 0].tolist()))
        if self.fail_on in x[:, 0].tolist():
            raise ValueError(f"refusing value {self.fail_on}")
        return {"y": x * 10}


def _ask(url: str, value: int, delay: float = 0.05, timeout_s: float = 30.0) -> dict:
    with ModelClient(url, "Slow", inference_timeout_s=timeout_s) as client:
        return client.infer_sample(x=np.array([value], dtype=np.int64), delay=np.array([delay], dtype=np.float32))


@pytest.mark.parametrize("protocol_url", [http_url, grpc_url], ids=["http", "grpc"])
def test_each_requester_gets_its_own_answer_and_the_callable_never_waits_for_the_hop(protocol_url):
    recorder = _Recorder()
    with running_triton() as triton:
        triton.bind("Slow", recorder.infer, **_TENSORS, config=ModelConfig(max_batch_size=8))
        triton.run()
        assert len(stub_processes("Slow")) == protocol.PIPELINE_LANES  # /dev/shm here is large
        url = protocol_url(triton._config)
        values = list(range(1, 49))
        with ThreadPoolExecutor(max_workers=16) as pool:
            answers = list(pool.map(lambda v: _ask(url, v), values))
    for value, answer in zip(values, answers):
        np.testing.assert_array_equal(answer["y"], [value * 10])  # its own, never a neighbour's
    seen = sorted(v for _, _, batch_values in recorder.calls for v in batch_values)
    assert seen == values  # each request computed once
    # Two lanes: the next batch is already in the worker when a call ends, so under load the
    # gap between one call's end and the next call's start is the worker's own work, far below
    # the hop and Triton's dispatch (milliseconds on this machine).
    calls = sorted(recorder.calls)
    gaps = [nxt[0] - cur[1] for cur, nxt in zip(calls, calls[1:])]
    busy = [gap for gap in gaps if gap < 0.05]  # while requests kept coming
    assert len(busy) >= len(gaps) // 2, gaps
    assert sorted(busy)[len(busy) // 2] < 0.003, f"median gap between calls {sorted(busy)[len(busy) // 2]:.4f} s"


def test_a_raising_batch_fails_its_own_requesters_only_and_both_lanes_go_on():
    recorder = _Recorder(fail_on=7)
    with running_triton() as triton:
        triton.bind("Slow", recorder.infer, **_TENSORS, config=ModelConfig(max_batch_size=1))
        triton.run()
        url = http_url(triton._config)
        outcomes: dict = {}

        def ask(value):
            try:
                outcomes[value] = _ask(url, value)["y"].tolist()
            except PyTritonClientInferenceServerError as exc:
                outcomes[value] = str(exc)

        with ThreadPoolExecutor(max_workers=6) as pool:
            list(pool.map(ask, range(1, 13)))
    assert "refusing value 7" in outcomes[7] and "Slow" in outcomes[7]
    for value in set(range(1, 13)) - {7}:
        assert outcomes[value] == [value * 10], (value, outcomes[value])


def test_a_client_that_gives_up_while_its_batch_waits_in_the_worker_disturbs_no_one():
    recorder = _Recorder()
    with running_triton() as triton:
        triton.bind("Slow", recorder.infer, **_TENSORS, config=ModelConfig(max_batch_size=1))
        triton.run()
        url = http_url(triton._config)
        with ThreadPoolExecutor(max_workers=3) as pool:
            first = pool.submit(_ask, url, 1, 1.0)  # lane A: the callable sleeps 1 s
            time.sleep(0.2)
            impatient = pool.submit(_ask, url, 2, 0.0, 0.3)  # lane B: waits in the worker, gives up
            time.sleep(0.1)
            third = pool.submit(_ask, url, 3, 0.0)
            with pytest.raises(PyTritonClientTimeoutError):
                impatient.result()
            assert first.result()["y"].tolist() == [10]
            assert third.result()["y"].tolist() == [30]
        assert _ask(url, 4, 0.0)["y"].tolist() == [40]  # both lanes still serve


def test_stop_while_both_lanes_hold_a_batch_answers_or_fails_every_request_and_leaves_nothing():
    recorder = _Recorder()
    results: dict = {}
    with running_triton(exit_timeout_secs=5) as triton:
        triton.bind("Slow", recorder.infer, **_TENSORS, config=ModelConfig(max_batch_size=1))
        triton.run()
        url = http_url(triton._config)

        def ask(value):
            started = time.monotonic()
            try:
                results[value] = ("ok", _ask(url, value, 0.5, 20.0)["y"].tolist())
            except Exception as exc:  # noqa: BLE001 - the test inspects it
                results[value] = ("error", f"{type(exc).__name__}: {exc}")
            results[value] += (time.monotonic() - started,)

        threads = [threading.Thread(target=ask, args=(value,)) for value in (1, 2)]
        for thread in threads:
            thread.start()
            time.sleep(0.1)  # 1 runs in the callable, 2 waits in the worker on the other lane
        triton.stop()
        for thread in threads:
            thread.join(15)
    assert not any(thread.is_alive() for thread in threads), "a request hung across stop()"
    for value in (1, 2):
        kind, answer, seconds = results[value]
        assert seconds < 10, results
        if kind == "ok":
            assert answer == [value * 10]
    assert results[1][0] == "ok", results  # the one inside the callable finished within the exit timeout
    assert our_leftovers() == {"processes": [], "segments": []}


def test_one_lane_below_the_shm_floor_for_relayed_models_and_for_queue_rules():
    big = PIPELINE_MIN_SHM_BYTES
    assert pipeline_lanes(relayed=False, shm_total_bytes=big) == protocol.PIPELINE_LANES
    assert pipeline_lanes(relayed=False, shm_total_bytes=big, config=ModelConfig()) == protocol.PIPELINE_LANES
    assert pipeline_lanes(relayed=False, shm_total_bytes=64 << 20) == 1  # Docker's default
    assert pipeline_lanes(relayed=True, shm_total_bytes=1 << 40) == 1
    assert pipeline_lanes(relayed=False, shm_total_bytes=big, handlers=2) == 1  # several callables
    for batcher in (DynamicBatcher(priority_levels=2, default_priority_level=1), DynamicBatcher(preserve_ordering=True),
                    DynamicBatcher(default_queue_policy=QueuePolicy(max_queue_size=4))):
        assert pipeline_lanes(relayed=False, shm_total_bytes=big, config=ModelConfig(batcher=batcher)) == 1, batcher


def test_a_request_to_a_model_with_two_callables_never_waits_behind_the_busy_one():
    """Each callable has one Triton instance: Triton hands the second of two concurrent requests
    to the idle callable. With two lanes per callable it handed it to the busy callable's second
    lane in every round of one start out of two (Triton picks the idle instance that waited
    longest, an order fixed by how the instances loaded)."""
    first, second = _Recorder(), _Recorder()
    with running_triton() as triton:
        triton.bind("Slow", [first.infer, second.infer], **_TENSORS, config=ModelConfig(max_batch_size=4))
        triton.run()
        url = http_url(triton._config)
        assert len(stub_processes("Slow")) == 2, "one Triton instance per callable"
        waits = []
        with ThreadPoolExecutor(2) as pool:
            for round_ in range(8):
                slow = pool.submit(_ask, url, 2 * round_, 0.4)
                time.sleep(0.05)
                started = time.monotonic()
                pool.submit(_ask, url, 2 * round_ + 1, 0.0).result()
                waits.append(time.monotonic() - started)
                assert slow.result()["y"].tolist() == [20 * round_]
    assert max(waits) < 0.3, f"the quick request waited behind the busy callable: {[round(w, 2) for w in waits]}"
    assert first.calls and second.calls, "both callables served"
    assert our_leftovers() == {"processes": [], "segments": []}
