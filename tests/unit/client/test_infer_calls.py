"""infer_sample and infer_batch are written once (pytriton.client.infer_calls) yet each client shows its own."""

from __future__ import annotations

import inspect
from typing import Awaitable

import pytest

from pytriton.client import (
    AsyncioDecoupledModelClient,
    AsyncioModelClient,
    DecoupledModelClient,
    FuturesModelClient,
    ModelClient,
)
from pytriton.client.infer_calls import InferCall, InferCalls

CLIENTS = [ModelClient, AsyncioModelClient, FuturesModelClient, DecoupledModelClient, AsyncioDecoupledModelClient]
PUBLISHED = [
    ("self", inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.empty),
    ("inputs", inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.empty),
    ("parameters", inspect.Parameter.KEYWORD_ONLY, None),
    ("headers", inspect.Parameter.KEYWORD_ONLY, None),
    ("sequence_id", inspect.Parameter.KEYWORD_ONLY, 0),
    ("sequence_start", inspect.Parameter.KEYWORD_ONLY, False),
    ("sequence_end", inspect.Parameter.KEYWORD_ONLY, False),
    # Added after the published signature, keyword-only with a default: published calls run unchanged.
    ("priority", inspect.Parameter.KEYWORD_ONLY, None),
    ("named_inputs", inspect.Parameter.VAR_KEYWORD, inspect.Parameter.empty),
]


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("name", ["infer_sample", "infer_batch"])
def test_every_client_has_its_own_copy_with_the_published_signature(client, name):
    method = client.__dict__[name]  # its own, not found through a base
    assert method.__qualname__ == f"{client.__name__}.{name}"
    assert method.__module__ == client.__module__
    assert "Run inference" in (method.__doc__ or "")
    parameters = [(p.name, p.kind, p.default) for p in inspect.signature(method).parameters.values()]
    assert parameters == PUBLISHED


def test_each_copy_says_what_its_client_returns():
    returns = {client.__name__: str(inspect.signature(client.infer_batch).return_annotation) for client in CLIENTS}
    # A coroutine function's return annotation is what awaiting it gives, as for ``async def``.
    assert "Awaitable" not in returns["AsyncioModelClient"] and "Dict" in returns["AsyncioModelClient"]
    assert inspect.iscoroutinefunction(AsyncioModelClient.infer_batch)
    assert not inspect.iscoroutinefunction(ModelClient.infer_batch)
    assert "Future" in returns["FuturesModelClient"]
    assert returns["DecoupledModelClient"] == "Responses"
    assert returns["AsyncioDecoupledModelClient"] == "AsyncResponses"


def test_a_subclass_of_a_client_keeps_its_clients_calls():
    class Mine(ModelClient):
        pass

    assert "infer_sample" not in Mine.__dict__ and Mine.infer_sample is ModelClient.infer_sample


def test_a_call_reaches_the_client_as_one_request_with_its_sequence_checked():
    seen = []

    class Recorder(InferCalls[int]):
        def _request(self, call: InferCall) -> int:
            seen.append(call)
            return len(seen)

    recorder = Recorder()
    assert recorder.infer_sample(1, 2, parameters={"p": 1}, sequence_id=7, sequence_start=True, x=3) == 1
    assert recorder.infer_batch(headers={"h": "v"}) == 2
    first, second = seen
    assert first.sample and first.inputs == (1, 2) and first.named_inputs == {"x": 3}
    assert first.parameters == {"p": 1} and first.sequence == {"sequence_id": 7, "sequence_start": True,
                                                                "sequence_end": False}
    assert not second.sample and second.headers == {"h": "v"} and second.sequence == {}
    with pytest.raises(Exception, match="sequence_start and sequence_end need a sequence_id"):
        recorder.infer_sample(sequence_end=True)
    assert len(seen) == 2  # refused before reaching the client


def test_an_awaited_call_raises_a_wrong_argument_where_it_is_awaited():
    import asyncio

    class Recorder(InferCalls[Awaitable[int]]):
        async def _request(self, call: InferCall) -> int:
            return 1

    pending = Recorder().infer_sample(sequence_end=True)  # nothing raised yet, as for ``async def``
    with pytest.raises(Exception, match="sequence_start and sequence_end need a sequence_id"):
        asyncio.run(pending)
    assert asyncio.run(Recorder().infer_batch()) == 1
