"""Many requesters at once through the one Triton instance of each callable.

Each callable is fed by one Triton instance, so Triton's batcher gathers what arrives while the
callable works into the next batch. These tests pin what must hold under concurrency: every
requester gets its own answer, batches are gathered, a callable's error reaches only the
requesters of its batch, a client that gives up does not disturb the rest, a stop with requests
in flight finishes or fails every one of them (no hang), and a request to a model with two
callables never waits behind the busy one.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from support import grpc_url, http_url, our_leftovers, running_triton, triton_instances

from pytriton.client import ModelClient
from pytriton.client.exceptions import PyTritonClientInferenceServerError, PyTritonClientTimeoutError
from pytriton.decorators import batch
from pytriton.model_config import ModelConfig, Tensor

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
def test_each_requester_gets_its_own_answer_in_gathered_batches(protocol_url):
    recorder = _Recorder()
    with running_triton() as triton:
        triton.bind("Slow", recorder.infer, **_TENSORS, config=ModelConfig(max_batch_size=8))
        triton.run()
        assert triton_instances(triton._config, "Slow") == 1, "one Triton instance per callable"
        url = protocol_url(triton._config)
        values = list(range(1, 49))
        with ThreadPoolExecutor(max_workers=16) as pool:
            answers = list(pool.map(lambda v: _ask(url, v), values))
    for value, answer in zip(values, answers):
        np.testing.assert_array_equal(answer["y"], [value * 10])  # its own, never a neighbour's
    seen = sorted(v for _, _, batch_values in recorder.calls for v in batch_values)
    assert seen == values  # each request computed once
    # 16 requesters, a 50 ms callable: what arrived during one call is the next call's batch.
    sizes = [len(batch_values) for _, _, batch_values in recorder.calls]
    assert max(sizes) >= 4 and len(sizes) <= len(values) // 2, sizes


def test_a_raising_batch_fails_its_own_requesters_only_and_serving_goes_on():
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


def test_a_client_that_gives_up_while_its_request_is_queued_disturbs_no_one():
    recorder = _Recorder()
    with running_triton() as triton:
        triton.bind("Slow", recorder.infer, **_TENSORS, config=ModelConfig(max_batch_size=1))
        triton.run()
        url = http_url(triton._config)
        with ThreadPoolExecutor(max_workers=3) as pool:
            first = pool.submit(_ask, url, 1, 1.0)  # the callable sleeps 1 s
            time.sleep(0.2)
            impatient = pool.submit(_ask, url, 2, 0.0, 0.3)  # queued behind it, gives up
            time.sleep(0.1)
            third = pool.submit(_ask, url, 3, 0.0)
            with pytest.raises(PyTritonClientTimeoutError):
                impatient.result()
            assert first.result()["y"].tolist() == [10]
            assert third.result()["y"].tolist() == [30]
        assert _ask(url, 4, 0.0)["y"].tolist() == [40]  # still serving
    served = [value for _, _, batch_values in recorder.calls for value in batch_values]
    assert 2 not in served, f"the callable computed a request nobody waited for: {served}"


def test_stop_with_requests_in_flight_answers_or_fails_every_request_and_leaves_nothing():
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
            time.sleep(0.1)  # 1 runs in the callable, 2 waits in Triton's queue
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
    assert our_leftovers() == {"processes": [], "segments": [], "folders": []}


def test_a_request_to_a_model_with_two_callables_never_waits_behind_the_busy_one():
    """Each callable has one Triton instance: Triton hands the second of two concurrent requests
    to the idle callable. (With two instances per callable, as an earlier design had, it handed
    it to the busy callable's second instance in every round of one start out of two: Triton
    picks the idle instance that waited longest, an order fixed by how the instances loaded.)"""
    first, second = _Recorder(), _Recorder()
    with running_triton() as triton:
        triton.bind("Slow", [first.infer, second.infer], **_TENSORS, config=ModelConfig(max_batch_size=4))
        triton.run()
        url = http_url(triton._config)
        assert triton_instances(triton._config, "Slow") == 2, "one Triton instance per callable"
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
    assert our_leftovers() == {"processes": [], "segments": [], "folders": []}
