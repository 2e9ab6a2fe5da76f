"""What a stop answers, on pytriton's backend and on the proxy path (docs/reliability.md, "Stopping
under load"): the requests accepted before the refusal (running, or queued in Triton behind a busy
instance) are answered; every request that arrives once the drain refuses is refused at once,
HTTP 503 or gRPC UNAVAILABLE, whatever the instances are doing, over HTTP with and without
keep-alive and over gRPC; a client that waits for a model on a stopping server fails within
seconds saying so. Against the real server."""

from __future__ import annotations

import dataclasses
import http.client
import json
import threading
import time

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from support import grpc_url, http_url, server_config, wait_until

from pytriton.client import ModelClient
from pytriton.client.exceptions import PyTritonClientModelUnavailableError
from pytriton.decorators import batch
from pytriton.model_config import ModelConfig, Tensor
from pytriton.triton import Triton

pytestmark = pytest.mark.functional

BACKENDS = ["pytriton", "python"]  # pytriton's backend, the proxy path


@batch
def sleepy(x):
    time.sleep(float(x.max()))
    return {"y": x}


def _serve(backend: str, max_batch_size: int, drain_serving_s: float = 0.0) -> Triton:
    overrides = {"model_backend": "python"} if backend == "python" else {}
    triton = Triton(config=server_config(exit_timeout_secs=20, drain_serving_s=drain_serving_s, **overrides))
    triton.bind("Sleepy", sleepy, [Tensor(name="x", dtype=np.float32, shape=(1,))],
                [Tensor(name="y", dtype=np.float32, shape=(1,))], config=ModelConfig(max_batch_size=max_batch_size))
    triton.run()
    return triton


def _body(seconds: float) -> str:
    return json.dumps({"inputs": [{"name": "x", "shape": [1, 1], "datatype": "FP32", "data": [seconds]}]})


def _post(connection: http.client.HTTPConnection, seconds: float) -> tuple:
    """(status, body, seconds it took) of one inference request on `connection`."""
    sent = time.monotonic()
    connection.request("POST", "/v2/models/Sleepy/infer", body=_body(seconds))
    response = connection.getresponse()
    return response.status, json.loads(response.read()), time.monotonic() - sent


def _grpc_infer(port: int, seconds: float) -> tuple:
    """(outcome, seconds it took) of one gRPC request: "OK" or the error's status and text."""
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{port}")
    data = grpcclient.InferInput("x", [1, 1], "FP32")
    data.set_data_from_numpy(np.full((1, 1), seconds, np.float32))
    sent = time.monotonic()
    try:
        client.infer("Sleepy", [data], client_timeout=30)
        outcome = "OK"
    except Exception as exc:  # noqa: BLE001 - the test reads it
        outcome = f"{exc.status() if hasattr(exc, 'status') else type(exc).__name__}: {exc}"
    finally:
        client.close()
    return outcome, time.monotonic() - sent


@pytest.mark.parametrize("backend", BACKENDS)
def test_requests_queued_behind_a_busy_instance_when_the_stop_begins_are_answered(backend):
    """The issue's regression: 8 clients, one request each, a batch takes 0.5 s, one instance;
    the stop comes at 0.25 s, while the first batch runs and the others wait in Triton's queue.
    Before: the queued ones were refused as they reached the model ("the server is stopping")."""
    triton = _serve(backend, max_batch_size=16)
    port = triton._config.http_port
    connections = [http.client.HTTPConnection("127.0.0.1", port, timeout=30) for _ in range(8)]
    for connection in connections:
        connection.connect()
    answers: dict = {}

    def ask(index: int) -> None:
        status, body, _ = _post(connections[index], 0.5)
        answers[index] = (status, body)

    clients = [threading.Thread(target=ask, args=(index,)) for index in range(8)]
    try:
        for client in clients:
            client.start()
            time.sleep(0.005)  # one after the other: the first batch holds one or a few
        time.sleep(0.25)
        started = time.monotonic()
        triton.stop()
        took = time.monotonic() - started
        for client in clients:
            client.join(10)
    finally:
        triton.stop()
        for connection in connections:
            connection.close()
    statuses = sorted(status for status, _ in answers.values())
    print(f"\n[{backend}] stop with 8 requests accepted: {took:.2f} s; statuses {statuses}")
    assert sorted(answers) == list(range(8)), answers
    refused = {index: body for index, (status, body) in answers.items() if status != 200}
    assert not refused, f"requests accepted before the stop were refused: {refused}"
    assert all(body["outputs"][0]["data"] == [0.5] for _, body in answers.values())


@pytest.mark.parametrize("backend", BACKENDS)
def test_once_the_drain_refuses_new_requests_are_refused_at_once_whatever_the_instance_does(backend):
    """One instance busy with a 3 s request when the stop begins: a request sent during the drain
    waited behind it before (HTTP keep-alive, gRPC: until it was free; a new HTTP connection hung
    until the server ended). Now each gets the retryable refusal at once."""
    triton = _serve(backend, max_batch_size=8)
    config = triton._config
    keep_alive = http.client.HTTPConnection("127.0.0.1", config.http_port, timeout=30)
    assert _post(keep_alive, 0.0)[0] == 200  # a pooled client's connection, opened before the stop
    long_answer: dict = {}

    def long_request() -> None:
        connection = http.client.HTTPConnection("127.0.0.1", config.http_port, timeout=30)
        long_answer["answer"] = _post(connection, 3.0)
        connection.close()

    holder = threading.Thread(target=long_request)
    holder.start()
    time.sleep(0.5)  # the instance is inside the callable now
    stopper = threading.Thread(target=triton.stop)
    stopper.start()
    try:
        time.sleep(0.5)  # drain_serving_s is 0: the drain refuses by now
        late: dict = {}

        def fresh_connection() -> tuple:
            connection = http.client.HTTPConnection("127.0.0.1", config.http_port, timeout=10)
            try:
                return _post(connection, 0.0)
            finally:
                connection.close()

        senders = {"http keep-alive": lambda: _post(keep_alive, 0.0), "http new connection": fresh_connection,
                   "grpc": lambda: _grpc_infer(config.grpc_port, 0.0)}
        threads = [threading.Thread(target=lambda k=k, f=f: late.__setitem__(k, f())) for k, f in senders.items()]
        for thread in threads:  # at once, each behind the busy instance
            thread.start()
        for thread in threads:
            thread.join(15)
        assert stopper.is_alive(), "the stop should still wait for the long request"
        holder.join(10)
        stopper.join(30)
    finally:
        triton.stop()
        keep_alive.close()
    times = ", ".join(f"{kind} {outcome[-1] * 1000:.0f} ms" for kind, outcome in late.items())
    print(f"\n[{backend}] refused during the drain: {times}")
    for kind in ("http keep-alive", "http new connection"):
        status, body, took = late[kind]
        assert status == 503 and "the server is stopping" in body["error"], (kind, status, body)
        assert took < 1.0, f"{kind}: refused after {took:.2f} s (the busy instance had 2 s left)"
    outcome, took = late["grpc"]
    assert outcome.startswith("StatusCode.UNAVAILABLE") and "the server is stopping" in outcome, outcome
    assert took < 1.0, f"grpc: refused after {took:.2f} s"
    status, body, _ = long_answer["answer"]
    assert status == 200 and body["outputs"][0]["data"] == [3.0]


@pytest.mark.parametrize("backend, protocol", [("pytriton", "http"), ("pytriton", "grpc"), ("python", "http")])
def test_a_client_that_waits_for_a_model_on_a_stopping_server_fails_at_once_saying_so(backend, protocol):
    """Before: it waited its whole init_timeout_s (the server only reported not ready)."""
    triton = _serve(backend, max_batch_size=8)
    url = http_url(triton._config) if protocol == "http" else grpc_url(triton._config)
    holder = threading.Thread(target=_grpc_infer, args=(triton._config.grpc_port, 3.0))
    holder.start()
    time.sleep(0.5)
    stopper = threading.Thread(target=triton.stop)
    stopper.start()
    try:
        assert wait_until(lambda: not triton._control.is_ready(timeout_s=0.5), timeout_s=2)
        started = time.monotonic()
        with pytest.raises(PyTritonClientModelUnavailableError) as caught:
            with ModelClient(url, "Sleepy", init_timeout_s=20) as client:
                client.infer_sample(x=np.array([0.0], dtype=np.float32))
        took = time.monotonic() - started
    finally:
        holder.join(10)
        stopper.join(30)
        triton.stop()
    print(f"\n[{backend}, {protocol}] a new client's wait on a stopping server failed after {took:.2f} s: "
          f"{caught.value}")
    assert f"the server at {url} is stopping" in str(caught.value)
    assert took < 2.0, f"the wait took {took:.1f} s"


def test_where_pytritons_backend_is_not_built_the_refusing_model_is_the_proxy():
    """The proxy path on a machine without a C compiler: the refusing model is a Python model (the
    proxy told to refuse), whose load starts a stub; the refusal and the answers are the same."""
    triton = _serve("python", max_batch_size=8)
    distribution = triton._server_distribution
    triton._server_distribution = dataclasses.replace(distribution, native_backend=None)  # as if never built
    config = triton._config
    long_answer: dict = {}

    def long_request() -> None:
        connection = http.client.HTTPConnection("127.0.0.1", config.http_port, timeout=30)
        long_answer["answer"] = _post(connection, 3.0)
        connection.close()

    holder = threading.Thread(target=long_request)
    holder.start()
    time.sleep(0.5)
    stopper = threading.Thread(target=triton.stop)
    stopper.start()
    try:
        time.sleep(1.2)  # the refusing stub's load takes about 0.4 s (requests sent meanwhile are accepted)
        late = _grpc_infer(config.grpc_port, 0.0)
        assert stopper.is_alive(), "the stop should still wait for the long request"
        holder.join(10)
        stopper.join(30)
    finally:
        triton.stop()
    print(f"\nrefused by the proxy's refusing model in {late[1] * 1000:.0f} ms: {late[0]}")
    assert late[0].startswith("StatusCode.UNAVAILABLE") and "the server is stopping" in late[0], late
    assert late[1] < 1.0, f"refused after {late[1]:.2f} s (the busy instance had 1.3 s left)"
    status, body, _ = long_answer["answer"]
    assert status == 200 and body["outputs"][0]["data"] == [3.0]
