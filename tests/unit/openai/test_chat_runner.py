"""`ChatRunner`, the callable `bind_chat` binds: the user's pieces -> one decoupled response per step.

Driven here as pytriton's asynchronous worker drives it (an async generator over a list of
requests), on plain dicts of arrays: no process, no server.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time

import numpy as np
import pytest

from pytriton.decorators import batch
from pytriton.openai.binding import batched_function
from pytriton.openai.streams import ChatRunner


def _request(text: str, batched: bool = False, **params):
    shape = (1, 1) if batched else (1,)
    messages = json.dumps([{"role": "user", "content": text}]).encode()
    return {"messages": np.array([messages], dtype=object).reshape(shape),
            "params": np.array([json.dumps(params).encode()], dtype=object).reshape(shape)}


def _collect(runner, requests):
    async def run():
        steps = []
        async for step in runner(requests):
            steps.append([None if s is None else json.loads(s["piece"].reshape(-1)[0]) for s in step])
        return steps

    return asyncio.run(run())


def _answers(steps, count):
    return [[step[i] for step in steps if step[i] is not None] for i in range(count)]


def test_a_plain_generator_per_conversation_each_answer_ends_with_stop():
    def chat(messages, params):
        for word in messages[0]["content"].split():
            yield word + " "

    runner = ChatRunner("m", chat, None, batched=False)
    answers = _answers(_collect(runner, [_request("a b"), _request("c")]), 2)
    assert answers == [[{"content": "a "}, {"content": "b "}, {"finish_reason": "stop"}],
                       [{"content": "c "}, {"finish_reason": "stop"}]]


def test_an_async_generator_with_dict_pieces_and_its_own_finish_reason():
    async def chat(messages, params):
        yield {"content": "x", "usage": {"prompt_tokens": 2, "completion_tokens": 1}}
        yield {"finish_reason": "length"}
        yield "never sent"

    answers = _answers(_collect(ChatRunner("m", chat, None, batched=True), [_request("q", batched=True)]), 1)
    assert answers == [[{"content": "x", "usage": {"prompt_tokens": 2, "completion_tokens": 1}},
                        {"finish_reason": "length"}]]


def test_the_batch_form_gets_every_conversation_and_yields_a_list_per_step():
    seen = []

    @batch
    def chat(conversations, params):
        seen.append((len(conversations), [p["k"] for p in params]))
        yield ["a1", "b1"]
        yield [None, "b2"]

    under = batched_function(chat)
    assert under is not None
    answers = _answers(_collect(ChatRunner("m", chat, under, batched=True),
                                [_request("a", True, k=1), _request("b", True, k=2)]), 2)
    assert seen == [(2, [1, 2])]
    assert answers == [[{"content": "a1"}, {"finish_reason": "stop"}],
                       [{"content": "b1"}, {"content": "b2"}, {"finish_reason": "stop"}]]


def test_a_bad_piece_fails_the_call_naming_the_model():
    def chat(messages, params):
        yield 42

    with pytest.raises(ValueError, match="model 'tiny'.*42"):
        _collect(ChatRunner("tiny", chat, None, batched=False), [_request("q")])


def test_an_exception_of_the_callable_reaches_the_caller():
    def chat(messages, params):
        yield "ok"
        raise RuntimeError("the tokenizer broke")

    with pytest.raises(RuntimeError, match="the tokenizer broke"):
        _collect(ChatRunner("m", chat, None, batched=False), [_request("q")])


def test_closing_the_stream_closes_a_plain_generator_at_its_next_yield():
    closed = threading.Event()
    produced = []

    def chat(messages, params):
        try:
            for index in range(1000):
                produced.append(index)
                yield f"{index} "
                time.sleep(0.01)
        finally:
            closed.set()

    async def run():
        stream = ChatRunner("m", chat, None, batched=False)([_request("q")])
        await stream.__anext__()
        await stream.aclose()  # what the worker does for a cancelled request

    asyncio.run(run())
    assert closed.wait(2.0), "the generator was not closed"
    assert len(produced) < 50
