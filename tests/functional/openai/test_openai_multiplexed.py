"""A multiplexed chat model through the OpenAI-compatible front: ``model: "base:variant"``.

`bind_chat` with a ``@multiplexed`` chat function (an adapter per variant): the front sends
``base`` the variant in the request parameter, lists ``base:variant`` for the variants the model
knows, and answers a variant nobody has with OpenAI's 404 ``model_not_found``. A second model
without a list of variants shows the loader's refusal as that 404 too.
"""

from __future__ import annotations

import json
import threading
import urllib.request

import pytest
from support import free_ports, server_config

from pytriton.decorators import multiplexed
from pytriton.triton import Triton

openai = pytest.importorskip("openai")

pytestmark = pytest.mark.functional

LOADS: list = []
LOCK = threading.Lock()


class Adapter:
    """What a loader returns: here a greeting per language."""

    GREETINGS = {"en": "hello", "de": "hallo", "fr": "bonjour"}

    def __init__(self, language: str) -> None:
        if language not in self.GREETINGS:
            raise KeyError(language)
        with LOCK:
            LOADS.append(language)
        self.greeting = self.GREETINGS[language]


@multiplexed(Adapter, max_loaded=2, variants=["en", "de", "fr"])
def chat(messages, params, model: Adapter):
    yield f"{model.greeting}, "
    yield str(messages[-1]["content"])


@multiplexed(Adapter, max_loaded=2)
async def open_chat(messages, params, model: Adapter):
    yield model.greeting


@pytest.fixture(scope="module")
def server():
    (openai_port,) = free_ports(1)
    config = server_config(openai_port=openai_port)
    with Triton(config=config) as triton:
        triton.bind_chat(model_name="greeter", infer_func=chat)
        triton.bind_chat(model_name="open-greeter", infer_func=open_chat)
        triton.run()
        yield config


def _client(config):
    return openai.OpenAI(base_url=f"http://127.0.0.1:{config.openai_port}/v1", api_key="none", max_retries=0)


def test_a_variant_answers_with_its_own_adapter(server):
    LOADS.clear()
    client = _client(server)
    for language, greeting in (("de", "hallo"), ("fr", "bonjour"), ("de", "hallo")):
        answer = client.chat.completions.create(model=f"greeter:{language}",
                                                messages=[{"role": "user", "content": "Ada"}])
        assert answer.choices[0].message.content == f"{greeting}, Ada"
        assert answer.model == f"greeter:{language}"
    streamed = client.chat.completions.create(model="open-greeter:en", messages=[{"role": "user", "content": "x"}],
                                              stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in streamed if c.choices) == "hello"
    assert LOADS == ["de", "fr", "en"]  # "de" once: held for its second request


def test_the_model_list_names_the_known_variants(server):
    with urllib.request.urlopen(f"http://127.0.0.1:{server.openai_port}/v1/models", timeout=30) as answer:
        names = [entry["id"] for entry in json.loads(answer.read())["data"]]
    assert {"greeter", "greeter:en", "greeter:de", "greeter:fr", "open-greeter"} <= set(names)
    assert not [name for name in names if name.startswith("open-greeter:")]  # its loader decides: none listed
    assert _client(server).models.retrieve("greeter:fr").id == "greeter:fr"


def test_an_unknown_variant_is_a_404_naming_it(server):
    client = _client(server)
    with pytest.raises(openai.NotFoundError) as listed:
        client.chat.completions.create(model="greeter:xx", messages=[{"role": "user", "content": "x"}])
    assert "The model 'greeter:xx' does not exist: model 'greeter' serves the variants de, en, fr" in str(listed.value)
    with pytest.raises(openai.NotFoundError) as refused:  # no list: the loader refuses it in the worker
        client.chat.completions.create(model="open-greeter:xx", messages=[{"role": "user", "content": "x"}])
    assert "unknown variant 'xx'" in str(refused.value)
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="nobody:en", messages=[{"role": "user", "content": "x"}])
