"""A drain ends when the work ends: idle HTTP keep-alive connections do not hold `stop()` until the
exit timeout (Triton waits for every connection to close), and a request in flight on such a
connection still gets its answer. Against the real server; the drain under steady load is in
test_drain_under_load.py."""

from __future__ import annotations

import http.client
import json
import threading
import time

import numpy as np
import pytest
from support import server_config

from pytriton.decorators import batch
from pytriton.model_config import ModelConfig, Tensor
from pytriton.triton import Triton

pytestmark = pytest.mark.functional

EXIT_TIMEOUT_S = 10


@batch
def sleepy(x):
    time.sleep(float(x[0, 0]))
    return {"y": x}


def _served():
    triton = Triton(config=server_config(exit_timeout_secs=EXIT_TIMEOUT_S))
    triton.bind("Sleepy", sleepy, [Tensor(name="x", dtype=np.float32, shape=(1,))],
                [Tensor(name="y", dtype=np.float32, shape=(1,))], config=ModelConfig(max_batch_size=4))
    triton.run()
    return triton


def _keep_alive(port: int, seconds: float = 0.0) -> http.client.HTTPConnection:
    """A connection that has made one request and stays open, as a pooled client's does."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    _infer(connection, seconds)
    return connection


def _infer(connection: http.client.HTTPConnection, seconds: float) -> dict:
    body = json.dumps({"inputs": [{"name": "x", "shape": [1, 1], "datatype": "FP32", "data": [seconds]}]})
    connection.request("POST", "/v2/models/Sleepy/infer", body=body)
    response = connection.getresponse()
    return {"status": response.status, "body": json.loads(response.read())}


def test_idle_keep_alive_connections_do_not_hold_the_drain():
    triton = _served()
    port = triton._config.http_port
    connections = [_keep_alive(port) for _ in range(4)]
    started = time.monotonic()
    triton.stop()
    took = time.monotonic() - started
    for connection in connections:
        connection.close()
    # Before: the full exit timeout (10 s here, 11-13 s measured), as Triton waits for the four
    # idle connections to close; now the drain ends once the worker was idle for 0.5 s.
    assert took < 3.0, f"stop took {took:.1f} s with idle keep-alive connections open"


def test_a_request_in_flight_on_a_keep_alive_connection_is_answered_before_the_stop():
    triton = _served()
    port = triton._config.http_port
    idle = [_keep_alive(port) for _ in range(2)]
    busy = _keep_alive(port)
    outcome = {}

    def ask() -> None:
        try:
            outcome["answer"] = _infer(busy, 2.0)
        except Exception as exc:  # noqa: BLE001 - the test inspects it
            outcome["error"] = exc

    thread = threading.Thread(target=ask)
    thread.start()
    time.sleep(0.5)  # inside the callable now
    started = time.monotonic()
    triton.stop()
    took = time.monotonic() - started
    thread.join(10)
    for connection in (*idle, busy):
        connection.close()
    assert "error" not in outcome, outcome
    assert outcome["answer"]["status"] == 200
    assert outcome["answer"]["body"]["outputs"][0]["data"] == [2.0]
    assert 1.0 < took < 4.0, f"stop took {took:.1f} s: the 1.5 s left of the call, then a short settle"
