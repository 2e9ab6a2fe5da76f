"""Streaming (decoupled) and async models served by pytriton, end to end.

First with tritonclient's own gRPC stream and raw HTTP requests to Triton's generate-stream
endpoint, which show what the server side sends whatever our clients do; then with pytriton's
`DecoupledModelClient` and `AsyncioDecoupledModelClient` over both protocols (their own
details are covered in tests/functional/clients/test_client_streaming.py). One server serves
the module.
"""

from __future__ import annotations

import asyncio
import json
import queue
import threading
import time
import urllib.error
import urllib.request

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from support import free_ports, server_config

from pytriton.decorators import batch
from pytriton.exceptions import PyTritonModelConfigError
from pytriton.model_config import ModelConfig, Tensor
from pytriton.triton import Triton

pytestmark = pytest.mark.functional

STEP_S = 0.3
N_IN = [Tensor(name="n", dtype=np.int32, shape=(1,))]
TOKEN_OUT = [Tensor(name="token", dtype=np.int32, shape=(1,))]


class Tokens:
    """Yields tokens 0..n-1 for each request, STEP_S apart; a request whose n is done gets None.

    n == -1 fails after two tokens. Records, per call, how many steps it produced and whether it
    was closed early (a cancelled stream).
    """

    def __init__(self) -> None:
        self.closed_early = threading.Event()
        self.steps: list = []

    def __call__(self, requests):
        lengths = [int(r["n"][0]) for r in requests]
        produced = 0
        finished = False
        try:
            for step in range(max(max(lengths), 3)):
                if step:
                    time.sleep(STEP_S)
                if step == 2 and -1 in lengths:
                    raise ValueError("the tokenizer broke")
                produced += 1
                yield [{"token": np.array([step], np.int32)} if step < n or n == -1 else None for n in lengths]
            finished = True
        finally:
            self.steps.append(produced)
            if not finished:
                self.closed_early.set()


@batch
async def async_countdown(n):
    for step in range(int(n.max()), 0, -1):
        await asyncio.sleep(STEP_S / 3)
        yield {"token": np.full_like(n, step)}


class Overlap:
    """An async callable that records how many of its calls are awaiting at once."""

    def __init__(self) -> None:
        self.active = 0
        self.max_active = 0

    async def __call__(self, requests):
        self.active += 1
        self.max_active = max(self.max_active, self.active)
        await asyncio.sleep(0.5)
        self.active -= 1
        return [{"token": r["n"] * 10} for r in requests]


@pytest.fixture(scope="module")
def served():
    config = server_config()
    tokens = Tokens()
    overlap = Overlap()
    triton = Triton(config=config)
    try:
        triton.bind("Tokens", tokens, N_IN, TOKEN_OUT, config=ModelConfig(batching=False, decoupled=True))
        triton.bind("Countdown", async_countdown, N_IN, TOKEN_OUT,
                    config=ModelConfig(max_batch_size=8, decoupled=True))
        triton.bind("Overlap", overlap, N_IN, TOKEN_OUT, config=ModelConfig(batching=False))
        triton.run()
        yield {"config": config, "tokens": tokens, "overlap": overlap}
    finally:
        triton.stop()


def grpc_stream(config, model, values, *, batched=False, cancel_after=None, timeout_s=10.0):
    """Send one request per value on one gRPC stream; returns per request id [(t, token | error)]."""
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{config.grpc_port}")
    arrivals: queue.Queue = queue.Queue()
    client.start_stream(lambda result, error: arrivals.put((time.monotonic(), result, error)))
    start = time.monotonic()
    for index, value in enumerate(values):
        data = np.array([[value]] if batched else [value], dtype=np.int32)
        tensor = grpcclient.InferInput("n", list(data.shape), "INT32")
        tensor.set_data_from_numpy(data)
        client.async_stream_infer(model, [tensor], request_id=str(index), enable_empty_final_response=True)
    results: dict = {str(i): [] for i in range(len(values))}
    remaining = len(values)  # streams not ended yet (an error carries no request id: count, don't name)
    received = 0
    try:
        while remaining:
            at, result, error = arrivals.get(timeout=timeout_s)
            if error is not None:
                results.setdefault("error", []).append((at - start, str(error)))
                remaining -= 1
                continue
            response = result.get_response()
            if result.as_numpy("token") is not None:
                results[response.id].append((at - start, int(result.as_numpy("token").reshape(-1)[0])))
                received += 1
            if response.parameters["triton_final_response"].bool_param:
                remaining -= 1
            if cancel_after is not None and received >= cancel_after:
                break
    finally:
        client.stop_stream(cancel_requests=cancel_after is not None)
        client.close()
    return results


def test_a_generator_streams_each_response_as_it_is_yielded_over_grpc(served):
    results = grpc_stream(served["config"], "Tokens", [4])
    times = [t for t, _ in results["0"]]
    assert [token for _, token in results["0"]] == [0, 1, 2, 3]
    # one response per yield, STEP_S apart: the first arrives long before the last
    assert times[-1] - times[0] >= 2.5 * STEP_S
    assert all(b - a >= 0.5 * STEP_S for a, b in zip(times, times[1:]))


def test_each_request_of_a_streamed_batch_gets_its_own_stream_and_end(served):
    results = grpc_stream(served["config"], "Countdown", [3, 2], batched=True)
    # with @batch every yield answers every request of the batch (batched or not by Triton)
    assert [token for _, token in results["0"]][:1] == [3]
    assert all(len(tokens) >= 2 for key, tokens in results.items() if key != "error")
    assert "error" not in results


def test_an_error_mid_stream_reaches_its_requester_after_the_responses_sent_and_spares_other_streams(served):
    results = grpc_stream(served["config"], "Tokens", [-1, 4])
    assert [token for _, token in results["0"]] == [0, 1]
    (error,) = results["error"]
    assert "Model 'Tokens' failed: ValueError: the tokenizer broke" in error[1]
    assert error[0] > results["0"][-1][0]
    assert [token for _, token in results["1"]] == [0, 1, 2, 3]


def test_a_cancelled_stream_stops_the_generator(served):
    tokens = served["tokens"]
    tokens.closed_early.clear()
    before = len(tokens.steps)
    grpc_stream(served["config"], "Tokens", [20], cancel_after=2)
    assert tokens.closed_early.wait(5.0), "the generator was not closed after its requester cancelled"
    deadline = time.monotonic() + 5
    while len(tokens.steps) == before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert 2 <= tokens.steps[-1] < 20


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_coroutine_calls_of_one_instance_overlap_while_they_await(served, protocol):
    import tritonclient.http as httpclient

    overlap = served["overlap"]
    overlap.max_active = 0
    client_results = []
    module = grpcclient if protocol == "grpc" else httpclient
    port = served["config"].grpc_port if protocol == "grpc" else served["config"].http_port

    def one(value):
        client = module.InferenceServerClient(f"127.0.0.1:{port}")
        tensor = module.InferInput("n", [1], "INT32")
        tensor.set_data_from_numpy(np.array([value], np.int32))
        client_results.append(int(client.infer("Overlap", [tensor]).as_numpy("token")[0]))
        client.close()

    threads = [threading.Thread(target=one, args=(v,)) for v in (1, 2, 3, 4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(client_results) == [10, 20, 30, 40]
    assert overlap.max_active >= 2  # one instance, so only overlapping coroutines explain this


@pytest.mark.parametrize(("model", "expected"), [("Tokens", [0, 1, 2]), ("Countdown", [3, 2, 1])])
def test_generators_and_async_generators_stream_over_http_server_sent_events(served, model, expected):
    events = http_stream(served["config"], model, {"n": 3})
    assert [event["token"] for _, event in events] == expected
    assert events[-1][0] - events[0][0] >= 0.5 * STEP_S


def http_stream(config, model, body, *, stop_after=None):
    """POST to the generate-stream endpoint; returns [(t, event)] (stops reading after `stop_after`)."""
    request = urllib.request.Request(
        f"http://127.0.0.1:{config.http_port}/v2/models/{model}/generate_stream",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    events = []
    start = time.monotonic()
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            for line in response:
                if line.startswith(b"data:"):
                    events.append((time.monotonic() - start, json.loads(line[5:])))
                    if stop_after is not None and len(events) >= stop_after:
                        break
    except urllib.error.HTTPError as error:
        events.append((time.monotonic() - start, json.loads(error.read())))
    return events


def test_an_error_mid_stream_reaches_an_http_requester_after_the_responses_sent(served):
    events = http_stream(served["config"], "Tokens", {"n": -1})
    assert [event.get("token") for _, event in events[:2]] == [0, 1]
    assert "Model 'Tokens' failed: ValueError: the tokenizer broke" in events[2][1]["error"]
    assert len(events) == 3


def test_an_http_client_that_disconnects_mid_stream_stops_the_generator(served):
    tokens = served["tokens"]
    tokens.closed_early.clear()
    events = http_stream(served["config"], "Tokens", {"n": 20}, stop_after=2)
    assert len(events) == 2
    assert tokens.closed_early.wait(5.0), "the generator was not closed after the HTTP client went away"


def test_a_non_streaming_grpc_call_to_a_decoupled_model_is_refused_by_triton(served):
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{served['config'].grpc_port}")
    tensor = grpcclient.InferInput("n", [1], "INT32")
    tensor.set_data_from_numpy(np.array([2], np.int32))
    with pytest.raises(Exception, match="decoupled"):
        client.infer("Tokens", [tensor])
    client.close()


def test_a_generator_bound_without_decoupled_is_refused_at_bind():
    def stream(requests):
        yield [{"token": np.array([1], np.int32)} for _ in requests]

    http, grpc, metrics = free_ports(3)
    triton = Triton(config=server_config(http_port=http, grpc_port=grpc, metrics_port=metrics))
    try:
        with pytest.raises(PyTritonModelConfigError, match="is a generator.*ModelConfig\\(decoupled=True\\)"):
            triton.bind("NotDecoupled", stream, N_IN, TOKEN_OUT)
    finally:
        triton.stop()


# --- pytriton's own streaming clients against pytriton's streaming models ------------------------


@pytest.fixture(params=["grpc", "http"])
def url(request, served):
    config = served["config"]
    return f"grpc://127.0.0.1:{config.grpc_port}" if request.param == "grpc" else f"http://127.0.0.1:{config.http_port}"


def test_decoupled_model_client_reads_a_generator_model_token_by_token(url):
    from pytriton.client import DecoupledModelClient

    arrivals = []
    with DecoupledModelClient(url, "Tokens") as client:
        start = time.monotonic()
        for partial in client.infer_sample(n=np.array([3], np.int32)):
            arrivals.append((time.monotonic() - start, int(partial["token"][0])))
    assert [token for _, token in arrivals] == [0, 1, 2]
    assert arrivals[-1][0] - arrivals[0][0] >= 1.5 * STEP_S


def test_asyncio_decoupled_client_streams_a_batched_async_generator(url):
    from pytriton.client import AsyncioDecoupledModelClient

    async def read():
        async with AsyncioDecoupledModelClient(url, "Countdown") as client:
            return [int(partial["token"][0]) async for partial in client.infer_sample(n=np.array([3], np.int32))]

    assert asyncio.run(read()) == [3, 2, 1]


def test_the_client_gets_a_mid_stream_error_after_the_partial_results(url):
    from pytriton.client import DecoupledModelClient
    from pytriton.client.exceptions import PyTritonClientInferenceServerError

    received = []
    with DecoupledModelClient(url, "Tokens") as client:
        with pytest.raises(PyTritonClientInferenceServerError, match="ValueError: the tokenizer broke"):
            for partial in client.infer_sample(n=np.array([-1], np.int32)):
                received.append(int(partial["token"][0]))
        assert received == [0, 1]
        # the client and the model serve the next stream as usual
        assert [int(p["token"][0]) for p in client.infer_sample(n=np.array([2], np.int32))] == [0, 1]


def test_breaking_out_of_the_loop_stops_the_model_s_generator(url, served):
    from pytriton.client import DecoupledModelClient

    tokens = served["tokens"]
    tokens.closed_early.clear()
    with DecoupledModelClient(url, "Tokens") as client:
        for partial in client.infer_sample(n=np.array([30], np.int32)):
            if int(partial["token"][0]) == 1:
                break
        assert tokens.closed_early.wait(5.0), "the generator ran on after the client left"
        assert tokens.steps[-1] < 30


def test_each_client_kind_refuses_the_other_kind_of_model_naming_the_right_client(url):
    from pytriton.client import DecoupledModelClient, ModelClient
    from pytriton.client.exceptions import PyTritonClientDecoupledMismatchError

    with ModelClient(url, "Tokens") as client:
        with pytest.raises(PyTritonClientDecoupledMismatchError, match="DecoupledModelClient"):
            client.infer_sample(n=np.array([2], np.int32))
    with DecoupledModelClient(url, "Overlap") as client:
        with pytest.raises(PyTritonClientDecoupledMismatchError, match="ModelClient"):
            list(client.infer_sample(n=np.array([2], np.int32)))
