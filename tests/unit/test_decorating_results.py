"""`map_result` and `gather`: decorators transform lazy answers without consuming them early."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from pytriton.decorating.results import gather, is_lazy, map_result
from pytriton.decorators import batch, pad_batch, sample
from pytriton.exceptions import PyTritonValidationError
from pytriton.worker.request import Request


def double(value):
    return value * 2


def test_map_result_on_direct_generator_async_generator_and_coroutine_answers():
    assert map_result(3, double) == 6

    def numbers():
        yield 1
        yield 2

    assert list(map_result(numbers(), double)) == [2, 4]

    async def async_numbers():
        yield 1
        yield 5

    async def coroutine():
        return 21

    async def collect():
        return [value async for value in map_result(async_numbers(), double)], await map_result(coroutine(), double)

    assert asyncio.run(collect()) == ([2, 10], 42)


def test_closing_a_mapped_generator_closes_the_callable_s_generator_at_once():
    closed = []

    def endless():
        try:
            while True:
                yield 1
        finally:
            closed.append(True)

    mapped = map_result(endless(), double)
    assert next(mapped) == 2
    mapped.close()
    assert closed == [True]


def test_gather_merges_streams_step_by_step_with_none_for_ended_requests():
    def stream(values):
        yield from values

    parts = [((0, 2), stream([["a0", "c0"], ["a1", "c1"]])), ((1,), stream([["b0"]]))]
    merged = gather(3, parts, lambda indices, step: list(step))
    assert list(merged) == [["a0", "b0", "c0"], ["a1", None, "c1"]]


def test_gather_runs_coroutines_concurrently():
    async def after(delay, value):
        await asyncio.sleep(delay)
        return [value]

    result = gather(2, [((0,), after(0.05, "a")), ((1,), after(0.05, "b"))], lambda indices, v: list(v))
    assert is_lazy(result)
    assert asyncio.run(result) == ["a", "b"]


def test_gather_of_direct_answers_checks_through_convert():
    def convert(indices, value):
        if len(value) != len(indices):
            raise PyTritonValidationError("one response per request")
        return value

    assert gather(2, [((1,), ["b"]), ((0,), ["a"])], convert) == ["a", "b"]
    with pytest.raises(PyTritonValidationError):
        gather(2, [((0, 1), ["a"])], convert)


def requests(*values):
    return [Request({"x": np.array([[v]], dtype=np.float32)}) for v in values]


def test_batch_splits_every_yielded_step_and_checks_its_batch_size():
    @batch
    def stream(x):
        yield {"y": x + 1}
        yield {"y": np.zeros((1, 1))}  # wrong: the batch has 2 rows

    steps = stream(requests(1.0, 2.0))
    assert [r["y"].tolist() for r in next(steps)] == [[[2.0]], [[3.0]]]
    with pytest.raises(PyTritonValidationError, match="leading dim must be the batch size 2"):
        next(steps)


def test_sample_with_async_callables_gathers_one_call_per_request():
    @sample
    async def halve(x):
        await asyncio.sleep(0.01)
        return {"y": x / 2}

    answers = asyncio.run(halve(requests(2.0, 8.0)))
    assert [a["y"].tolist() for a in answers] == [[[1.0]], [[4.0]]]


def test_pad_batch_trims_each_step_of_a_stream():
    from pytriton.model_config import ModelConfig
    from pytriton.worker.context import TritonContext, set_current_context

    set_current_context(TritonContext("M", 1, (), (), ModelConfig(max_batch_size=4)))
    try:
        @batch
        @pad_batch
        def stream(x):
            assert len(x) == 4
            yield {"y": x}
            yield {"y": x * 10}

        assert [[r["y"].tolist() for r in step] for step in stream(requests(1.0, 2.0))] == [
            [[[1.0]], [[2.0]]], [[[10.0]], [[20.0]]]
        ]
    finally:
        set_current_context(None)
