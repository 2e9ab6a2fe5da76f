"""pytriton's own metrics and the callable's on Triton's /metrics port, against the real server.

Known traffic (requests of known sizes, failing requests, requests past their deadline, a killed
stub, a killed worker process) must show as exact counts; the callable-time histogram's sum must
agree with the time the callable measured itself within 10 %.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import threading
import time
import urllib.request
from typing import Dict, Iterator, Tuple

import numpy as np
import pytest
import tritonclient.http as httpclient
from support import forked_children, http_status, running_triton, server_config, stub_processes, wait_until

from pytriton.client import DecoupledModelClient, ModelClient
from pytriton.client.exceptions import PyTritonClientInferenceServerError
from pytriton.constants import METRICS_PERIOD_ENV
from pytriton.decorators import batch
from pytriton.exceptions import PyTritonBadParameterError, PyTritonInvalidOperationError
from pytriton.metrics import Counter, Gauge, Histogram
from pytriton.model_config import ModelConfig, Tensor
from pytriton.triton import Triton

pytestmark = pytest.mark.functional

X = [Tensor(name="x", dtype=np.float32, shape=(-1,))]
Y = [Tensor(name="y", dtype=np.float32, shape=(-1,))]

ROWS = Counter("app_rows_total", "Rows the test callables saw", labelnames=("kind",))
LENGTHS = Histogram("app_row_length", "Values per row", buckets=(1, 2, 4, 8))
LAST = Gauge("app_last_rows", "Rows of the last batch")

Series = Dict[Tuple[str, frozenset], float]


def scrape(port: int) -> Series:
    """Every sample on the metrics port, by name (as written: Prometheus stores the names it reads,
    while prometheus_client's parser renames counters' samples) and labels."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    found: Series = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            match = _SAMPLE.match(line)
            assert match, f"not a Prometheus sample line: {line!r}"
            labels = frozenset(_LABEL.findall(match["labels"] or ""))
            found[(match["name"], labels)] = float(match["value"])
    return found


_SAMPLE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>[^}]*)\})? (?P<value>\S+)$")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def value(series: Series, name: str, model: str, **labels: str) -> float:
    """The sample `name` of `model` (instance 0, version 1) with `labels`; 0 when absent."""
    key = frozenset({"model": model, "version": "1", "instance": "0", **labels}.items())
    return series.get((name, key), 0.0)


class Timed:
    """A @batch callable that sleeps 20 ms, measures its own time, and fails rows holding a negative value."""

    def __init__(self) -> None:
        self.calls = 0
        self.seconds = 0.0
        self.lock = threading.Lock()

    def __call__(self, x):
        started = time.perf_counter()
        ROWS.labels(kind="plain").inc(len(x))
        LAST.set(len(x))
        for row in x:
            LENGTHS.observe(row.size)
        time.sleep(0.02)
        if (x < 0).any():
            raise ValueError("negative input")
        with self.lock:
            self.calls += 1
            self.seconds += time.perf_counter() - started
        return {"y": x * 2}


async def async_infer(requests):
    await asyncio.sleep(0.001)
    ROWS.labels(kind="async").inc(len(requests))
    return [{"y": request["x"] + 1} for request in requests]


def streaming(requests):
    for _ in range(3):
        ROWS.labels("stream").inc()
        yield [{"y": request["x"]} for request in requests]


HELD = threading.Event()


def held(requests):
    """A stream that stays open after its first piece until the test sets HELD."""
    yield [{"y": request["x"]} for request in requests]
    HELD.wait(30)
    yield [{"y": request["x"] + 1} for request in requests]


@batch
def in_process(x):
    ROWS.labels(kind="process").inc(len(x))
    return {"y": x - 1}


@batch
def slow(x):
    time.sleep(float(x[0, 0]))
    return {"y": x}


@pytest.fixture(scope="module")
def served(request) -> Iterator[dict]:
    os.environ[METRICS_PERIOD_ENV] = "0.2"
    request.addfinalizer(lambda: os.environ.pop(METRICS_PERIOD_ENV, None))
    config = server_config()
    timed = Timed()
    with Triton(config=config) as triton:
        triton.bind("Plain", batch(timed), X, Y, config=ModelConfig(max_batch_size=8))
        triton.bind("Async", async_infer, X, Y, config=ModelConfig(max_batch_size=8))
        triton.bind("Stream", streaming, X, Y, config=ModelConfig(max_batch_size=8, decoupled=True))
        triton.bind("Process", in_process, X, Y, config=ModelConfig(max_batch_size=8, process_instances=True))
        triton.bind("Slow", slow, X, Y, config=ModelConfig(max_batch_size=8))
        triton.bind("Held", held, X, Y, config=ModelConfig(max_batch_size=8, decoupled=True))
        triton.run()
        yield {"timed": timed, "url": f"127.0.0.1:{config.http_port}", "grpc": f"grpc://127.0.0.1:{config.grpc_port}",
               "metrics": config.metrics_port}


def _settled(port: int, check, timeout_s: float = 5.0) -> Series:
    """The scrape once `check(series)` holds (the proxies update every 0.2 s here)."""
    last: Dict[str, Series] = {}

    def ready() -> bool:
        last["series"] = scrape(port)
        return bool(check(last["series"]))

    wait_until(ready, timeout_s, interval_s=0.1)
    return last["series"]


def test_counts_and_times_of_known_traffic_are_exact(served):
    port, timed = served["metrics"], served["timed"]
    before = scrape(port)
    calls_before, seconds_before = timed.calls, timed.seconds
    sizes = [1, 3, 2, 5, 1, 4, 2, 2, 3, 1, 6, 2]  # one request at a time: one batch of one request each
    with ModelClient(served["url"], "Plain") as client:
        for rows in sizes:
            client.infer_batch(x=np.ones((rows, 3), np.float32))
    calls = timed.calls - calls_before
    assert calls == len(sizes)

    def grew(name: str, series: Series, **labels: str) -> float:
        return value(series, name, "Plain", **labels) - value(before, name, "Plain", **labels)

    after = _settled(port, lambda s: grew("pytriton_callable_seconds_count", s) == calls
                     and grew("app_rows_total", s, kind="plain") == sum(sizes))
    assert grew("pytriton_batch_size_count", after) == calls
    assert grew("pytriton_batch_size_sum", after) == len(sizes)  # requests, one per batch
    assert grew("pytriton_batch_size_bucket", after, le="1") == calls
    assert grew("pytriton_batch_wait_seconds_count", after) == calls
    assert 0 < grew("pytriton_batch_wait_seconds_sum", after) < 0.05 * calls  # the hop: well under 50 ms a batch
    measured = timed.seconds - seconds_before
    exported = grew("pytriton_callable_seconds_sum", after)
    assert abs(exported - measured) <= 0.1 * measured, (exported, measured)
    assert grew("pytriton_callable_seconds_bucket", after, le="0.01") == 0  # each call sleeps 20 ms
    assert grew("pytriton_callable_seconds_bucket", after, le="+Inf") == calls
    # The callable's own metrics, with the model's labels added.
    assert grew("app_rows_total", after, kind="plain") == sum(sizes)
    assert grew("app_row_length_count", after) == sum(sizes)
    assert grew("app_row_length_sum", after) == 3 * sum(sizes)
    assert grew("app_row_length_bucket", after, le="2") == 0
    assert grew("app_row_length_bucket", after, le="4") == sum(sizes)
    assert value(after, "app_last_rows", "Plain") == sizes[-1]


def test_errors_and_deadline_drops_are_counted_per_request(served):
    port, timed = served["metrics"], served["timed"]
    before = scrape(port)
    calls_before = timed.calls
    with ModelClient(served["url"], "Plain") as client:
        for _ in range(3):
            with pytest.raises(PyTritonClientInferenceServerError, match="negative input"):
                client.infer_sample(x=np.full(2, -1.0, np.float32))
    raw = httpclient.InferenceServerClient(served["url"])
    try:
        for _ in range(2):
            data = httpclient.InferInput("x", [1, 2], "FP32")
            data.set_data_from_numpy(np.ones((1, 2), np.float32))
            past = int((time.time() - 5) * 1000)
            with pytest.raises(Exception, match="deadline"):
                raw.infer("Plain", [data], parameters={"pytriton_deadline_ms": past})
    finally:
        raw.close()
    assert timed.calls == calls_before  # neither the failing nor the expired ones completed a call

    def grew(name: str, series: Series) -> float:
        return value(series, name, "Plain") - value(before, name, "Plain")

    after = _settled(port, lambda s: grew("pytriton_callable_errors_total", s) == 3
                     and grew("pytriton_deadline_dropped_requests_total", s) == 2)
    assert grew("pytriton_callable_errors_total", after) == 3
    assert grew("pytriton_deadline_dropped_requests_total", after) == 2
    assert grew("pytriton_callable_seconds_count", after) == 3  # the expired requests never reached the callable


def test_requests_in_flight_shows_a_running_call(served):
    port = served["metrics"]
    outcome = {}

    def ask() -> None:
        with ModelClient(served["url"], "Slow", inference_timeout_s=30) as client:
            outcome["y"] = client.infer_batch(x=np.full((2, 1), 2.0, np.float32))["y"]

    thread = threading.Thread(target=ask)
    thread.start()
    during = _settled(port, lambda s: value(s, "pytriton_requests_in_flight", "Slow") == 1)
    thread.join(10)
    assert value(during, "pytriton_requests_in_flight", "Slow") == 1  # one request of two rows
    after = _settled(port, lambda s: value(s, "pytriton_requests_in_flight", "Slow") == 0)
    assert value(after, "pytriton_requests_in_flight", "Slow") == 0
    assert outcome["y"].shape == (2, 1)


def test_requests_in_flight_counts_a_streams_open_request(served):
    # pytriton's backend counts a stream from its batch's send to its final response (relay.c).
    port = served["metrics"]
    HELD.clear()
    with DecoupledModelClient(served["grpc"], "Held", inference_timeout_s=30) as client:
        parts = iter(client.infer_sample(x=np.ones(2, np.float32)))
        first = next(parts)
        during = _settled(port, lambda s: value(s, "pytriton_requests_in_flight", "Held") == 1)
        HELD.set()
        rest = list(parts)
    after = _settled(port, lambda s: value(s, "pytriton_requests_in_flight", "Held") == 0)
    assert value(during, "pytriton_requests_in_flight", "Held") == 1  # the open stream
    assert value(after, "pytriton_requests_in_flight", "Held") == 0  # its final response came
    assert first["y"].tolist() == [1.0, 1.0] and [part["y"].tolist() for part in rest] == [[2.0, 2.0]]


def test_callables_of_every_kind_record_their_own_metrics(served):
    port = served["metrics"]
    before = scrape(port)
    with ModelClient(served["url"], "Async") as client:
        for _ in range(4):
            client.infer_sample(x=np.ones(2, np.float32))
    with ModelClient(served["url"], "Process") as client:
        for _ in range(5):
            client.infer_batch(x=np.ones((2, 2), np.float32))
    with DecoupledModelClient(served["grpc"], "Stream") as client:
        parts = list(client.infer_sample(x=np.ones(2, np.float32)))
    assert len(parts) == 3

    def grew(series: Series, model: str, kind: str) -> float:
        return value(series, "app_rows_total", model, kind=kind) - value(before, "app_rows_total", model, kind=kind)

    after = _settled(port, lambda s: grew(s, "Async", "async") == 4 and grew(s, "Process", "process") == 10
                     and grew(s, "Stream", "stream") == 3)
    assert grew(after, "Async", "async") == 4
    assert grew(after, "Process", "process") == 10  # recorded in the forked worker process
    assert grew(after, "Stream", "stream") == 3
    assert value(after, "pytriton_callable_seconds_count", "Stream") >= 1  # a stream counts once, to its end
    assert value(after, "pytriton_callable_seconds_count", "Async") >= 4


def test_recording_outside_a_callable_and_bad_definitions_are_refused():
    with pytest.raises(PyTritonInvalidOperationError, match="outside an inference callable"):
        ROWS.labels(kind="x").inc()
    with pytest.raises(PyTritonBadParameterError, match="starts with nv_"):
        Counter("nv_mine_total", "reserved")
    with pytest.raises(PyTritonBadParameterError, match="label 'model' is reserved"):
        Counter("mine_total", "x", labelnames=("model",))


def _kill_stub(model: str) -> set:
    stubs = stub_processes(model)
    assert stubs, f"no stub of {model}"
    for stub in stubs:
        stub.send_signal(signal.SIGKILL)
    return {stub.pid for stub in stubs}


def test_a_healed_stub_and_a_reforked_worker_are_counted_and_counts_continue(monkeypatch):
    monkeypatch.setenv(METRICS_PERIOD_ENV, "0.2")
    earlier = set(forked_children())  # another test's server may have its own
    with running_triton(model_backend="python") as triton:  # a stub to kill: the proxy path
        triton.bind("Healed", batch(lambda x: {"y": x}), X, Y, config=ModelConfig(max_batch_size=8))
        triton.bind("Forked", in_process, X, Y, config=ModelConfig(max_batch_size=8, process_instances=True))
        triton.run()
        config = triton._config
        port, url = config.metrics_port, f"127.0.0.1:{config.http_port}"

        def send(model: str, count: int) -> None:
            with ModelClient(url, model, inference_timeout_s=20) as client:
                for _ in range(count):
                    client.infer_sample(x=np.ones(2, np.float32))

        send("Healed", 4)
        send("Forked", 3)
        _settled(port, lambda s: value(s, "pytriton_callable_seconds_count", "Healed") == 4
                 and value(s, "app_rows_total", "Forked", kind="process") == 3)
        _kill_stub("Healed")
        ready = f"http://{url}/v2/models/Healed/ready"
        assert wait_until(lambda: http_status(ready) != 200, 3.0), "the killed stub was not noticed"
        assert wait_until(lambda: http_status(ready) == 200, 15.0), "the stub was not healed"
        send("Healed", 5)

        workers = [pid for pid in forked_children() if pid not in earlier]
        assert len(workers) == 1
        os.kill(workers[0], signal.SIGKILL)
        assert wait_until(lambda: [pid for pid in forked_children() if pid not in earlier and pid != workers[0]], 10.0)
        deadline = time.monotonic() + 15
        while True:  # the first request may reach the dead worker's proxy link and fail; the next ones succeed
            try:
                send("Forked", 1)
                break
            except PyTritonClientInferenceServerError:
                assert time.monotonic() < deadline
                time.sleep(0.2)
        send("Forked", 2)

        after = _settled(port, lambda s: value(s, "pytriton_callable_seconds_count", "Healed") == 9
                         and value(s, "pytriton_worker_restarts_total", "Forked") == 1
                         and value(s, "app_rows_total", "Forked", kind="process") == 6, timeout_s=10)
        assert value(after, "pytriton_stub_restarts_total", "Healed") == 1
        assert value(after, "pytriton_callable_seconds_count", "Healed") == 9  # 4 before the heal, 5 after
        assert value(after, "pytriton_batch_size_sum", "Healed") == 9
        assert value(after, "pytriton_worker_restarts_total", "Forked") == 1
        assert value(after, "app_rows_total", "Forked", kind="process") == 3 + 3  # before the kill, and after
        assert value(after, "pytriton_callable_seconds_count", "Forked") == 6


def test_metrics_off_serves_without_exporting():
    with running_triton(allow_metrics=False) as triton:
        triton.bind("Quiet", batch(lambda x: {"y": x + 1}), X, Y, config=ModelConfig(max_batch_size=8))
        triton.run()
        url = f"127.0.0.1:{triton._config.http_port}"
        with ModelClient(url, "Quiet") as client:
            np.testing.assert_allclose(client.infer_sample(x=np.ones(2, np.float32))["y"], [2, 2])


def test_reloads_keep_the_server_answering_and_counts_continue(monkeypatch):
    """A reload starts the new stub, whose metric series carry the old stub's labels, before the old
    one ends. Deleting the old stub's metric objects then freed the series the new stub updated and
    corrupted tritonserver's heap (it stopped answering); the counts must also go on across reloads."""
    monkeypatch.setenv(METRICS_PERIOD_ENV, "0.05")
    with running_triton() as triton:
        triton.bind("Reloaded", batch(lambda x: {"y": x}), X, Y, config=ModelConfig(max_batch_size=8))
        triton.run()
        config = triton._config
        url = f"127.0.0.1:{config.http_port}"
        raw = httpclient.InferenceServerClient(url)
        try:
            declared = raw.get_model_config("Reloaded")
        finally:
            raw.close()
        sent = 0
        with ModelClient(url, "Reloaded", inference_timeout_s=20, access_token=triton.get_access_token()) as client:
            for round_ in range(8):
                for _ in range(3):
                    client.infer_sample(x=np.ones(2, np.float32))
                    sent += 1
                time.sleep(0.15)  # a metrics period or more: the stub has its series when the next one starts
                # A new configuration: Triton starts a new stub.
                declared["dynamic_batching"] = {"max_queue_delay_microseconds": 100 + round_}
                client.load_model(config=json.dumps(declared))
                ready = http_status(f"http://{url}/v2/health/ready", timeout_s=5)
                assert ready == 200, f"no answer after reload {round_}: {ready}"
            client.infer_sample(x=np.ones(2, np.float32))
            sent += 1
        after = _settled(config.metrics_port, lambda s: value(s, "pytriton_callable_seconds_count", "Reloaded") == sent)
        assert value(after, "pytriton_batch_size_sum", "Reloaded") == sent
        # Counted once per reload, although each old stub still polled while its successor exported.
        assert value(after, "pytriton_stub_restarts_total", "Reloaded") == 8
