"""Unit tests of ``@multiplexed`` and the variant cache: `Request` lists in, answers out, no server.

The serving behaviour (routing, the 400 on the wire, metrics on /metrics) is tested against the
real server in tests/functional/test_multiplexing.py.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, Dict, List

import numpy as np
import pytest

from pytriton.decorating.multiplexing import multiplexing_of
from pytriton.decorators import batch, multiplexed, sample
from pytriton.exceptions import PyTritonBadParameterError, PyTritonValidationError
from pytriton.ipc.protocol import ErrorCode
from pytriton.metrics import Registry, set_current_registry
from pytriton.worker.request import Request
from pytriton.worker.responses import Failure
from pytriton.worker.variants import VariantCache


def _request(variant: Any, value: float = 1.0, rows: int = 1) -> Request:
    parameters = {} if variant is None else {"variant": variant}
    return Request({"x": np.full((rows, 1), value, dtype=np.float32)}, parameters)


class Weights:
    """A loader of scale factors, recording what it did."""

    def __init__(self, delay_s: float = 0.0, fail: Any = ()) -> None:
        self.loads: List[str] = []
        self.unloads: List[str] = []
        self.delay_s = delay_s
        self.fail = set(fail)
        self.lock = threading.Lock()

    def load(self, variant: str) -> float:
        with self.lock:
            self.loads.append(variant)
        time.sleep(self.delay_s)
        if variant in self.fail:
            raise RuntimeError(f"disk error reading {variant}")
        if variant.startswith("missing"):
            raise KeyError(variant)
        return float(len(variant))

    def unload(self, variant: str, value: Any) -> None:
        self.unloads.append(variant)


def _scaled(weights: Weights, **options: Any) -> Any:
    @multiplexed(weights.load, unload=weights.unload, **options)
    @batch
    def infer(x: np.ndarray, model: float) -> Dict[str, np.ndarray]:
        return {"y": x * model}

    return infer


def test_each_request_gets_its_own_variant_and_a_mixed_batch_calls_once_per_variant() -> None:
    weights = Weights()
    calls: List[int] = []

    @multiplexed(weights.load)
    @batch
    def infer(x: np.ndarray, model: float) -> Dict[str, np.ndarray]:
        calls.append(len(x))
        return {"y": x * model}

    answers = infer([_request("ab", 1.0), _request("abcd", 2.0, rows=2), _request("ab", 3.0)])
    assert [a["y"][:, 0].tolist() for a in answers] == [[2.0], [8.0, 8.0], [6.0]]
    assert sorted(calls) == [2, 2]  # "ab": two requests of one row; "abcd": one of two rows
    assert weights.loads == ["ab", "abcd"]


def test_the_least_recently_used_variant_goes_first_and_its_unloader_is_called() -> None:
    weights = Weights()
    infer = _scaled(weights, max_loaded=2)
    infer([_request("a")])
    infer([_request("b")])
    infer([_request("a")])  # "b" is now the least recently used
    infer([_request("c")])
    assert weights.unloads == ["b"]
    assert multiplexing_of(infer).caches.all()[0].held() == ["a", "c"]
    infer([_request("b")])
    assert weights.unloads == ["b", "a"]
    assert weights.loads == ["a", "b", "c", "b"]


def test_a_batch_takes_its_variants_in_the_order_they_first_appear() -> None:
    weights = Weights()
    infer = _scaled(weights, max_loaded=3)
    infer([_request("c"), _request("a"), _request("c"), _request("b")])
    assert multiplexing_of(infer).caches.all()[0].held() == ["c", "a", "b"]


def test_concurrent_requests_of_a_variant_not_loaded_cause_one_load() -> None:
    weights = Weights(delay_s=0.3)
    infer = _scaled(weights)
    results: List[Any] = []

    def call(value: float) -> None:
        results.append(infer([_request("same", value)])[0]["y"][0, 0])

    threads = [threading.Thread(target=call, args=(float(i),)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert weights.loads == ["same"]
    assert sorted(results) == [4.0 * i for i in range(6)]


def test_concurrent_async_batches_share_one_load() -> None:
    loads: List[str] = []

    async def load(variant: str) -> float:
        loads.append(variant)
        await asyncio.sleep(0.1)
        return 10.0

    @multiplexed(load)
    @batch
    async def infer(x: np.ndarray, model: float) -> Dict[str, np.ndarray]:
        await asyncio.sleep(0)
        return {"y": x * model}

    async def main() -> List[Any]:
        return list(await asyncio.gather(*(infer([_request("v", float(i))]) for i in range(5))))

    answers = asyncio.run(main())
    assert loads == ["v"]
    assert [a[0]["y"][0, 0] for a in answers] == [0.0, 10.0, 20.0, 30.0, 40.0]


def test_a_variant_in_use_is_never_evicted_under_a_running_call() -> None:
    """Two threads (as a timed call's thread and the next batch's would): while "a" runs, loads
    of other variants evict around it, past max_loaded if they must."""
    weights = Weights()
    started, finish = threading.Event(), threading.Event()
    seen: List[Any] = []

    @multiplexed(weights.load, unload=weights.unload, max_loaded=1)
    @batch
    def infer(x: np.ndarray, model: float) -> Dict[str, np.ndarray]:
        if model == 1.0:  # variant "a": hold it until told
            started.set()
            finish.wait(5)
        return {"y": x * model}

    slow = threading.Thread(target=lambda: seen.append(infer([_request("a")])))
    slow.start()
    assert started.wait(5)
    infer([_request("bb")])  # "a" is in use: "bb" loads beside it, over the limit, and goes once done
    assert weights.unloads == ["bb"]
    infer([_request("ccc")])
    assert weights.unloads == ["bb", "ccc"]
    finish.set()
    slow.join()
    assert seen[0][0]["y"][0, 0] == 1.0
    infer([_request("dddd")])  # "a" released: now it goes
    assert weights.unloads == ["bb", "ccc", "a"]


def test_a_stream_holds_its_variant_until_it_ends() -> None:
    weights = Weights()

    @multiplexed(weights.load, unload=weights.unload, max_loaded=1)
    @batch
    def infer(x: np.ndarray, model: float) -> Any:
        for step in range(2):
            yield {"y": x * model + step}

    stream = infer([_request("a")])
    first = next(stream)
    infer([_request("bb")]).close()  # "a" streams on: not evicted
    assert weights.unloads == []
    assert list(stream) and first[0]["y"][0, 0] == 1.0
    assert weights.unloads == ["a"]


def test_a_loader_that_raises_fails_its_requests_only_and_is_called_again_next_time() -> None:
    weights = Weights(fail={"bad"})
    infer = _scaled(weights)
    answers = infer([_request("bad"), _request("ok", 2.0)])
    assert isinstance(answers[0], Failure) and answers[0].code == ErrorCode.INTERNAL
    assert "loading variant 'bad' failed: RuntimeError: disk error reading bad" in answers[0].message
    assert answers[1]["y"][0, 0] == 4.0
    weights.fail.clear()
    assert infer([_request("bad")])[0]["y"][0, 0] == 3.0
    assert weights.loads == ["bad", "ok", "bad"]


def test_an_unknown_variant_gets_an_invalid_argument_error_naming_it() -> None:
    infer = _scaled(Weights())
    answers = infer([_request("missing-7"), _request(None), _request(3), _request("ok")])
    assert [type(a) for a in answers[:3]] == [Failure] * 3
    assert all(a.code == ErrorCode.INVALID_ARG for a in answers[:3])
    assert "unknown variant 'missing-7' (request parameter 'variant'): the loader refused it (KeyError" in (
        answers[0].message)
    assert "name one in the request parameter 'variant'" in answers[1].message
    assert "must name a variant (a non-empty string), got 3" in answers[2].message
    assert answers[3]["y"][0, 0] == 2.0


def test_variants_given_refuse_others_without_loading() -> None:
    weights = Weights()
    infer = _scaled(weights, variants=["en", "de"])
    answers = infer([_request("fr")])
    assert answers[0].code == ErrorCode.INVALID_ARG
    assert "unknown variant 'fr'" in answers[0].message and "'en', 'de'" in answers[0].message
    assert weights.loads == []


def test_sample_and_a_plain_callable_get_the_object_too() -> None:
    @multiplexed(lambda variant: variant * 2, argument="adapter")
    @sample
    def one(x: np.ndarray, adapter: str) -> Dict[str, np.ndarray]:
        return {"y": np.array([[len(adapter)]])}

    @multiplexed(lambda variant: variant * 3)
    def plain(requests: List[Request], model: str) -> List[Dict[str, np.ndarray]]:
        return [{"y": np.array([[len(model)]])} for _ in requests]

    assert one([_request("ab")])[0]["y"][0, 0] == 4
    assert plain([_request("ab"), _request("abc")])[1]["y"][0, 0] == 9


def test_an_argument_named_like_an_input_is_refused_clearly() -> None:
    @multiplexed(lambda variant: 1.0, argument="x")
    @batch
    def infer(x: np.ndarray) -> Dict[str, np.ndarray]:
        return {"y": x}

    with pytest.raises(PyTritonValidationError, match=r"\['x'\] given with the requests are also input names"):
        infer([_request("a")])


def test_each_instance_holds_its_own_variants() -> None:
    weights = Weights()
    infer = _scaled(weights)
    for registry in (Registry("m", 1, 0), Registry("m", 1, 1)):
        token = set_current_registry(registry)
        try:
            infer([_request("a")])
            infer([_request("a")])
        finally:
            set_current_registry(None)
        del token
        report = {family[0]: family[4][0][1] for family in registry.report()}
        assert report["pytriton_variant_loads_total"] == 1
        assert report["pytriton_variant_hits_total"] == 1
        assert report["pytriton_variant_misses_total"] == 1
        assert report["pytriton_variants_loaded"] == 1
    assert weights.loads == ["a", "a"]


def test_bad_arguments_are_refused_naming_them() -> None:
    with pytest.raises(PyTritonBadParameterError, match="max_loaded=0 is invalid"):
        multiplexed(lambda v: v, max_loaded=0)
    with pytest.raises(PyTritonBadParameterError, match="variants='en' is a string"):
        multiplexed(lambda v: v, variants="en")
    with pytest.raises(PyTritonBadParameterError, match="parameter='a b' is invalid"):
        multiplexed(lambda v: v, parameter="a b")
    with pytest.raises(PyTritonBadParameterError, match="load must be a callable"):
        multiplexed("not callable")  # type: ignore[arg-type]


def test_the_cache_counts_evictions_and_load_time() -> None:
    registry = Registry("m", 1, 0)
    from pytriton.worker.measures import VariantMeasures

    cache = VariantCache("m", lambda v: v, None, 1, VariantMeasures(registry))
    for name in ("a", "b", "a"):
        cache.acquire(name)
        cache.release(name)
    report = {family[0]: family[4][0][1] for family in registry.report()}
    assert report["pytriton_variant_evictions_total"] == 2
    assert report["pytriton_variant_load_seconds"][-1] == 3  # three loads observed
