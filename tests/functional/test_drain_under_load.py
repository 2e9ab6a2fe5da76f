"""A stop under steady load, as Kubernetes and load balancers expect it (docs/reliability.md,
"Stopping under load"): readiness false over HTTP and gRPC at once, the requests already accepted
answered, every later one refused at once with a retryable status (HTTP 503, gRPC UNAVAILABLE),
and the stop over as soon as the last accepted request is answered. Against the real server,
with HTTP keep-alive and gRPC clients sending back to back."""

from __future__ import annotations

import collections
import http.client
import json
import threading
import time

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from support import http_status, server_config

from pytriton.decorators import batch
from pytriton.model_config import ModelConfig, Tensor
from pytriton.triton import Triton

pytestmark = pytest.mark.functional

EXIT_TIMEOUT_S = 10
LONG_S = 1.5  # a request one of the two instances holds when the stop begins; the other serves the load


@batch
def sleepy(x):
    time.sleep(float(x.max()))
    return {"y": x}


def _body(seconds: float) -> str:
    return json.dumps({"inputs": [{"name": "x", "shape": [1, 1], "datatype": "FP32", "data": [seconds]}]})


class Load:
    """Clients sending back to back until told to stop; each outcome with its send time."""

    def __init__(self, http_port: int, grpc_port: int, clients: int = 3) -> None:
        self.outcomes = []  # (sent, protocol, outcome)
        self.done = threading.Event()
        self._threads = [threading.Thread(target=self._http, args=(http_port,), daemon=True) for _ in range(clients)]
        self._threads += [threading.Thread(target=self._grpc, args=(grpc_port,), daemon=True) for _ in range(clients)]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        self.done.set()
        for thread in self._threads:
            thread.join(10)

    def _http(self, port: int) -> None:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        while not self.done.is_set():
            sent = time.monotonic()
            try:
                connection.request("POST", "/v2/models/Sleepy/infer", body=_body(0.005))
                response = connection.getresponse()
                body = response.read()
                outcome = str(response.status)
                if response.status == 503:
                    assert b"the server is stopping" in body, body
            except (OSError, http.client.HTTPException) as exc:  # the server has ended
                outcome = f"connection: {type(exc).__name__}"
                self.outcomes.append((sent, "http", outcome))
                return
            self.outcomes.append((sent, "http", outcome))
        connection.close()

    def _grpc(self, port: int) -> None:
        client = grpcclient.InferenceServerClient(f"127.0.0.1:{port}")
        data = grpcclient.InferInput("x", [1, 1], "FP32")
        data.set_data_from_numpy(np.full((1, 1), 0.005, np.float32))
        try:
            while not self.done.is_set():
                sent = time.monotonic()
                try:
                    client.infer("Sleepy", [data], client_timeout=30)
                    outcome = "OK"
                except Exception as exc:  # noqa: BLE001 - the test sorts them
                    status = exc.status() if hasattr(exc, "status") else type(exc).__name__
                    outcome = str(status)
                    if "the server is stopping" not in str(exc):
                        outcome = f"connection: {status}"
                        self.outcomes.append((sent, "grpc", outcome))
                        return
                self.outcomes.append((sent, "grpc", outcome))
        finally:
            client.close()


def _stop_under_load(drain_serving_s=None):
    """Serve Sleepy, load it for 1 s, hold one long request, stop; what everyone saw."""
    extra = {} if drain_serving_s is None else {"drain_serving_s": drain_serving_s}
    config = server_config(exit_timeout_secs=EXIT_TIMEOUT_S, **extra)
    triton = Triton(config=config)
    triton.bind("Sleepy", [sleepy, sleepy], [Tensor(name="x", dtype=np.float32, shape=(1,))],
                [Tensor(name="y", dtype=np.float32, shape=(1,))],
                config=ModelConfig(max_batch_size=8), strict=False)
    triton.run()
    http_port, grpc_port = config.http_port, config.grpc_port
    load = Load(http_port, grpc_port)
    long_answer = {}

    def long_request() -> None:
        connection = http.client.HTTPConnection("127.0.0.1", http_port, timeout=30)
        connection.request("POST", "/v2/models/Sleepy/infer", body=_body(LONG_S))
        response = connection.getresponse()
        long_answer.update(status=response.status, body=json.loads(response.read()))
        connection.close()

    load.start()
    time.sleep(1.0)
    holder = threading.Thread(target=long_request)
    holder.start()
    time.sleep(0.3)  # the long request is with the worker now
    probe = grpcclient.InferenceServerClient(f"127.0.0.1:{grpc_port}")
    started = time.monotonic()
    stopper = threading.Thread(target=triton.stop)
    stopper.start()
    readiness = []  # (seconds since the stop began, HTTP ready, gRPC ready)
    while stopper.is_alive():
        try:
            over_grpc = bool(probe.is_server_ready(client_timeout=1))
        except Exception:  # noqa: BLE001 - the server has ended
            over_grpc = False
        over_http = http_status(f"http://127.0.0.1:{http_port}/v2/health/ready", timeout_s=1.0) == 200
        readiness.append((time.monotonic() - started, over_http, over_grpc))
        time.sleep(0.01)
    took = time.monotonic() - started
    stopper.join()
    holder.join(10)
    load.stop()
    probe.close()
    return started, took, readiness, long_answer, load.outcomes


def _counts(outcomes, since):
    return collections.Counter((protocol, outcome) for sent, protocol, outcome in outcomes if sent >= since)


def test_a_stop_under_steady_load_refuses_new_requests_and_ends_with_the_accepted_ones():
    started, took, readiness, long_answer, outcomes = _stop_under_load()
    after = _counts(outcomes, started)
    print(f"\nstop under load: {took:.2f} s; before the stop {_counts(outcomes, 0) - after}; after it {after}")
    assert long_answer["status"] == 200 and long_answer["body"]["outputs"][0]["data"] == [LONG_S]
    # The stop lasts what the long request had left (1.2 s), plus a short settle.
    assert LONG_S - 0.3 - 0.1 < took < LONG_S + 1.5, f"stop took {took:.2f} s"
    ready_late = [sample for sample in readiness if sample[0] > 0.05 and (sample[1] or sample[2])]
    assert not ready_late, f"still ready after the stop began: {ready_late[:3]}"
    kinds = {outcome for _, outcome in after}
    assert kinds <= {"200", "OK", "503", "StatusCode.UNAVAILABLE"} | {k for k in kinds if k.startswith("connection")}
    assert after[("http", "503")] >= 3 and after[("grpc", "StatusCode.UNAVAILABLE")] >= 3, after
    # Refused at once: the clients went on sending through the whole drain.
    refused_at = sorted(sent for sent, _, outcome in outcomes if outcome in ("503", "StatusCode.UNAVAILABLE"))
    assert refused_at[-1] - started > LONG_S - 0.5, "the refusals stopped before the drain ended"
    # Nothing errs but the retryable refusal and the end of the server itself, one per client.
    ended = [item for item in after.items() if item[0][1].startswith("connection")]
    assert sum(count for _, count in ended) <= 6, ended


def test_drain_serving_s_keeps_answering_new_requests_first():
    started, took, readiness, long_answer, outcomes = _stop_under_load(drain_serving_s=1.0)
    served_late = [sent for sent, _, outcome in outcomes if outcome in ("200", "OK") and sent - started > 0.5]
    refused = [sent for sent, _, outcome in outcomes if outcome in ("503", "StatusCode.UNAVAILABLE")]
    print(f"\nstop with drain_serving_s=1: {took:.2f} s; {len(served_late)} served 0.5 s or more into it, "
          f"{len(refused)} refused")
    assert served_late, "no request served during drain_serving_s"
    assert refused and min(refused) - started > 0.9, "refused before drain_serving_s ended"
    assert not [sample for sample in readiness if sample[0] > 0.05 and (sample[1] or sample[2])]
    assert long_answer["status"] == 200
    assert 0.9 < took < 1.0 + 1.5, f"stop took {took:.2f} s"
