"""`bind_chat` with a ``@continuous`` step function: conversations join and leave a running step, through
the OpenAI-compatible front, with the official `openai` client."""

from __future__ import annotations

import threading
import time

import pytest
from support import free_ports, server_config

from pytriton.decorators import continuous
from pytriton.model_config import ModelConfig
from pytriton.triton import Triton

openai = pytest.importorskip("openai")

pytestmark = pytest.mark.functional


class Words:
    """Answers with the words of the last message, one per step, every conversation of the step at once."""

    def __init__(self) -> None:
        self.log: list = []  # the conversations of each step, by their first word

    def __call__(self, streams):
        self.log.append([stream.inputs["messages"][-1]["content"].split()[0] for stream in streams])
        time.sleep(0.01)
        pieces = []
        for stream in streams:
            if stream.state is None:
                stream.state = stream.inputs["messages"][-1]["content"].split()
                if stream.inputs["params"].get("tool"):
                    stream.state = []
            if not stream.state:  # asked for a tool: one call, and the answer ends
                pieces.append({"tool_calls": [{"id": "call_1", "type": "function",
                                               "function": {"name": "lookup", "arguments": "{}"}}]})
                stream.finish()
                continue
            pieces.append(stream.state[stream.steps] + " ")
            if stream.steps + 1 == len(stream.state):
                stream.finish()
        return pieces


@pytest.fixture(scope="module")
def served():
    (openai_port,) = free_ports(1)
    config = server_config(openai_port=openai_port)
    words = Words()
    with Triton(config=config) as triton:
        triton.bind_chat(model_name="steps-chat", infer_func=continuous(words),
                         config=ModelConfig(batching=False, max_batch_size=8))
        triton.run()
        yield config, words


def _client(config):
    return openai.OpenAI(base_url=f"http://127.0.0.1:{config.openai_port}/v1", api_key="none", max_retries=0)


def test_a_continuous_chat_answers_streamed_and_not(served):
    config, _ = served
    answer = _client(config).chat.completions.create(
        model="steps-chat", messages=[{"role": "user", "content": "hello big world"}])
    assert answer.choices[0].message.content == "hello big world " and answer.choices[0].finish_reason == "stop"
    chunks = list(_client(config).chat.completions.create(
        model="steps-chat", messages=[{"role": "user", "content": "one two three"}], stream=True))
    assert [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content] == [
        "one ", "two ", "three "]
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["stop"]


def test_conversations_join_a_running_step_and_a_short_one_leaves_first(served):
    config, words = served
    long_text = "long " + " ".join(f"w{k}" for k in range(60))
    results: dict = {}

    def ask(name, text, delay_s):
        time.sleep(delay_s)
        chunks = _client(config).chat.completions.create(
            model="steps-chat", messages=[{"role": "user", "content": text}], stream=True)
        results[name] = ("".join(c.choices[0].delta.content or "" for c in chunks if c.choices), time.monotonic())

    threads = [threading.Thread(target=ask, args=("long", long_text, 0.0)),
               threading.Thread(target=ask, args=("short", "short a b", 0.2))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert results["long"][0] == long_text + " " and results["short"][0] == "short a b "
    assert results["short"][1] < results["long"][1]  # it left while the long answer went on
    shared = [ids for ids in words.log if "long" in ids and "short" in ids]
    assert len(shared) == 3, words.log  # the short conversation's 3 steps were steps of the long one's


def test_a_continuous_chat_can_answer_with_a_tool_call(served):
    config, _ = served
    answer = _client(config).chat.completions.create(
        model="steps-chat", messages=[{"role": "user", "content": "weather please"}],
        extra_body={"tool": True})
    assert answer.choices[0].finish_reason == "tool_calls"
    assert answer.choices[0].message.tool_calls[0].function.name == "lookup"
