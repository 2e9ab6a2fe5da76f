"""Requests in flight on a stub that dies, for relayed models (async callables, decoupled models).

Triton 2.51 never answers them: without pytriton's notice (`pytriton.ipc.lost`) every client
below would wait its whole inference timeout (60 s here). Each client class, over HTTP and gRPC,
has a request in flight when the model's stub is killed; each must end within 5 s of the kill
with `PyTritonClientRequestLostError` naming the death, and a retry on the same client must be
served by the restarted instance. On the proxy path (``model_backend="python"``): pytriton's own
backend runs no stub, and answers every request of a dead worker itself (test_native_backend.py).
"""

from __future__ import annotations

import asyncio
import json
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Dict, Iterator, List

import numpy as np
import pytest
import tritonclient.http
from support import running_triton, stub_processes

from pytriton.client import (
    AsyncioDecoupledModelClient,
    AsyncioModelClient,
    DecoupledModelClient,
    FuturesModelClient,
    ModelClient,
    PyTritonClientRequestLostError,
)
from pytriton.model_config import ModelConfig, Tensor

pytestmark = pytest.mark.functional

X = [Tensor(name="x", dtype=np.float32, shape=(-1,))]
Y = [Tensor(name="y", dtype=np.float32, shape=(-1,))]
TIMEOUT_S = 60.0
NOTICE_WITHIN_S = 5.0

HOLD = threading.Event()
"""While set, a request whose input is negative is held (never answered by the callable)."""


async def held_async(requests):
    if any((request["x"] < 0).any() for request in requests):
        while HOLD.is_set():
            await asyncio.sleep(0.05)
    return [{"y": request["x"] * 2} for request in requests]


async def held_stream(requests):
    yield [{"y": request["x"]} for request in requests]
    if any((request["x"] < 0).any() for request in requests):
        while HOLD.is_set():
            await asyncio.sleep(0.05)
    yield [{"y": request["x"] * 2} for request in requests]


@pytest.fixture(scope="module")
def served() -> Iterator[Dict[str, Any]]:
    with running_triton(model_backend="python") as triton:
        triton.bind("Unary", held_async, X, Y, config=ModelConfig(max_batch_size=8))
        triton.bind("Streamed", held_stream, X, Y, config=ModelConfig(max_batch_size=8, decoupled=True))
        triton.run()
        config = triton._config
        yield {"http": f"http://127.0.0.1:{config.http_port}", "grpc": f"grpc://127.0.0.1:{config.grpc_port}",
               "triton": triton}


HELD = np.full(2, -1.0, np.float32)
FREE = np.ones(2, np.float32)


def _unary_sync(url: str) -> Callable[[], Any]:
    def run() -> Any:
        with ModelClient(url, "Unary", inference_timeout_s=TIMEOUT_S) as client:
            try:
                client.infer_sample(x=HELD)
                return "answered"
            except PyTritonClientRequestLostError as exc:
                return exc, client.infer_sample(x=FREE)["y"].tolist()
    return run


def _unary_futures(url: str) -> Callable[[], Any]:
    def run() -> Any:
        with FuturesModelClient(url, "Unary", inference_timeout_s=TIMEOUT_S) as client:
            try:
                client.infer_sample(x=HELD).result()
                return "answered"
            except PyTritonClientRequestLostError as exc:
                return exc, client.infer_sample(x=FREE).result()["y"].tolist()
    return run


def _unary_asyncio(url: str) -> Callable[[], Any]:
    async def main() -> Any:
        async with AsyncioModelClient(url, "Unary", inference_timeout_s=TIMEOUT_S) as client:
            try:
                await client.infer_sample(x=HELD)
                return "answered"
            except PyTritonClientRequestLostError as exc:
                return exc, (await client.infer_sample(x=FREE))["y"].tolist()
    return lambda: asyncio.run(main())


def _stream_sync(url: str) -> Callable[[], Any]:
    def run() -> Any:
        with DecoupledModelClient(url, "Streamed", inference_timeout_s=TIMEOUT_S) as client:
            try:
                for _ in client.infer_sample(x=HELD):
                    pass
                return "answered"
            except PyTritonClientRequestLostError as exc:
                return exc, [part["y"].tolist() for part in client.infer_sample(x=FREE)]
    return run


def _stream_asyncio(url: str) -> Callable[[], Any]:
    async def main() -> Any:
        async with AsyncioDecoupledModelClient(url, "Streamed", inference_timeout_s=TIMEOUT_S) as client:
            try:
                async for _ in client.infer_sample(x=HELD):
                    pass
                return "answered"
            except PyTritonClientRequestLostError as exc:
                return exc, [part["y"].tolist() async for part in client.infer_sample(x=FREE)]
    return lambda: asyncio.run(main())


def _kill_while_held(served: Dict[str, Any], model: str, runs: Dict[str, Callable[[], Any]]) -> Dict[str, Any]:
    """Start every run with a held request, kill the model's stub, and give back what each run
    returned with the seconds from the kill to its error."""
    HOLD.set()
    ended: Dict[str, float] = {}
    try:
        with ThreadPoolExecutor(len(runs)) as pool:
            def timed(name: str, run: Callable[[], Any]) -> Any:
                outcome = run()
                ended.setdefault(name, time.monotonic())
                return outcome

            futures = {name: pool.submit(timed, name, run) for name, run in runs.items()}
            time.sleep(1.5)  # every request reached the callable (and the clients read the configuration)
            assert not any(future.done() for future in futures.values()), {n: f.result() for n, f in futures.items()
                                                                            if f.done()}
            stubs = stub_processes(model)
            assert len(stubs) == 1
            killed = time.monotonic()
            stubs[0].send_signal(signal.SIGKILL)
            # The retries must be served although the held calls still run in the worker: let them go
            # only once every client has its error.
            results = {}
            for name, future in futures.items():
                results[name] = future.result(timeout=TIMEOUT_S)
    finally:
        HOLD.clear()
    return {name: (outcome, ended[name] - killed) for name, outcome in results.items()}


def _check(outcomes: Dict[str, Any], model: str, expected: List[Any]) -> None:
    for name, (outcome, seconds) in outcomes.items():
        assert outcome != "answered", f"{name}: the held request was answered"
        error, retried = outcome
        assert seconds < NOTICE_WITHIN_S, f"{name}: the error came {seconds:.1f} s after the kill"
        text = str(error)
        assert f"Model '{model}'" in text and "killed by signal 9" in text and "retry" in text, text
        assert retried == expected, f"{name}: the retry gave {retried}"


def test_unary_requests_on_a_killed_stub_end_with_an_error_and_a_retry_is_served(served):
    runs = {}
    for protocol in ("http", "grpc"):
        url = served[protocol]
        runs[f"ModelClient {protocol}"] = _unary_sync(url)
        runs[f"FuturesModelClient {protocol}"] = _unary_futures(url)
        runs[f"AsyncioModelClient {protocol}"] = _unary_asyncio(url)
    _check(_kill_while_held(served, "Unary", runs), "Unary", [2.0, 2.0])

    # What a raw tritonclient user (who keeps waiting) can read: the notice in the configuration.
    raw = tritonclient.http.InferenceServerClient(served["http"][len("http://"):])
    try:
        parameters = raw.get_model_config("Unary").get("parameters", {})
    finally:
        raw.close()
    notices = json.loads(parameters["pytriton.lost_requests"]["string_value"])
    assert len(notices) == 1 and len(notices[0]["ids"]) == len(runs), notices
    assert notices[0]["instance"] == "Unary_0_0" and "signal 9" in notices[0]["cause"], notices
    # The dead stub's ledger was read and removed; the live stubs keep theirs.
    live = {stub.pid for stub in stub_processes("Unary") + stub_processes("Streamed")}
    ledgers = {path.name for path in served["triton"]._workspace.sockets.glob("*.inflight")}
    assert ledgers == {f"stub-{pid}.inflight" for pid in live}


def test_streams_on_a_killed_stub_end_with_an_error_and_a_retry_is_served(served):
    runs = {}
    for protocol in ("http", "grpc"):
        url = served[protocol]
        runs[f"DecoupledModelClient {protocol}"] = _stream_sync(url)
        runs[f"AsyncioDecoupledModelClient {protocol}"] = _stream_asyncio(url)
    _check(_kill_while_held(served, "Streamed", runs), "Streamed", [[1.0, 1.0], [2.0, 2.0]])
