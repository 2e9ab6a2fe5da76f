"""The proxy path (``TritonConfig(model_backend="python")``): each feature once, through Triton's
Python backend and its stubs, as on a server without pytriton's backend.

The rest of the functional suite runs on pytriton's backend where it was built; this module keeps
the proxy path honest with one test per feature: plain, ``@batch`` and async callables, streams,
sequences, requested outputs, request parameters, deadlines, cancellation, failure isolation,
process instances, warm-up, the response cache, pytriton's metrics and Triton's statistics.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import os
import signal
import threading
import time
import urllib.request

import numpy as np
import psutil
import pytest
from support import grpc_url, http_url, server_config, stub_processes, wait_until

from pytriton.client import DecoupledModelClient, ModelClient
from pytriton.client.exceptions import PyTritonClientInferenceServerError, PyTritonClientTimeoutError
from pytriton.decorators import batch
from pytriton.model_config import ModelConfig, ModelWarmup, SequenceBatcher, Tensor, WarmupInput
from pytriton.triton import Triton

pytestmark = pytest.mark.functional

X = [Tensor(name="x", dtype=np.float32, shape=(-1,))]
Y = [Tensor(name="y", dtype=np.float32, shape=(-1,))]
WARMED: list = []
CANCELLED: list = []
TOKEN: dict = {}  # the server's access token: the statistics API is restricted by default


@batch
def double(x):
    return {"y": x * 2}


def plain(requests):
    return [{"y": request["x"] + float(request.parameters.get("add", 0))} for request in requests]


@batch
async def async_triple(x):
    await asyncio.sleep(0.005)
    return {"y": x * 3}


@batch
def countdown(x):
    for step in range(3, 0, -1):
        yield {"y": x * step}


def running_total(requests):
    totals = running_total.__dict__.setdefault("totals", {})
    answers = []
    for request in requests:
        if request.sequence_start:
            totals[request.sequence_id] = 0.0
        totals[request.sequence_id] = totals.get(request.sequence_id, 0.0) + float(request["x"].sum())
        answers.append({"y": np.full((1, 1), totals[request.sequence_id], np.float32)})
    return answers


def two_outputs(requests):
    return [dict.fromkeys(request.requested_output_names, request["x"]) for request in requests]


def watchful(requests):
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if all(request.is_cancelled() for request in requests):
            CANCELLED.append(True)
            break
        time.sleep(0.02)
    return [{"y": request["x"]} for request in requests]


def picky(requests):
    if any(float(request["x"].flat[0]) < 0 for request in requests):
        raise ValueError("negative x")
    return [{"y": request["x"]} for request in requests]


@batch
def pid(x):
    time.sleep(0.2)  # long enough that requests sent together need both instances
    return {"pid": np.full((len(x), 1), os.getpid(), np.int64)}


def warmed(requests):
    WARMED.append(len(requests))
    return [{"y": request["x"]} for request in requests]


KEPT: list = []


@batch
def keeps(x):
    KEPT.append(x)  # kept past the answer: the proxy's next batch must not write into it
    return {"y": x + 1}


@pytest.fixture(scope="module")
def server():
    config = server_config(model_backend="python", response_cache_byte_size=1 << 20)
    triton = Triton(config=config)
    batching = ModelConfig(max_batch_size=8)
    triton.bind("Double", double, X, Y, config=batching)
    triton.bind("Plain", plain, X, Y, config=batching)
    triton.bind("Async", async_triple, X, Y, config=batching)
    triton.bind("Countdown", countdown, X, Y, config=ModelConfig(max_batch_size=8, decoupled=True))
    triton.bind("Total", running_total, X, Y, config=ModelConfig(max_batch_size=4, batcher=SequenceBatcher()))
    triton.bind("Two", two_outputs, X, [Tensor(name="a", dtype=np.float32, shape=(-1,)),
                                        Tensor(name="b", dtype=np.float32, shape=(-1,))], config=batching)
    triton.bind("Watchful", watchful, X, Y, config=batching)
    triton.bind("Picky", picky, X, Y, config=ModelConfig(max_batch_size=8, isolate_failures=True))
    triton.bind("Forked", pid, X, [Tensor(name="pid", dtype=np.int64, shape=(1,))],
                config=ModelConfig(max_batch_size=8, process_instances=True, devices=[0, 1]))
    triton.bind("Lone", pid, X, [Tensor(name="pid", dtype=np.int64, shape=(1,))],
                config=ModelConfig(max_batch_size=8, process_instances=True))
    zeros = WarmupInput(dtype=np.float32, shape=(3,), zero_data=True)
    warmup = ModelWarmup(name="w", batch_size=2, inputs={"x": zeros})
    triton.bind("Warmed", warmed, X, Y, config=ModelConfig(max_batch_size=8, model_warmup=[warmup]))
    triton.bind("Cached", plain, X, Y, config=ModelConfig(max_batch_size=8, response_cache=True))
    triton.bind("Keeps", keeps, X, Y, config=batching)
    triton.run()
    TOKEN["header"] = {"triton-access-token": triton.get_access_token() or ""}
    try:
        yield config
    finally:
        triton.stop()


@pytest.fixture(params=["http", "grpc"])
def url(request, server):
    return http_url(server) if request.param == "http" else grpc_url(server)


def test_every_model_runs_in_a_stub(server):
    for model in ("Double", "Plain", "Async", "Countdown", "Total", "Forked"):
        assert stub_processes(model), model


def test_plain_batch_and_async_callables_answer(url):
    ones = np.ones(2, np.float32)
    for model, factor in (("Double", 2), ("Async", 3)):
        with ModelClient(url, model) as client:
            np.testing.assert_array_equal(client.infer_sample(x=ones)["y"], ones * factor)
            assert client.model_config.backend == "python"
    with ModelClient(url, "Plain") as client:  # request parameters reach the callable
        np.testing.assert_array_equal(client.infer_sample(x=ones, parameters={"add": 5})["y"], ones + 5)


def test_large_inputs_a_batch_function_keeps_stay_its_own(url):
    KEPT.clear()
    sent = [np.full((2, 256 * 1024), value, dtype=np.float32) for value in (1.0, 2.0, 3.0)]  # in the arena
    with ModelClient(url, "Keeps") as client:
        for data in sent:
            np.testing.assert_array_equal(client.infer_batch(x=data)["y"], data + 1)
    assert [float(kept[0, 0]) for kept in KEPT] == [1.0, 2.0, 3.0]  # none overwritten by a later batch
    KEPT.clear()


def test_a_stream_answers_step_by_step(url):
    with DecoupledModelClient(url, "Countdown") as client:
        steps = [part["y"].tolist() for part in client.infer_sample(x=np.ones(1, np.float32))]
    assert steps == [[3.0], [2.0], [1.0]]


def test_a_sequence_keeps_its_state(server):
    with ModelClient(http_url(server), "Total") as client:
        totals = [float(client.infer_sample(x=np.array([value], np.float32), sequence_id=7, sequence_start=index == 0,
                                            sequence_end=index == 2)["y"][0])
                  for index, value in enumerate((1.0, 2.0, 3.0))]
    assert totals == [1.0, 3.0, 6.0]


def test_a_request_gets_only_the_outputs_it_asks_for(server):
    request = json.dumps({"inputs": [{"name": "x", "shape": [1, 1], "datatype": "FP32", "data": [4.0]}],
                          "outputs": [{"name": "b"}]}).encode()
    with urllib.request.urlopen(f"{http_url(server)}/v2/models/Two/infer", data=request, timeout=10) as answer:
        outputs = json.loads(answer.read())["outputs"]
    assert [output["name"] for output in outputs] == ["b"]


def test_a_client_that_stops_waiting_is_seen_by_the_callable(server):
    CANCELLED.clear()
    with ModelClient(grpc_url(server), "Watchful", inference_timeout_s=0.5) as client:
        with pytest.raises(PyTritonClientTimeoutError):
            client.infer_sample(x=np.ones(1, np.float32))
    assert wait_until(lambda: CANCELLED, 10.0), "is_cancelled() never said True"


def test_a_failing_request_fails_alone(server):
    results: dict = {}

    def ask(value: float) -> None:
        try:
            with ModelClient(http_url(server), "Picky") as client:
                results[value] = client.infer_sample(x=np.array([value], np.float32))["y"].tolist()
        except PyTritonClientInferenceServerError as exc:
            results[value] = str(exc)

    threads = [threading.Thread(target=ask, args=(value,)) for value in (1.0, -1.0, 2.0)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert results[1.0] == [1.0] and results[2.0] == [2.0]
    assert "negative x" in results[-1.0]


def test_a_process_instance_answers_from_its_own_process(server):
    with ModelClient(http_url(server), "Forked") as client:
        assert int(client.infer_sample(x=np.ones(1, np.float32))["pid"][0]) != os.getpid()


def test_a_worker_process_killed_while_idle_costs_no_request(server):
    """The stub finds the dead worker's connection closed when it sends the next batch, which
    reached nobody: it goes to the fresh worker process, as on pytriton's backend."""
    with ModelClient(http_url(server), "Lone") as client:
        victim = int(client.infer_sample(x=np.ones(1, np.float32))["pid"][0])
        os.kill(victim, signal.SIGKILL)
        # Reaped, so every thread of it ended: until then its sockets stay open (its main thread
        # shows as a zombie first), and a batch sent meanwhile is lost with it, as one in flight.
        assert wait_until(lambda: not psutil.pid_exists(victim), 10)
        answers = {int(client.infer_sample(x=np.ones(1, np.float32))["pid"][0]) for _ in range(3)}
    assert len(answers) == 1 and victim not in answers, answers


def test_instances_grouped_by_device_each_relay_to_their_own_process(server):
    # Two instances named after their devices (Forked_gpu0_0, Forked_gpu1_0): each stub finds its
    # worker by that name; two requests at once need both.
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        pids = set(pool.map(lambda _: _forked_pid(server), range(8)))
    assert len(pids) == 2 and os.getpid() not in pids
    assert len(stub_processes("Forked")) == 2


def _forked_pid(server):
    with ModelClient(http_url(server), "Forked") as client:
        return int(client.infer_sample(x=np.ones(1, np.float32))["pid"][0])


def test_warm_up_and_the_response_cache_work(server):
    assert WARMED, "the warm-up never reached the callable"
    with ModelClient(http_url(server), "Cached") as client:
        first = client.infer_sample(x=np.ones(2, np.float32))["y"]
        again = client.infer_sample(x=np.ones(2, np.float32))["y"]
    np.testing.assert_array_equal(first, again)
    stats_request = urllib.request.Request(f"{http_url(server)}/v2/models/Cached/stats", headers=TOKEN["header"])
    with urllib.request.urlopen(stats_request, timeout=10) as answer:
        stats = json.loads(answer.read())["model_stats"][0]["inference_stats"]
    assert int(stats["cache_hit"]["count"]) >= 1


def test_metrics_and_statistics_count_the_requests(server):
    with ModelClient(http_url(server), "Double") as client:
        for _ in range(3):
            client.infer_sample(x=np.ones(2, np.float32))

    def batches() -> float:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=10) as answer:
            text = answer.read().decode()
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if line.startswith("pytriton_batch_size_count{") and 'model="Double"' in line)

    assert wait_until(lambda: batches() >= 3, 10.0)
    stats_request = urllib.request.Request(f"{http_url(server)}/v2/models/Double/stats", headers=TOKEN["header"])
    with urllib.request.urlopen(stats_request, timeout=10) as answer:
        stats = json.loads(answer.read())["model_stats"][0]
    assert int(stats["inference_count"]) >= 3
