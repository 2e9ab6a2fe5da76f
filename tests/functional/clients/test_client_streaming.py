"""The streaming clients against the real tritonserver, over gRPC and HTTP, sync and asyncio.

The models are raw decoupled Python-backend models (``client_dev/streaming_models.py``) served
by the bundled tritonserver through ``client_dev/dev_server.py``, so these tests do not depend
on pytriton's server side. One module-scoped server; each behaviour runs on both protocols and,
where the two clients differ in how they do it, on both client flavours.
"""

from __future__ import annotations

import asyncio
import pathlib
import re
import sys
import time
import uuid

import numpy as np
import pytest
from support import free_ports
from tritonclient.grpc import InferResult

from pytriton.client import (
    AsyncioDecoupledModelClient,
    AsyncioModelClient,
    ClientModelConfig,
    DecoupledModelClient,
    FuturesModelClient,
    ModelClient,
    PyTritonClientDecoupledMismatchError,
    PyTritonClientError,
    PyTritonClientInferenceServerError,
    PyTritonClientTimeoutError,
    PyTritonClientValueError,
)
from pytriton.client.codec import from_infer_result, to_stream_request
from pytriton.client_grpc import GrpcChannel

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "client_dev"))

from dev_server import dev_server
from streaming_models import streaming_models

pytestmark = pytest.mark.functional

CANCEL_WAIT_S = 5.0  # how long the model may take to see a cancellation and write its marker


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    workspace = tmp_path_factory.mktemp("streaming")
    markers = workspace / "markers"
    markers.mkdir()
    ports = free_ports(3)
    with dev_server(
        root=None, workspace=workspace, ports=(ports[0], ports[1], ports[2]), models=streaming_models(str(markers))
    ) as running:
        yield running, markers


@pytest.fixture(params=["grpc", "http"])
def url(request, server):
    running, _ = server
    return running.grpc_url if request.param == "grpc" else running.http_url


@pytest.fixture()
def markers(server):
    return server[1]


@pytest.fixture(params=["sync", "asyncio"])
def flavour(request):
    return request.param


def countdown(count, delay):
    return {"COUNT": np.array([count], np.int32), "DELAY": np.array([delay], np.float32)}


def stream(flavour, url, model, inputs, *, batch=False, **client_kwargs):
    """Run one streamed request to the end: [(seconds since the call, outputs)], and the error raised."""
    received = []
    method = "infer_batch" if batch else "infer_sample"
    if flavour == "sync":
        with DecoupledModelClient(url, model, **client_kwargs) as client:
            start = time.monotonic()
            try:
                for outputs in getattr(client, method)(**inputs):
                    received.append((time.monotonic() - start, outputs))
            except PyTritonClientError as error:
                return received, error
        return received, None

    async def run():
        async with AsyncioDecoupledModelClient(url, model, **client_kwargs) as client:
            start = time.monotonic()
            try:
                async for outputs in getattr(client, method)(**inputs):
                    received.append((time.monotonic() - start, outputs))
            except PyTritonClientError as error:
                return received, error
        return received, None

    return asyncio.run(run())


def wait_for_marker(markers: pathlib.Path, tag: str) -> list:
    """The markers the Cancellable model wrote for ``tag`` (``tag``: cancelled; ``tag.done``: ran to the end)."""
    deadline = time.monotonic() + CANCEL_WAIT_S
    while time.monotonic() < deadline:
        found = sorted(path.name for path in markers.glob(f"{tag}*") if not path.name.endswith(".tmp"))
        if found:
            return [(name, int((markers / name).read_text())) for name in found]
        time.sleep(0.05)
    return []


def test_responses_arrive_one_by_one_and_the_stream_ends(url, flavour):
    received, error = stream(flavour, url, "Countdown", countdown(3, 0.5))
    assert error is None
    times = [seconds for seconds, _ in received]
    assert [outputs["INDEX"].tolist() for _, outputs in received] == [[0], [1], [2]]
    assert times[0] + 0.8 < times[-1], f"responses arrived at {times}: not one by one"
    first = received[0][1]
    assert first["WORD"].dtype == np.object_ and first["WORD"].tolist() == [b"word-0"]
    assert first["GRID"].dtype == np.float32
    np.testing.assert_array_equal(received[2][1]["GRID"], np.arange(6, dtype=np.float32).reshape(2, 3) + 2)


def test_batch_axis_added_and_removed_for_a_batching_model(url, flavour):
    samples, error = stream(flavour, url, "CountdownBatch", countdown(2, 0.0))
    assert error is None
    assert [outputs["GRID"].shape for _, outputs in samples] == [(2, 3), (2, 3)]
    assert [outputs["INDEX"].shape for _, outputs in samples] == [(1,), (1,)]
    inputs = {"COUNT": np.array([[2], [2]], np.int32), "DELAY": np.array([[0.0], [0.0]], np.float32)}
    batches, error = stream(flavour, url, "CountdownBatch", inputs, batch=True)
    assert error is None
    assert [outputs["GRID"].shape for _, outputs in batches] == [(2, 2, 3), (2, 2, 3)]
    assert batches[1][1]["WORD"].tolist() == [[b"word-1"], [b"word-1"]]


def test_error_mid_stream_comes_after_the_partial_results(url, flavour):
    received, error = stream(flavour, url, "Faulty", countdown(0, 0.0))
    assert [outputs["INDEX"].tolist() for _, outputs in received] == [[0], [1]]
    assert isinstance(error, PyTritonClientInferenceServerError)
    assert "the model broke after 2 responses" in str(error)


def test_timeout_bounds_the_wait_for_each_response(url, flavour):
    # Responses 0.4 s apart pass a 1 s limit although the stream takes longer than it ...
    received, error = stream(flavour, url, "Countdown", countdown(4, 0.4), inference_timeout_s=1.0)
    assert error is None and len(received) == 4 and received[-1][0] > 1.0
    # ... and a response 2 s after the first fails a 0.5 s limit, naming the model and the limit.
    received, error = stream(flavour, url, "Countdown", countdown(2, 2.0), inference_timeout_s=0.5)
    assert len(received) == 1
    assert isinstance(error, PyTritonClientTimeoutError)
    assert "'Countdown'" in str(error) and "within 0.5 s" in str(error)
    # The first response counts too (over HTTP, Triton sends the answer's head with it).
    late_start = dict(countdown(2, 0.0), LEAD=np.array([2.0], np.float32))
    received, error = stream(flavour, url, "Countdown", late_start, inference_timeout_s=0.5)
    assert received == []
    assert isinstance(error, PyTritonClientTimeoutError)
    assert "'Countdown'" in str(error) and "within 0.5 s" in str(error)


def test_sync_timeout_cancels_and_the_client_goes_on(url):
    with DecoupledModelClient(url, "Countdown", inference_timeout_s=0.5) as client:
        responses = client.infer_sample(**countdown(2, 2.0))
        next(responses)
        start = time.monotonic()
        with pytest.raises(PyTritonClientTimeoutError):
            next(responses)
        assert 0.4 < time.monotonic() - start < 1.5
        assert [outputs["INDEX"].tolist() for outputs in client.infer_sample(**countdown(2, 0.0))] == [[0], [1]]


def test_sync_break_cancels_the_request_and_the_client_goes_on(url, markers):
    tag = uuid.uuid4().hex
    with DecoupledModelClient(url, "Cancellable") as client:
        inputs = dict(countdown(20, 0.3), TAG=np.array([tag.encode()], dtype=object))
        for outputs in client.infer_sample(**inputs):
            if outputs["INDEX"][0] == 1:
                break
        assert wait_for_marker(markers, tag) == [(tag, 2)]
        # The same client streams again at once.
        again = client.infer_sample(**countdown(2, 0.0), TAG=np.array([b"again"], dtype=object))
        assert [outputs["INDEX"].tolist() for outputs in again] == [[0], [1]]


def test_sync_close_of_the_iterator_cancels_too(url, markers):
    tag = uuid.uuid4().hex
    with DecoupledModelClient(url, "Cancellable") as client:
        responses = client.infer_sample(**countdown(20, 0.3), TAG=np.array([tag], dtype=object))
        next(responses)
        responses.close()
        assert wait_for_marker(markers, tag) == [(tag, 1)]


def test_asyncio_break_cancels_the_request_and_the_client_goes_on(url, markers):
    tag = uuid.uuid4().hex

    async def run():
        async with AsyncioDecoupledModelClient(url, "Cancellable") as client:
            inputs = dict(countdown(20, 0.3), TAG=np.array([tag.encode()], dtype=object))
            async for outputs in client.infer_sample(**inputs):
                if outputs["INDEX"][0] == 1:
                    break  # the loop finalizes the dropped generator on its next turn: that cancels
            await asyncio.sleep(0)
            found = await asyncio.get_running_loop().run_in_executor(None, wait_for_marker, markers, tag)
            inputs = dict(countdown(2, 0.0), TAG=np.array([b"again"], dtype=object))
            again = [outputs["INDEX"].tolist() async for outputs in client.infer_sample(**inputs)]
            return found, again

    found, again = asyncio.run(run())
    assert found == [(tag, 2)]
    assert again == [[0], [1]]


def test_asyncio_streams_run_concurrently(url):
    async def run():
        async with AsyncioDecoupledModelClient(url, "Countdown") as client:

            async def indices(count):
                return [outputs["INDEX"][0] async for outputs in client.infer_sample(**countdown(count, 0.3))]

            start = time.monotonic()
            results = await asyncio.gather(indices(3), indices(4))
            return results, time.monotonic() - start

    (three, four), seconds = asyncio.run(run())
    assert (three, four) == ([0, 1, 2], [0, 1, 2, 3])
    assert seconds < 1.5  # one after the other would take 1.5 s


def _stream_request(model, inputs):
    return to_stream_request(model, "", inputs).SerializeToString()


async def _indices(stream):
    """The INDEX of each response of `stream`, read to its end."""
    found = []
    while (response := await stream.read()) is not None:
        assert not response.error_message, response.error_message
        found += [value.item() for value in from_infer_result(InferResult(response.infer_response)).get("INDEX", [])]
    return found


def test_the_grpc_speaker_keeps_a_call_for_the_next_request_and_never_one_whose_request_was_cancelled(server):
    """The speaker of the asyncio streaming client and the OpenAI front: a call goes back to the channel once its
    request's final response came and carries the next request; a cancelled one is cancelled with its request."""
    running, markers = server
    tag = uuid.uuid4().hex

    async def run():
        channel = GrpcChannel(f"localhost:{running.grpc_port}")
        seen = {}
        try:
            first = channel.stream(_stream_request("Countdown", countdown(2, 0.0)))
            seen["first"] = (await _indices(first), first.finished, channel.idle)
            second = channel.stream(_stream_request("Countdown", countdown(3, 0.0)))
            assert await second.read() is not None and channel.idle == 0  # it took the kept call
            seen["second"] = (await _indices(second), channel.idle)  # and gave it back: still one call
            inputs = dict(countdown(20, 0.3), TAG=np.array([tag.encode()], dtype=object))
            cancelled = channel.stream(_stream_request("Cancellable", inputs))
            assert await cancelled.read() is not None and channel.idle == 0
            cancelled.cancel()
            seen["marker"] = await asyncio.get_running_loop().run_in_executor(None, wait_for_marker, markers, tag)
            own = channel.stream(_stream_request("Countdown", countdown(1, 0.0)), metadata=(("x-request-tag", tag),))
            seen["own"] = (await _indices(own), own.finished, channel.idle)  # its own metadata: a call of its own
            after = channel.stream(_stream_request("Countdown", countdown(1, 0.0)))
            seen["after"] = (await _indices(after), channel.idle)
        finally:
            await channel.close()
        seen["closed"] = channel.idle
        return seen

    seen = asyncio.run(run())
    assert seen["first"] == ([0, 1], True, 1)
    assert seen["second"] == ([1, 2], 1)  # its first response was read in the test
    assert seen["marker"] == [(tag, 1)]  # the model saw the cancel after its first response
    assert seen["own"] == ([0], True, 0)  # the cancelled request's call was not kept
    assert seen["after"] == ([0], 1)
    assert seen["closed"] == 0


def test_one_stream_at_a_time_on_a_sync_client(url):
    with DecoupledModelClient(url, "Countdown") as client:
        first = client.infer_sample(**countdown(3, 0.0))
        with pytest.raises(PyTritonClientValueError, match="still streams the responses of a previous request"):
            client.infer_sample(**countdown(1, 0.0))
        first.close()
        assert len(list(client.infer_sample(**countdown(1, 0.0)))) == 1


def _is_mismatch(error: BaseException) -> bool:
    # Caught as the published library's PyTritonClientInferenceServerError; still ours underneath.
    return isinstance(error, PyTritonClientDecoupledMismatchError) and isinstance(error, PyTritonClientValueError)


def test_streaming_clients_refuse_a_model_that_is_not_decoupled(url):
    # `except PyTritonClientInferenceServerError`, as code written for published PyTriton has it.
    expected = "'Plain' is not decoupled.*use ModelClient"
    with DecoupledModelClient(url, "Plain") as client:
        with pytest.raises(PyTritonClientInferenceServerError, match=expected) as sync:
            client.infer_sample(INPUT_1=np.ones(2, np.float32))
    assert _is_mismatch(sync.value)

    async def run():
        async with AsyncioDecoupledModelClient(url, "Plain") as client:
            try:
                async for _ in client.infer_sample(INPUT_1=np.ones(2, np.float32)):
                    pass
            except PyTritonClientInferenceServerError as error:
                return error
        return None

    error = asyncio.run(run())
    assert _is_mismatch(error) and re.search(expected, str(error)), error


def test_one_response_clients_refuse_a_decoupled_model(url):
    inputs = countdown(1, 0.0)
    expected = "'Countdown' is decoupled.*use DecoupledModelClient or AsyncioDecoupledModelClient"
    with ModelClient(url, "Countdown") as client:
        with pytest.raises(PyTritonClientInferenceServerError, match=expected) as sync:
            client.infer_sample(**inputs)
    assert _is_mismatch(sync.value)
    with FuturesModelClient(url, "Countdown") as futures:
        with pytest.raises(PyTritonClientInferenceServerError, match=expected) as from_future:
            futures.infer_sample(**inputs).result(timeout=30)
    assert _is_mismatch(from_future.value)

    async def run():
        async with AsyncioModelClient(url, "Countdown") as client:
            try:
                await client.infer_sample(**inputs)
            except PyTritonClientInferenceServerError as error:
                return error
        return None

    error = asyncio.run(run())
    assert _is_mismatch(error) and re.search(expected, str(error)), error
    # A configuration given by the user lets the request through: the server's refusal is translated.
    given = ClientModelConfig("Countdown", max_batch_size=0)
    with ModelClient(url, "Countdown", model_config=given) as client:
        with pytest.raises(PyTritonClientInferenceServerError, match="decoupled transaction policy") as refused:
            client.infer_sample(**inputs)
    assert _is_mismatch(refused.value)


def test_fp16_streams_over_grpc_and_is_refused_over_http(server, flavour):
    running, _ = server
    values = {"INPUT_1": np.array([0.5, 1.5, -2.0], np.float16)}
    received, error = stream(flavour, running.grpc_url, "Half", values)
    assert error is None
    assert [outputs["OUTPUT_1"].dtype for _, outputs in received] == [np.float16, np.float16]
    np.testing.assert_array_equal(received[0][1]["OUTPUT_1"], values["INPUT_1"])
    received, error = stream(flavour, running.http_url, "Half", values)
    assert received == []
    assert isinstance(error, PyTritonClientValueError) and "grpc://" in str(error)


TOKEN = "s3cret"


@pytest.fixture(scope="module")
def guarded(tmp_path_factory):
    """A second server that restricts inference (streams included) to requests with the token."""
    workspace = tmp_path_factory.mktemp("streaming-guarded")
    models = {"Countdown": streaming_models(str(workspace))["Countdown"]}
    restriction = f"inference:triton-access-token={TOKEN}"
    restricted = ("--http-restricted-api", restriction, "--grpc-restricted-protocol", restriction)
    ports = free_ports(3)
    with dev_server(
        root=None, workspace=workspace, ports=(ports[0], ports[1], ports[2]), models=models, extra_args=restricted
    ) as running:
        yield running


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_access_token_goes_with_the_stream(guarded, protocol, flavour):
    url = guarded.grpc_url if protocol == "grpc" else guarded.http_url
    received, error = stream(flavour, url, "Countdown", countdown(2, 0.0), access_token=TOKEN)
    assert error is None and len(received) == 2
    received, error = stream(flavour, url, "Countdown", countdown(2, 0.0))
    assert received == []
    assert isinstance(error, PyTritonClientInferenceServerError) and "access token" in str(error)
