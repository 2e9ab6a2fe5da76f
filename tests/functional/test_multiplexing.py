"""Multiplexed models (``@multiplexed``) against the real server, on pytriton's backend and on the
proxy path: every rule of issue 45's second part, once per path.

One load for concurrent requests of a variant, a mixed batch served per variant, the least
recently used variant evicted first, no eviction under a running batch, a request routed to the
instance that holds its variant (pytriton's backend; the proxy path warns that Triton chooses),
a failing loader failing its variant's requests only, and an unknown variant answered with a 400
that names it. The callables run on threads of this process, so the tests read what they did.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import threading
import time
import urllib.error
import urllib.request
from typing import Any, Dict, List

import numpy as np
import pytest
import wrapt
from support import grpc_url, http_url, served_backend, server_config, triton_instances, wait_until

from pytriton.client import ModelClient
from pytriton.client.exceptions import PyTritonClientInferenceServerError
from pytriton.decorators import batch, multiplexed
from pytriton.facade.binding import DISPATCHERS_PER_WORKER
from pytriton.model_config import DynamicBatcher, ModelConfig, Tensor
from pytriton.triton import Triton

pytestmark = pytest.mark.functional

X = [Tensor(name="x", dtype=np.float32, shape=(-1,))]
Y = [Tensor(name="y", dtype=np.float32, shape=(-1,))]
WHO = [Tensor(name="y", dtype=np.float32, shape=(-1,)), Tensor(name="who", dtype=np.int64, shape=(1,))]

BACKENDS = ["pytriton", "python"] if served_backend() == "pytriton" else ["python"]


class Weights:
    """What a model's loader did: loads and unloads in order, with the weight of each variant
    (its name's length); a variant named ``slow-*`` loads in 0.5 s, ``flaky`` fails once,
    ``missing-*`` is unknown (KeyError)."""

    def __init__(self) -> None:
        self.loads: List[str] = []
        self.unloads: List[str] = []
        self.batches: List[List[str]] = []
        self.flaky_left = 1
        self.lock = threading.Lock()

    def load(self, variant: str) -> Dict[str, Any]:
        with self.lock:
            self.loads.append(variant)
        if variant.startswith("slow"):
            time.sleep(0.5)
        if variant.startswith("missing"):
            raise KeyError(variant)
        if variant == "flaky" and self.flaky_left:
            self.flaky_left -= 1
            raise OSError("the adapter store timed out")
        return {"weight": float(len(variant)), "valid": True}

    def unload(self, variant: str, model: Dict[str, Any]) -> None:
        model["valid"] = False  # a call still using it would see this
        with self.lock:
            self.unloads.append(variant)

    def clear(self) -> None:
        with self.lock:
            self.loads.clear()
            self.unloads.clear()
            self.batches.clear()


def recording(weights: Weights) -> Any:
    """Above @multiplexed: records the variants of each batch as Triton handed it over."""

    @wrapt.decorator
    def record(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        weights.batches.append([request.parameters.get("variant") for request in args[0]])
        return wrapped(*args, **kwargs)

    return record


SCALED = Weights()
HELD = Weights()
ROUTED = Weights()
GATHERED = Weights()
RELEASE = threading.Event()


@recording(SCALED)
@multiplexed(SCALED.load, unload=SCALED.unload, max_loaded=2)
@batch
def scaled(x: np.ndarray, model: Dict[str, Any]) -> Dict[str, np.ndarray]:
    return {"y": x * model["weight"]}


@multiplexed(HELD.load, unload=HELD.unload, max_loaded=1)
@batch
async def held(x: np.ndarray, model: Dict[str, Any]) -> Dict[str, np.ndarray]:
    if model["weight"] == 4.0:  # variant "hold": runs until the test releases it
        while not RELEASE.is_set():
            await asyncio.sleep(0.01)
    if not model["valid"]:
        raise RuntimeError("the variant was unloaded under a running batch")
    return {"y": x * model["weight"]}


@multiplexed(ROUTED.load, unload=ROUTED.unload, max_loaded=1)
@batch
def routed(x: np.ndarray, model: Dict[str, Any]) -> Dict[str, np.ndarray]:
    # Long enough that a request sent right after the last answer, while its instance is still
    # being freed, waits for it (a batch waits for a busy holder about one of its batches).
    time.sleep(0.025)
    instance = int(threading.current_thread().name.rsplit("-", 1)[1])  # pytriton-<model>-<instance>
    return {"y": x * model["weight"], "who": np.full((len(x), 1), instance, np.int64)}


@recording(GATHERED)
@multiplexed(GATHERED.load, max_loaded=2)
@batch
def gathering(x: np.ndarray, model: Dict[str, Any]) -> Dict[str, np.ndarray]:
    if model["weight"] == 4.0:  # variants "busy", "BUSY": keep their instance busy until released
        RELEASE.wait(timeout=30)
    return {"y": x * model["weight"]}


@pytest.fixture(scope="module", params=BACKENDS)
def server(request):
    backend = request.param
    config = server_config(model_backend=backend)
    triton = Triton(config=config)
    gathered = ModelConfig(max_batch_size=8, batcher=DynamicBatcher(max_queue_delay_microseconds=300_000))
    triton.bind("Scaled", scaled, X, Y, config=gathered)
    triton.bind("Held", held, X, Y, config=ModelConfig(max_batch_size=8))
    triton.bind("Routed", [routed, routed], X, WHO, config=ModelConfig(max_batch_size=8))
    triton.bind("Gathered", [gathering, gathering], X, Y, config=ModelConfig(max_batch_size=8))
    triton.run()
    try:
        yield backend, config
    finally:
        triton.stop()


def _ask(url: str, model: str, variant: str, value: float = 1.0, **client_options: Any) -> Dict[str, np.ndarray]:
    with ModelClient(url, model, **client_options) as client:
        return client.infer_batch(x=np.full((1, 1), value, np.float32), parameters={"variant": variant})


def _together(url: str, model: str, asks: List[Any]) -> List[Any]:
    """Send each ``(variant, value)`` of `asks` at once, each from its own client; the answers or errors."""
    with concurrent.futures.ThreadPoolExecutor(len(asks)) as pool:
        futures = [pool.submit(_ask, url, model, variant, value) for variant, value in asks]
        outcomes = []
        for future in futures:
            try:
                outcomes.append(future.result(timeout=60))
            except Exception as exc:  # noqa: BLE001 - the test reads it
                outcomes.append(exc)
    return outcomes


def test_concurrent_requests_for_a_variant_not_loaded_cause_one_load(server):
    _, config = server
    SCALED.clear()
    outcomes = _together(grpc_url(config), "Scaled", [("slow-one", float(i)) for i in range(6)])
    assert [float(outcome["y"][0, 0]) for outcome in outcomes] == [8.0 * i for i in range(6)]
    assert SCALED.loads == ["slow-one"]


def test_a_batch_that_mixes_variants_answers_each_request_with_its_own(server):
    _, config = server
    SCALED.clear()
    asks = [("ab", 1.0), ("abcd", 2.0), ("ab", 3.0), ("abcd", 4.0)]
    outcomes = _together(http_url(config), "Scaled", asks)
    assert [float(outcome["y"][0, 0]) for outcome in outcomes] == [2.0, 8.0, 6.0, 16.0]
    assert any(set(batch) == {"ab", "abcd"} for batch in SCALED.batches), SCALED.batches  # one batch held both
    assert sorted(SCALED.loads) == ["ab", "abcd"]


def test_the_least_recently_used_variant_is_unloaded_first(server):
    _, config = server
    url = http_url(config)
    for variant in ("e1", "e2"):  # a known state: these two held (max_loaded=2)
        _ask(url, "Scaled", variant)
    SCALED.clear()
    for variant in ("e1", "e3", "e2", "e1"):
        _ask(url, "Scaled", variant)
    # e3 evicts e2 (e1 was used after it); e2 evicts e1; e1 evicts e3
    assert SCALED.unloads == ["e2", "e1", "e3"]
    assert SCALED.loads == ["e3", "e2", "e1"]


def test_a_variant_in_use_is_not_evicted_under_a_running_batch(server):
    _, config = server
    url = grpc_url(config)
    HELD.clear()
    RELEASE.clear()
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        running = pool.submit(_ask, url, "Held", "hold", 1.0)
        wait_until(lambda: HELD.loads == ["hold"], timeout_s=10)
        time.sleep(0.2)  # its call is running
        assert float(_ask(url, "Held", "other", 1.0)["y"][0, 0]) == 5.0  # max_loaded=1: loaded beside "hold"
        assert "hold" not in HELD.unloads
        RELEASE.set()
        assert float(running.result(timeout=30)["y"][0, 0]) == 4.0  # its object was never unloaded meanwhile
    assert HELD.unloads == ["other"]  # the surplus went as soon as "other" was done; "hold" stays, now the one held


def test_a_failing_loader_fails_only_its_variant_and_is_called_again(server):
    _, config = server
    SCALED.clear()
    SCALED.flaky_left = 1
    outcomes = _together(http_url(config), "Scaled", [("flaky", 1.0), ("fine", 1.0)])
    assert isinstance(outcomes[0], PyTritonClientInferenceServerError)
    assert "loading variant 'flaky' failed: OSError: the adapter store timed out" in str(outcomes[0])
    assert float(outcomes[1]["y"][0, 0]) == 4.0
    assert float(_ask(http_url(config), "Scaled", "flaky")["y"][0, 0]) == 5.0  # loaded again
    assert SCALED.loads.count("flaky") == 2


def test_an_unknown_variant_is_a_400_naming_it(server):
    _, config = server
    body = json.dumps({"inputs": [{"name": "x", "shape": [1, 1], "datatype": "FP32", "data": [1.0]}],
                       "parameters": {"variant": "missing-42"}}).encode()
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(f"{http_url(config)}/v2/models/Scaled/infer", data=body, timeout=30)
    assert refused.value.code == 400
    text = json.loads(refused.value.read())["error"]
    assert "unknown variant 'missing-42' (request parameter 'variant')" in text, text
    with pytest.raises(PyTritonClientInferenceServerError, match="name one in the request parameter 'variant'"):
        with ModelClient(grpc_url(config), "Scaled") as client:
            client.infer_batch(x=np.ones((1, 1), np.float32))
    assert float(_ask(http_url(config), "Scaled", "abc")["y"][0, 0]) == 3.0  # the server serves on


def test_a_request_goes_to_the_instance_that_holds_its_variant(server, caplog):
    """Two instances holding one variant each: requests for p and q, two of each in turn. Sent to
    their holders, each variant loads once; sent in turn to either instance, they reload often."""
    backend, config = server
    url = http_url(config)
    ROUTED.clear()
    answered: Dict[str, set] = {"p": set(), "qq": set()}
    for _ in range(3):
        for variant in ("p", "p", "qq", "qq"):
            answer = _ask(url, "Routed", variant, 1.0)
            assert float(answer["y"][0, 0]) == len(variant)
            answered[variant].add(int(answer["who"][0, 0]))
    if backend == "pytriton":
        assert sorted(ROUTED.loads) == ["p", "qq"], ROUTED.loads
        assert len(answered["p"]) == len(answered["qq"]) == 1 and answered["p"] != answered["qq"]
    else:  # Triton chooses: answers are right, loads as the instances are sent them
        assert ROUTED.loads.count("p") >= 1 and ROUTED.loads.count("qq") >= 1


def test_batches_waiting_for_an_instance_go_with_the_first_that_claims_it(server):
    """Both instances busy; five requests for one variant arrive 50 ms apart, each handed on
    alone by Triton. Once an instance frees, the first to claim it takes the other four along:
    one call serves the five, and their variant loads once."""
    backend, config = server
    url = grpc_url(config)
    GATHERED.clear()
    RELEASE.clear()
    clients = [ModelClient(url, "Gathered") for _ in range(5)]  # ready before the requests go
    try:
        with concurrent.futures.ThreadPoolExecutor(7) as pool:
            busy = [pool.submit(_ask, url, "Gathered", variant, 1.0) for variant in ("busy", "BUSY")]
            wait_until(lambda: len(GATHERED.batches) == 2, timeout_s=15)  # both instances run a call
            waiting = []
            for value, client in enumerate(clients):
                x = np.full((1, 1), float(value), np.float32)
                waiting.append(pool.submit(client.infer_batch, x=x, parameters={"variant": "gg"}))
                time.sleep(0.05)
            time.sleep(0.5)  # the last one waits too
            RELEASE.set()
            assert [float(future.result(timeout=30)["y"][0, 0]) for future in busy] == [4.0, 4.0]
            assert [float(future.result(timeout=30)["y"][0, 0]) for future in waiting] == [2.0 * v for v in range(5)]
    finally:
        for client in clients:
            client.close()
    served = [batch for batch in GATHERED.batches if "gg" in batch]
    if backend == "pytriton":
        assert served == [["gg"] * 5], GATHERED.batches
        assert GATHERED.loads.count("gg") == 1, GATHERED.loads
    else:  # Triton hands each to the instance it frees: no batch waits to be taken along
        assert sum(len(batch) for batch in served) == 5


def test_a_routed_model_has_a_waiting_instance_per_worker_and_says_it_is_multiplexed(server):
    backend, config = server
    with urllib.request.urlopen(f"{http_url(config)}/v2/models/Routed/config", timeout=10) as answer:
        parameters = json.loads(answer.read())["parameters"]
    told = json.loads(parameters["pytriton.multiplex"]["string_value"])
    assert told == {"parameter": "variant", "max_loaded": 1, "variants": None}
    assert triton_instances(config, "Routed") == (2 + 2 * DISPATCHERS_PER_WORKER if backend == "pytriton" else 2)
    assert triton_instances(config, "Scaled") == 1  # one instance: nothing to route


def test_the_proxy_path_says_it_cannot_route(caplog):
    if "python" not in BACKENDS:
        pytest.skip("no proxy path")
    caplog.set_level(logging.WARNING, logger="pytriton")
    with Triton(config=server_config(model_backend="python")) as triton:
        triton.bind("Routed", [routed, routed], X, WHO, config=ModelConfig(max_batch_size=8))
    assert any("Triton chooses the instance of each batch" in record.getMessage() for record in caplog.records)


def test_the_metrics_count_loads_hits_misses_and_evictions(server):
    _, config = server
    url = http_url(config)
    for variant in ("m1", "m1", "m2", "m3"):
        _ask(url, "Scaled", variant)

    def families() -> Dict[str, float]:
        with urllib.request.urlopen(f"http://127.0.0.1:{config.metrics_port}/metrics", timeout=10) as answer:
            text = answer.read().decode()
        found = {}
        for line in text.splitlines():
            if line.startswith("pytriton_variant") and 'model="Scaled"' in line:
                name = line.split("{", 1)[0]
                found[name] = found.get(name, 0.0) + float(line.rsplit(" ", 1)[1])
        return found

    wait_until(lambda: families().get("pytriton_variant_hits_total", 0) >= 1, timeout_s=15)
    found = families()
    for name in ("pytriton_variant_loads_total", "pytriton_variant_misses_total", "pytriton_variant_evictions_total",
                 "pytriton_variant_load_seconds_count", "pytriton_variants_loaded"):
        assert found.get(name, 0) >= 1, (name, found)
