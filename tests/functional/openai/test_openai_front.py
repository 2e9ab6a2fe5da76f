"""The OpenAI-compatible API against the real tritonserver, with the official `openai` client.

One server serves the module: a chat model (plain generator), an async one, a `@batch` one, an
embeddings model with dynamic batching, an embeddings model bound with plain `bind` (the
convention alone makes it served), and a model outside the convention. The server has an API
key, so every client sends it; one test sends a wrong one.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import urllib.request

import numpy as np
import pytest
from support import free_ports, server_config, wait_until

from pytriton.decorators import batch
from pytriton.model_config import DynamicBatcher, ModelConfig, Tensor
from pytriton.server.security import TritonSecurityConfig
from pytriton.triton import Triton

openai = pytest.importorskip("openai")

pytestmark = pytest.mark.functional

API_KEY = "test-key-31"
closed_at: dict = {}
"""tag -> when the chat callable's generator was closed (`time.monotonic`), for the disconnect test."""
embed_batches: list = []


def chat(messages, params):
    """Echoes the last message word by word; ``params`` may ask for a delay, a count, a failure."""
    tag = params.get("tag")
    try:
        if "count" in params:
            words = [f"{tag}-{k} " for k in range(params["count"])]
        else:
            words = [word + " " for word in str(messages[-1]["content"]).split()]
        for index, word in enumerate(words):
            if params.get("fail_after") == index:
                raise ValueError(f"the tokenizer broke at word {index}")
            if params.get("delay"):
                time.sleep(params["delay"])
            yield word
        if params.get("tool"):
            yield {"tool_calls": [{"id": "call_1", "type": "function",
                                   "function": {"name": "lookup", "arguments": '{"q": "x"}'}}]}
    finally:
        if tag is not None:
            closed_at[tag] = time.monotonic()


async def async_chat(messages, params):
    await asyncio.sleep(0.01)
    yield {"content": "async ", "usage": {"prompt_tokens": 7, "completion_tokens": 2}}
    yield "answer"


@batch
def batch_chat(conversations, params):
    size = len(conversations)
    yield [f"of {size}" for _ in conversations]


def embed(texts):
    embed_batches.append(len(texts))
    time.sleep(0.05)
    return np.array([[len(text), 1.0, 2.0] for text in texts], dtype=np.float32)


def plain_embed(requests):
    """An embeddings model written with plain `bind`: the tensor convention is all it takes."""
    return [{"embedding": np.full((len(r["input"]), 2), 7.0, dtype=np.float32)} for r in requests]


@pytest.fixture(scope="module")
def served():
    """The module's `Triton` and its config."""
    (openai_port,) = free_ports(1)
    config = server_config(openai_port=openai_port)
    with Triton(config=config, security_config=TritonSecurityConfig(openai_api_key=API_KEY)) as triton:
        triton.bind_chat(model_name="tiny-chat", infer_func=chat)
        triton.bind_chat(model_name="async-chat", infer_func=async_chat)
        gather = DynamicBatcher(max_queue_delay_microseconds=200_000)
        triton.bind_chat(model_name="batch-chat", infer_func=batch_chat,
                         config=ModelConfig(max_batch_size=8, batcher=gather))
        triton.bind_embeddings(model_name="tiny-embed", infer_func=embed,
                               config=ModelConfig(max_batch_size=4,
                                                  batcher=DynamicBatcher(max_queue_delay_microseconds=100_000)))
        triton.bind(model_name="plain-embed", infer_func=plain_embed,
                    inputs=[Tensor(name="input", dtype=bytes, shape=(1,))],
                    outputs=[Tensor(name="embedding", dtype=np.float32, shape=(-1,))],
                    config=ModelConfig(max_batch_size=8))
        triton.bind(model_name="Scale", infer_func=lambda requests: [{"y": r["x"]} for r in requests],
                    inputs=[Tensor(name="x", dtype=np.float32, shape=(-1,))],
                    outputs=[Tensor(name="y", dtype=np.float32, shape=(-1,))])
        triton.run()
        yield triton, config


@pytest.fixture(scope="module")
def server(served):
    return served[1]


def _client(config, key=API_KEY):
    return openai.OpenAI(base_url=f"http://127.0.0.1:{config.openai_port}/v1", api_key=key, max_retries=0)


def _async_client(config):
    return openai.AsyncOpenAI(base_url=f"http://127.0.0.1:{config.openai_port}/v1", api_key=API_KEY, max_retries=0,
                              timeout=60)


def test_chat_without_streaming(server):
    answer = _client(server).chat.completions.create(
        model="tiny-chat", messages=[{"role": "user", "content": "hello big world"}])
    assert answer.object == "chat.completion" and answer.model == "tiny-chat"
    assert answer.choices[0].message.role == "assistant"
    assert answer.choices[0].message.content == "hello big world "
    assert answer.choices[0].finish_reason == "stop"
    # Usage without the callable's counts: pieces (3 words), prompt unknown.
    assert (answer.usage.prompt_tokens, answer.usage.completion_tokens, answer.usage.total_tokens) == (0, 3, 3)


def test_chat_streaming_with_usage(server):
    stream = _client(server).chat.completions.create(
        model="tiny-chat", messages=[{"role": "user", "content": "one two three"}], stream=True,
        stream_options={"include_usage": True})
    chunks = list(stream)
    contents = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert contents == ["one ", "two ", "three "]
    assert chunks[0].choices[0].delta.role == "assistant"
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["stop"]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 3


def test_an_async_generator_its_usage_counts_and_n_choices(server):
    answer = _client(server).chat.completions.create(
        model="async-chat", messages=[{"role": "user", "content": "x"}], n=3)
    assert [c.message.content for c in answer.choices] == ["async answer"] * 3
    assert [c.index for c in answer.choices] == [0, 1, 2]
    # The callable's counts: the prompt once, the completions of all three answers.
    assert (answer.usage.prompt_tokens, answer.usage.completion_tokens) == (7, 6)


def test_stop_sequences_cut_the_answer_and_the_generator(server):
    client = _client(server)
    answer = client.chat.completions.create(
        model="tiny-chat", messages=[{"role": "user", "content": "alpha beta STOP gamma delta"}], stop=["STOP"],
        extra_body={"tag": "stopped"})
    assert answer.choices[0].message.content == "alpha beta " and answer.choices[0].finish_reason == "stop"
    streamed = client.chat.completions.create(
        model="tiny-chat", messages=[{"role": "user", "content": "alpha beta STOP gamma"}], stop="ST", stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in streamed if c.choices) == "alpha beta "


def test_tool_calls_from_dict_pieces(server):
    answer = _client(server).chat.completions.create(
        model="tiny-chat", messages=[{"role": "user", "content": "look"}], extra_body={"tool": True})
    call = answer.choices[0].message.tool_calls[0]
    assert (call.id, call.function.name, json.loads(call.function.arguments)) == ("call_1", "lookup", {"q": "x"})
    assert answer.choices[0].finish_reason == "tool_calls"


def test_completions_streaming_and_not(server):
    client = _client(server)
    answer = client.completions.create(model="tiny-chat", prompt="say this")
    assert answer.object == "text_completion" and answer.choices[0].text == "say this "
    two = client.completions.create(model="tiny-chat", prompt=["a b", "c"])
    assert [c.text for c in two.choices] == ["a b ", "c "]
    streamed = client.completions.create(model="tiny-chat", prompt="x y", stream=True)
    assert "".join(c.choices[0].text for c in streamed if c.choices) == "x y "


def test_the_batch_form_serves_several_conversations_in_one_call(server):
    async def four():
        async with _async_client(server) as client:
            return await asyncio.gather(*(client.chat.completions.create(
                model="batch-chat", messages=[{"role": "user", "content": str(i)}]) for i in range(4)))

    answers = asyncio.run(four())
    sizes = [int(a.choices[0].message.content.split()[-1]) for a in answers]
    assert max(sizes) > 1, f"every conversation came alone: {sizes}"


def test_embeddings_of_a_list_floats_and_base64_split_beyond_max_batch_size(server):
    client = _client(server)
    texts = ["a", "bb", "ccc", "dddd", "eeeee", "ffffff"]  # 6 > max_batch_size 4: two Triton requests
    answer = client.embeddings.create(model="tiny-embed", input=texts)
    assert [d.index for d in answer.data] == list(range(6))
    assert [d.embedding for d in answer.data] == [[float(len(t)), 1.0, 2.0] for t in texts]
    encoded = client.embeddings.create(model="tiny-embed", input="abc", encoding_format="base64")
    raw = encoded.data[0].embedding
    assert list(np.frombuffer(__import__("base64").b64decode(raw), dtype="<f4")) == [3.0, 1.0, 2.0]


def test_concurrent_embeddings_requests_reach_the_callable_as_one_triton_batch(server):
    embed_batches.clear()

    async def eight():
        async with _async_client(server) as client:
            return await asyncio.gather(*(client.embeddings.create(model="tiny-embed", input=f"t{i}")
                                          for i in range(8)))

    answers = asyncio.run(eight())
    assert all(len(a.data) == 1 for a in answers)
    assert sum(embed_batches) == 8 and max(embed_batches) > 1, embed_batches


def test_the_models_list_has_every_model_of_the_convention_and_only_those(server):
    client = _client(server)
    names = sorted(model.id for model in client.models.list())
    assert names == ["async-chat", "batch-chat", "plain-embed", "tiny-chat", "tiny-embed"]
    assert client.models.retrieve("tiny-embed").id == "tiny-embed"
    served = client.embeddings.create(model="plain-embed", input=["x", "y"])
    assert [d.embedding for d in served.data] == [[7.0, 7.0], [7.0, 7.0]]


def test_an_unknown_model_is_404_naming_it(server):
    with pytest.raises(openai.NotFoundError) as caught:
        _client(server).chat.completions.create(model="no-such", messages=[{"role": "user", "content": "x"}])
    assert "no-such" in str(caught.value) and caught.value.code == "model_not_found"
    with pytest.raises(openai.NotFoundError):
        _client(server).chat.completions.create(model="Scale", messages=[{"role": "user", "content": "x"}])


def test_a_bad_request_is_400_naming_the_model_field_and_value(server):
    client = _client(server)
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model="tiny-chat", messages=[{"role": "user", "content": "x"}], n=0)
    assert caught.value.status_code == 400 and caught.value.param == "n"
    assert "model 'tiny-chat'" in caught.value.message and "'n' is 0" in caught.value.message
    with pytest.raises(openai.BadRequestError, match="does not take 'dimensions'"):
        client.embeddings.create(model="tiny-embed", input="x", dimensions=2)
    with pytest.raises(openai.BadRequestError, match="model 'tiny-chat' is a chat model"):
        client.embeddings.create(model="tiny-chat", input="x")
    with pytest.raises(openai.BadRequestError, match="model 'tiny-embed' is an embeddings model"):
        client.chat.completions.create(model="tiny-embed", messages=[{"role": "user", "content": "x"}])


def test_a_message_without_content_is_400_naming_the_message_and_the_field(server):
    # Before: the callable read messages[-1]["content"] and the client got a 500 whose message said
    # "model 'tiny-chat' failed: Model 'tiny-chat' failed: KeyError: 'content'".
    with pytest.raises(openai.BadRequestError) as caught:
        _client(server).chat.completions.create(
            model="tiny-chat", messages=[{"role": "system", "content": "be brief"}, {"role": "user"}])
    assert caught.value.param == "messages[1].content"
    assert caught.value.body["message"] == ("model 'tiny-chat': field 'messages[1].content' is missing; expected a "
                                            "string or a list of content parts in a 'user' message")


def test_a_callable_that_raises_is_500_with_its_message(server):
    client = _client(server)
    with pytest.raises(openai.InternalServerError) as caught:
        client.chat.completions.create(model="tiny-chat", messages=[{"role": "user", "content": "a b c"}],
                                       extra_body={"fail_after": 1})
    # The model is named once: the worker's own "Model 'tiny-chat' failed: " is not repeated.
    assert caught.value.body["message"] == "model 'tiny-chat' failed: ValueError: the tokenizer broke at word 1"
    stream = client.chat.completions.create(model="tiny-chat", messages=[{"role": "user", "content": "a b c"}],
                                            stream=True, extra_body={"fail_after": 1})
    with pytest.raises(openai.APIError, match="the tokenizer broke at word 1"):
        for _ in stream:
            pass


def test_the_api_key_wrong_and_right_and_health_without_it(server):
    with pytest.raises(openai.AuthenticationError) as caught:
        _client(server, key="wrong").models.list()
    assert caught.value.status_code == 401 and caught.value.code == "invalid_api_key"
    assert [m.id for m in _client(server).models.list()]
    with urllib.request.urlopen(f"http://127.0.0.1:{server.openai_port}/health", timeout=5) as answer:
        assert answer.status == 200 and json.loads(answer.read()) == {"status": "ok"}


def test_a_client_that_disconnects_cancels_the_request(server):
    client = _client(server)
    stream = client.chat.completions.create(
        model="tiny-chat", messages=[{"role": "user", "content": "x"}], stream=True,
        extra_body={"tag": "gone", "count": 1000, "delay": 0.02})
    first = [next(iter(stream)) for _ in range(3)]
    assert first[-1].choices[0].delta.content == "gone-1 "
    left = time.monotonic()
    stream.close()
    assert wait_until(lambda: "gone" in closed_at, 10.0), "the generator was never closed"
    took = closed_at["gone"] - left
    print(f"\ndisconnect -> generator closed in {took * 1000:.0f} ms")
    assert took < 3.0


def test_64_concurrent_streams_each_receive_exactly_their_own_pieces(server):
    async def one(client, tag):
        stream = await client.chat.completions.create(
            model="tiny-chat", messages=[{"role": "user", "content": "x"}], stream=True,
            extra_body={"tag": f"s{tag}", "count": 10, "delay": 0.01})
        return [chunk.choices[0].delta.content async for chunk in stream
                if chunk.choices and chunk.choices[0].delta.content]

    async def all_of_them():
        async with _async_client(server) as client:
            return await asyncio.gather(*(one(client, tag) for tag in range(64)))

    started = time.monotonic()
    results = asyncio.run(all_of_them())
    took = time.monotonic() - started
    print(f"\n64 streams of 10 pieces (10 ms apart) in {took:.2f} s")
    for tag, pieces in enumerate(results):
        assert pieces == [f"s{tag}-{k} " for k in range(10)], (tag, pieces)


def test_requests_count_in_tritons_and_the_fronts_metrics(server):
    _client(server).chat.completions.create(model="tiny-chat", messages=[{"role": "user", "content": "m e t"}])

    def scrape():
        text = urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=5).read().decode()
        return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
                for line in text.splitlines() if line and not line.startswith("#")}

    def counted():
        found = scrape()
        ttft = [v for k, v in found.items()
                if k.startswith("pytriton_openai_time_to_first_token_seconds_count") and 'model="tiny-chat"' in k]
        tps = [v for k, v in found.items()
               if k.startswith("pytriton_openai_tokens_per_second_count") and 'model="tiny-chat"' in k]
        success = [v for k, v in found.items()
                   if k.startswith("nv_inference_request_success") and 'model="tiny-chat"' in k]
        return (ttft, tps, success) if ttft and ttft[0] >= 1 and tps and success and success[0] >= 1 else None

    found = wait_until(counted, 15.0, 0.25)
    assert found, "the front's histograms or Triton's counters did not show the requests"


def test_models_bound_by_another_process_through_remote_triton_are_served(served):
    from pytriton.triton import RemoteTriton

    triton, config = served
    url = f"http://127.0.0.1:{config.http_port}"
    with RemoteTriton(url, access_token=triton.get_access_token()) as remote:
        remote.bind_chat(model_name="remote-chat", infer_func=async_chat)
        remote.bind_embeddings(model_name="remote-embed", infer_func=embed)
        client = _client(config)
        assert {"remote-chat", "remote-embed"} <= {model.id for model in client.models.list()}
        client.chat.completions.create(model="remote-chat", messages=[{"role": "user", "content": "x"}])
        answer = client.chat.completions.create(model="remote-chat", messages=[{"role": "user", "content": "x"}])
        assert answer.choices[0].message.content == "async answer"
        assert client.embeddings.create(model="remote-embed", input="abcd").data[0].embedding == [4.0, 1.0, 2.0]
    # Unbound when the RemoteTriton stopped: 404 (the front knew the model: Triton's refusal says it
    # is gone), and gone from the list.
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="remote-chat", messages=[{"role": "user", "content": "x"}])
    with pytest.raises(openai.NotFoundError):
        client.embeddings.create(model="remote-embed", input="x")
    assert "remote-chat" not in {model.id for model in client.models.list()}


def test_a_stopping_server_answers_503(server):
    # A second Triton, stopped while the test holds a client: new requests are refused as retryable.
    (port,) = free_ports(1)
    config = server_config(openai_port=port)
    triton = Triton(config=config)
    try:
        triton.bind_chat(model_name="slow-chat", infer_func=chat)
        triton.run()
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="any", max_retries=0)
        results: dict = {}

        def long_stream():
            stream = client.chat.completions.create(
                model="slow-chat", messages=[{"role": "user", "content": "x"}], stream=True,
                extra_body={"count": 8, "delay": 0.1})
            results["pieces"] = [c.choices[0].delta.content for c in stream if c.choices and c.choices[0].delta.content]

        reader = threading.Thread(target=long_stream)
        reader.start()
        assert wait_until(lambda: "slow-chat" in str(client.models.list()), 5.0)
        time.sleep(0.2)
        stopper = threading.Thread(target=triton.stop)
        stopper.start()
        refused = wait_until(lambda: _status(port) == 503, 5.0, 0.02)
        reader.join(30)
        stopper.join(60)
        assert refused, "no 503 while stopping"
        assert results.get("pieces") == [f"None-{k} " for k in range(8)], results  # the stream in flight ended whole
    finally:
        triton.stop()


def _status(port):
    import urllib.error

    request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/models")
    try:
        with urllib.request.urlopen(request, timeout=2) as answer:
            return answer.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return None
