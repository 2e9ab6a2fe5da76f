"""Every client flavour (sync, futures, asyncio) over both protocols against the real server.

Results, bytes round trips, chunking past ``max_batch_size``, every timeout with its bound,
every exception class that can be raised, closed-client misuse, and a model that is not loaded.
One module-scoped server; each flavour is driven through the same small synchronous view so
one test body covers all six combinations.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import re
import time
from typing import Any, Callable, Iterator, Optional

import numpy as np
import pytest
import tritonclient.grpc
import tritonclient.http
from support import free_ports, grpc_url, http_url, server_config
from tritonclient.utils import InferenceServerException

from pytriton.client import (
    AsyncioModelClient,
    FuturesModelClient,
    ModelClient,
    PyTritonClientClosedError,
    PyTritonClientInferenceServerError,
    PyTritonClientInvalidUrlError,
    PyTritonClientModelDoesntSupportBatchingError,
    PyTritonClientModelUnavailableError,
    PyTritonClientQueueFullError,
    PyTritonClientTimeoutError,
    PyTritonClientValueError,
)
from pytriton.client.readiness import UNKNOWN_MODEL_GRACE_S
from pytriton.decorators import batch, sample
from pytriton.model_config import DynamicBatcher, ModelConfig, QueuePolicy, Tensor
from pytriton.triton import Triton

pytestmark = pytest.mark.functional

SLOW_S = 2.5  # the Slow model's time per request; inference timeouts ask for 1 s
BOUND_S = 1.0  # every timeout must fire within this much of the time asked for
F32 = {"inputs": [Tensor(dtype=np.float32, shape=(-1,))], "outputs": [Tensor(dtype=np.float32, shape=(-1,))]}


@sample
def _slow(INPUT_1):
    time.sleep(SLOW_S)
    return {"OUTPUT_1": INPUT_1}


@batch
def _queued(INPUT_1):
    time.sleep(0.5)
    return {"OUTPUT_1": INPUT_1}


@pytest.fixture(scope="module")
def server():
    config = server_config()
    triton = Triton(config=config)
    triton.bind("Echo", batch(lambda INPUT_1: {"OUTPUT_1": INPUT_1}), config=ModelConfig(max_batch_size=8), **F32)
    triton.bind(
        "Batch2",
        batch(lambda INPUT_1: {"OUTPUT_1": INPUT_1 * 2}),
        inputs=[Tensor(dtype=np.int32, shape=(1,))],
        outputs=[Tensor(dtype=np.int32, shape=(1,))],
        config=ModelConfig(max_batch_size=2),
    )
    triton.bind("Plain", sample(lambda INPUT_1: {"OUTPUT_1": INPUT_1 + 1}), config=ModelConfig(batching=False), **F32)
    triton.bind("Slow", [_slow] * 6, config=ModelConfig(batching=False), **F32)
    triton.bind(
        "Bytes",
        batch(lambda INPUT_1: {"OUTPUT_1": INPUT_1}),
        inputs=[Tensor(dtype=object, shape=(-1,))],
        outputs=[Tensor(dtype=object, shape=(-1,))],
        config=ModelConfig(max_batch_size=8),
    )
    queue_one = DynamicBatcher(default_queue_policy=QueuePolicy(max_queue_size=1))
    triton.bind("Queue1", _queued, config=ModelConfig(max_batch_size=1, batcher=queue_one), **F32)
    triton.run()
    TOKEN[:] = [triton.get_access_token()]
    try:
        yield config
    finally:
        triton.stop()


TOKEN: list = []  # the module server's access token, for the calls of restricted APIs


@pytest.fixture(params=["http", "grpc"])
def url(request, server):
    return http_url(server) if request.param == "http" else grpc_url(server)


@pytest.fixture(params=["sync", "futures", "asyncio"])
def flavour(request):
    return request.param


@dataclasses.dataclass
class View:
    """One client flavour seen synchronously: futures resolved, coroutines run to the end."""

    infer_sample: Callable[..., Any]
    infer_batch: Callable[..., Any]
    model_config: Callable[[], Any]
    close: Callable[[], None]
    infer_batch_chunked: Optional[Callable[..., Any]] = None


def _resolve(call):
    return lambda *args, **kwargs: call(*args, **kwargs).result(timeout=60)


@contextlib.contextmanager
def opened(flavour: str, url: str, model: str, **kwargs) -> Iterator[View]:
    """A client of the flavour, open for the body and always closed after it."""
    if flavour == "sync":
        client = ModelClient(url, model, **kwargs)
        view = View(client.infer_sample, client.infer_batch, lambda: client.model_config, client.close,
                    client.infer_batch_chunked)
    elif flavour == "futures":
        client = FuturesModelClient(url, model, **kwargs)
        view = View(
            _resolve(client.infer_sample),
            _resolve(client.infer_batch),
            lambda: client.model_config().result(timeout=60),
            client.close,
            _resolve(client.infer_batch_chunked),
        )
    else:
        loop = asyncio.new_event_loop()
        aclient = AsyncioModelClient(url, model, **kwargs)

        def run(call):
            return lambda *args, **kw: loop.run_until_complete(call(*args, **kw))

        try:
            loop.run_until_complete(aclient.__aenter__())
        except BaseException:
            loop.close()
            raise

        async def config():
            return await aclient.model_config

        view = View(
            run(aclient.infer_sample), run(aclient.infer_batch), run(config), run(aclient.close),
            run(aclient.infer_batch_chunked),
        )
    try:
        yield view
    finally:
        view.close()
        if flavour == "asyncio":
            loop.close()


@contextlib.contextmanager
def takes(low: float, high: float) -> Iterator[None]:
    start = time.monotonic()
    try:
        yield
    finally:
        elapsed = time.monotonic() - start
        print(f"[timeout-bound] asked {low:g} s, took {elapsed:.3f} s")
    assert low <= elapsed < high, f"took {elapsed:.2f} s, expected {low}..{high} s"


# ---- results ----------------------------------------------------------------------------------


def test_sample_and_batch_positional_and_named(url, flavour):
    data = np.arange(6, dtype=np.float32).reshape(2, 3)
    with opened(flavour, url, "Echo") as client:
        assert client.model_config().max_batch_size == 8
        np.testing.assert_array_equal(client.infer_batch(data)["OUTPUT_1"], data)
        np.testing.assert_array_equal(client.infer_batch(INPUT_1=data)["OUTPUT_1"], data)
        np.testing.assert_array_equal(client.infer_sample(data[1])["OUTPUT_1"], data[1])
    with opened(flavour, url, "Plain") as client:
        np.testing.assert_array_equal(client.infer_sample(INPUT_1=data[0])["OUTPUT_1"], data[0] + 1)


def test_bytes_and_object_arrays_round_trip_exactly(url, flavour):
    items = [b"a\x00", b"\x00\x00", b"", b"xyz\x00\x00", bytes(range(256)), "héllo".encode()]
    data = np.array(items, dtype=object).reshape(2, 3)
    with opened(flavour, url, "Bytes") as client:
        result = client.infer_batch(data)["OUTPUT_1"]
        sample_result = client.infer_sample(np.array([b"\x00tail\x00"], dtype=object))["OUTPUT_1"]
    assert result.dtype == object and result.tolist() == data.tolist()
    assert sample_result.tolist() == [b"\x00tail\x00"]


@pytest.mark.parametrize("flavour_name", ["sync", "futures", "asyncio"])
@pytest.mark.parametrize("rows, chunk_size", [(5, None), (2, None), (7, 1), (9, 2)])
def test_batches_larger_than_max_batch_size_are_chunked_and_joined_in_order(url, flavour_name, rows, chunk_size):
    data = np.arange(rows, dtype=np.int32).reshape(rows, 1)
    with opened(flavour_name, url, "Batch2") as client:
        with pytest.raises(PyTritonClientInferenceServerError, match="batch-size must be <= 2"):
            client.infer_batch(np.zeros((3, 1), dtype=np.int32))
        result = client.infer_batch_chunked(data, chunk_size=chunk_size)
    np.testing.assert_array_equal(result["OUTPUT_1"], data * 2)


def test_chunked_refuses_inputs_that_disagree_on_the_batch_size(url):
    with opened("futures", url, "Batch2") as client:
        with pytest.raises(PyTritonClientValueError, match="disagree|no batch axis"):
            client.infer_batch_chunked(np.zeros((), dtype=np.int32))
    with FuturesModelClient(url, "Plain") as plain, pytest.raises(PyTritonClientModelDoesntSupportBatchingError):
        plain.infer_batch_chunked(np.zeros((3, 1), dtype=np.float32))


# ---- timeouts ---------------------------------------------------------------------------------


def _unbound_url(protocol: str) -> str:
    return f"{protocol}://127.0.0.1:{free_ports(1)[0]}"


def test_init_timeout_on_first_request(url, flavour):
    with opened(flavour, _unbound_url(url.split("://")[0]), "Missing", init_timeout_s=1.5) as client:
        with takes(1.5, 1.5 + BOUND_S), pytest.raises(PyTritonClientTimeoutError, match="not ready within 1.5 s"):
            client.infer_sample(np.ones(2, np.float32))


@pytest.mark.parametrize("flavour_name", ["sync", "asyncio"])
def test_init_timeout_at_construction_without_lazy_init(url, flavour_name):
    with takes(1.5, 1.5 + BOUND_S), pytest.raises(PyTritonClientTimeoutError, match="not ready within 1.5 s"):
        with opened(flavour_name, _unbound_url(url.split("://")[0]), "Missing", init_timeout_s=1.5, lazy_init=False):
            pass


def test_a_model_the_server_does_not_serve_fails_within_seconds_naming_what_it_serves(server, url, flavour):
    """Not the whole init timeout (300 s by default): the server answers, and has no such model."""
    with opened(flavour, url, "Missing") as client:
        with takes(0.0, UNKNOWN_MODEL_GRACE_S + BOUND_S), pytest.raises(PyTritonClientModelUnavailableError) as info:
            client.infer_sample(np.ones(2, np.float32))
    message = str(info.value)
    assert "model 'Missing' is not served at" in message
    # the repository API that lists models is restricted by default: the message points at the serving
    # script's start line, which names them, and at the token
    assert "the serving script names the models it serves in its start line ('pytriton: serving ...'" in message
    assert "access_token=Triton.get_access_token()" in message
    with opened(flavour, url, "Missing", access_token=TOKEN[0]) as client:
        with pytest.raises(PyTritonClientModelUnavailableError) as info:
            client.infer_sample(np.ones(2, np.float32))
    assert "this server serves: Batch2, Bytes, Echo, Plain, Queue1, Slow" in str(info.value)


def test_inference_timeout_with_a_slow_model(url, flavour):
    with opened(flavour, url, "Slow", inference_timeout_s=1.0) as client:
        client.model_config()  # readiness and configuration out of the measured time
        with takes(1.0, 1.0 + BOUND_S), pytest.raises(PyTritonClientTimeoutError, match="within 1 s"):
            client.infer_sample(np.ones(2, np.float32))


def test_wait_for_model_timeout(url):
    with ModelClient(url, "Missing") as client, takes(1.0, 1.0 + BOUND_S):
        with pytest.raises(PyTritonClientTimeoutError):
            client.wait_for_model(1.0)

    async def run():
        async with AsyncioModelClient(url, "Missing") as aclient:
            with takes(1.0, 1.0 + BOUND_S), pytest.raises(PyTritonClientTimeoutError):
                await aclient.wait_for_model(1.0)
        async with AsyncioModelClient(url, "Echo") as aclient:
            await aclient.wait_for_model(5.0)

    asyncio.run(run())


# ---- errors -----------------------------------------------------------------------------------


# FuturesModelClient always waits for readiness: for it, these cases are the init timeouts above.
@pytest.mark.parametrize("flavour_name", ["sync", "asyncio"])
def test_model_not_loaded_without_readiness_wait_is_unavailable(url, flavour_name):
    with opened(flavour_name, url, "Missing", ensure_model_is_ready=False) as client:
        with pytest.raises(PyTritonClientModelUnavailableError, match="Missing"):
            client.infer_sample(np.ones(2, np.float32))


@pytest.mark.parametrize("flavour_name", ["sync", "asyncio"])
def test_unreachable_server_without_readiness_wait_is_unavailable(url, flavour_name):
    with opened(flavour_name, _unbound_url(url.split("://")[0]), "Echo", ensure_model_is_ready=False) as client:
        with pytest.raises(PyTritonClientModelUnavailableError):
            client.model_config()


def test_argument_errors(url, flavour):
    data = np.ones((1, 2), np.float32)
    with opened(flavour, url, "Echo") as client:
        with pytest.raises(PyTritonClientValueError, match="either positionally or by name"):
            client.infer_batch(data, INPUT_1=data)
        with pytest.raises(PyTritonClientValueError, match="numpy.ndarray"):
            client.infer_batch([[1.0, 2.0]])
    with pytest.raises(PyTritonClientInvalidUrlError):
        opened(flavour, "ftp://localhost", "Echo").__enter__()
    with pytest.raises(PyTritonClientValueError, match="init_timeout_s"):
        opened(flavour, url, "Echo", init_timeout_s=-1).__enter__()


def test_batch_on_a_model_without_batching(url, flavour):
    with opened(flavour, url, "Plain") as client:
        with pytest.raises(PyTritonClientModelDoesntSupportBatchingError, match="use infer_sample"):
            client.infer_batch(np.ones((2, 2), np.float32))


def test_server_error_keeps_the_servers_message(url, flavour):
    with opened(flavour, url, "Batch2") as client:
        with pytest.raises(PyTritonClientInferenceServerError, match=r"batch-size must be <= 2 for 'Batch2'"):
            client.infer_batch(np.zeros((4, 1), dtype=np.int32))


def test_a_batch_over_max_batch_size_is_refused_with_tritons_own_words_and_the_way_out(server, url):
    """The client refuses it before sending (a large batch need not cross the network to be refused),
    in the words Triton uses for it, plus the way out; when Triton refuses it (the client was given a
    configuration with a larger limit), the same hint follows Triton's text."""
    scheme, address = url.split("://")
    module = tritonclient.grpc if scheme == "grpc" else tritonclient.http
    raw = module.InferenceServerClient(address)
    try:
        batch3 = module.InferInput("INPUT_1", [3, 1], "INT32")
        batch3.set_data_from_numpy(np.zeros((3, 1), np.int32))
        with pytest.raises(InferenceServerException) as refused:
            raw.infer("Batch2", [batch3])
    finally:
        raw.close()
    # Triton prefixes the request's id ("[request id: <id_unknown>] " for a request without one).
    triton_text = re.sub(r"^\[request id: [^\]]*\] ", "", refused.value.message())
    assert triton_text == "inference request batch-size must be <= 2 for 'Batch2'", refused.value.message()
    hint = ("infer_batch_chunked(...) of ModelClient, FuturesModelClient and AsyncioModelClient sends a larger "
            "batch as chunks of at most max_batch_size samples and joins the outputs")
    with ModelClient(url, "Batch2") as client:
        with pytest.raises(PyTritonClientInferenceServerError) as checked:
            client.infer_batch(np.zeros((3, 1), dtype=np.int32))
        wider = dataclasses.replace(client.model_config, max_batch_size=8)
    assert str(checked.value) == f"Error occurred during inference request. Message: {triton_text}. {hint}"
    with ModelClient(url, "Batch2", model_config=wider) as client:
        with pytest.raises(PyTritonClientInferenceServerError) as answered:
            client.infer_batch(np.zeros((3, 1), dtype=np.int32))
    assert str(answered.value).startswith("Error occurred during inference request. Message: [request id: ")
    assert str(answered.value).endswith(f"{triton_text}. {hint}")


def test_server_queue_full(url):
    with FuturesModelClient(url, "Queue1", max_workers=6) as client:
        client.model_config().result()
        futures = [client.infer_batch(np.ones((1, 1), np.float32)) for _ in range(6)]
        errors = [future.exception(timeout=30) for future in futures]
    assert any(isinstance(error, PyTritonClientQueueFullError) for error in errors), errors
    assert any(error is None for error in errors)


def test_client_queue_full_when_non_blocking(url):
    with FuturesModelClient(url, "Slow", max_workers=1, max_queue_size=0, non_blocking=True) as client:
        first = client.infer_sample(np.ones(2, np.float32))
        with pytest.raises(PyTritonClientQueueFullError, match="retry later"):
            client.infer_sample(np.ones(2, np.float32))
        np.testing.assert_array_equal(first.result(timeout=30)["OUTPUT_1"], np.ones(2, np.float32))


def test_calls_after_close_raise_closed(url, flavour):
    with opened(flavour, url, "Echo") as client:
        client.infer_sample(np.ones(2, np.float32))
        client.close()
        client.close()  # idempotent
        with pytest.raises(PyTritonClientClosedError, match="closed"):
            client.infer_sample(np.ones(2, np.float32))
        with pytest.raises(PyTritonClientClosedError):
            client.model_config()


def _page_000_chunking_client():
    """The ChunkingClient class of contract page 000, taken verbatim from the page."""
    import pathlib
    import re

    seeds = pathlib.Path(__file__).resolve().parents[3].parent / "shared" / "seeds"
    pages = sorted(seeds.glob("000_*.txt"))
    if not pages:
        pytest.skip(f"contract page 000 not found under {seeds}")
    blocks = re.findall(r"```python\n(.*?)```", pages[0].read_text(), flags=re.S)
    source = next(block for block in blocks if "class ChunkingClient" in block)
    namespace: dict = {"np": np}
    exec(compile(source, str(pages[0]), "exec"), namespace)
    return namespace["ChunkingClient"]


def test_page_000_chunking_client_works_verbatim_over_both_protocols(url):
    chunking_client = _page_000_chunking_client()
    data = np.arange(5, dtype=np.int32).reshape(5, 1)
    with chunking_client(url, "Batch2") as client:
        results = [future.result(timeout=30) for future in client.infer_batch(INPUT_1=data)]
    assert [len(result["OUTPUT_1"]) for result in results] == [2, 2, 1]
    np.testing.assert_array_equal(np.concatenate([result["OUTPUT_1"] for result in results]), data * 2)
