"""The blocking and the asyncio clients offer the same calls (asyncio ones are awaited)."""

from __future__ import annotations

import inspect

import pytest

from pytriton.client import AsyncioDecoupledModelClient, AsyncioModelClient, DecoupledModelClient, ModelClient

ONLY_ASYNCIO: set = set()
"""None: even `infer_batch_chunked` is on both (the blocking one sends the chunks one after another)."""


def _public(cls) -> set:
    return {name for name in dir(cls) if not name.startswith("_")}


@pytest.mark.parametrize("blocking, asynchronous", [(ModelClient, AsyncioModelClient),
                                                    (DecoupledModelClient, AsyncioDecoupledModelClient)])
def test_the_same_calls_on_both_sides(blocking, asynchronous):
    assert _public(blocking) - _public(asynchronous) == set()
    assert _public(asynchronous) - _public(blocking) <= ONLY_ASYNCIO


@pytest.mark.parametrize("name", ["wait_for_server", "wait_for_model", "load_model", "unload_model", "close",
                                  "infer_sample", "infer_batch", "infer_batch_chunked"])
def test_the_asyncio_calls_are_coroutines_with_the_same_parameters(name):
    blocking, asynchronous = getattr(ModelClient, name), getattr(AsyncioModelClient, name)
    assert inspect.iscoroutinefunction(asynchronous)
    assert list(inspect.signature(blocking).parameters) == list(inspect.signature(asynchronous).parameters)
