"""The OpenAI front's pure parts: the convention, request checks, answers, stop sequences, errors."""

from __future__ import annotations

import json

import pytest

from pytriton.openai.answers import Choice, Events, StopScanner, answer_id, chunk, full_answer, usage
from pytriton.openai.convention import (
    CHAT,
    EMBEDDINGS,
    bytes_elements,
    bytes_tensor,
    check_piece,
    decode_piece,
    served_model,
)
from pytriton.openai.errors import OpenAIError, wrong_kind
from pytriton.openai.link import model_failed
from pytriton.openai.measures import answer_figures
from pytriton.openai.requests import chat_request, completion_request, embeddings_request

HI = [{"role": "user", "content": "hi"}]


def _tensor(name, data_type, dims):
    return {"name": name, "data_type": data_type, "dims": [str(d) for d in dims]}


CHAT_CONFIG = {
    "name": "tiny-chat", "max_batch_size": 0, "model_transaction_policy": {"decoupled": True},
    "input": [_tensor("messages", "TYPE_STRING", [1]), _tensor("params", "TYPE_STRING", [1])],
    "output": [_tensor("piece", "TYPE_STRING", [1])],
}
EMBED_CONFIG = {
    "name": "tiny-embed", "max_batch_size": 8,
    "input": [_tensor("input", "TYPE_STRING", [1])], "output": [_tensor("embedding", "TYPE_FP16", [-1])],
}


def test_the_convention_recognises_chat_and_embeddings_models_and_nothing_else():
    chat = served_model(CHAT_CONFIG)
    assert (chat.name, chat.kind, chat.batched) == ("tiny-chat", CHAT, False)
    embed = served_model(EMBED_CONFIG)
    assert (embed.kind, embed.max_batch_size, embed.embedding_dtype, embed.dimensions) == (EMBEDDINGS, 8, "<f2", False)
    with_dims = dict(EMBED_CONFIG, input=[*EMBED_CONFIG["input"], _tensor("dimensions", "TYPE_INT32", [1])])
    assert served_model(with_dims).dimensions is True
    assert served_model(dict(CHAT_CONFIG, model_transaction_policy={})) is None  # not decoupled
    assert served_model(dict(EMBED_CONFIG, max_batch_size=0)) is None  # embeddings must batch
    assert served_model(dict(CHAT_CONFIG, input=[*CHAT_CONFIG["input"], _tensor("x", "TYPE_FP32", [1])])) is None
    assert served_model({"name": "Scale", "input": [_tensor("values", "TYPE_FP32", [-1])]}) is None


def test_bytes_tensors_round_trip_and_a_cut_buffer_is_refused():
    items = [b"", b"a", "h\u00e9llo".encode()]
    assert bytes_elements(bytes_tensor(items)) == items
    with pytest.raises(ValueError, match="ends inside"):
        bytes_elements(bytes_tensor([b"abcdef"])[:-2])


def test_pieces_are_checked_with_the_model_named():
    assert check_piece("m", "hi") == {"content": "hi"}
    assert decode_piece("m", b'{"finish_reason": "length"}') == {"finish_reason": "length"}
    with pytest.raises(ValueError, match="model 'm'.*unknown key.*'text'"):
        check_piece("m", {"text": "x"})
    with pytest.raises(ValueError, match="model 'm'.*'content' is 3; expected a str"):
        check_piece("m", {"content": 3})
    with pytest.raises(ValueError, match="model 'm' sent a piece that is not JSON"):
        decode_piece("m", b"plain")


@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        ({"messages": HI}, "model", "missing"),
        ({"model": "m"}, "messages", "missing"),
        ({"model": "m", "messages": []}, "messages", "non-empty list"),
        ({"model": "m", "messages": [{"content": "x"}]}, "messages[0]", "'role'"),
        ({"model": "m", "messages": [{"role": "user"}]}, "messages[0].content", "missing; expected a string"),
        ({"model": "m", "messages": [*HI, {"role": "system", "content": None}]}, "messages[1].content",
         "is null; expected a string or a list of content parts in a 'system' message"),
        ({"model": "m", "messages": [{"role": "user", "content": 3}]}, "messages[0].content", "is 3"),
        ({"model": "m", "messages": [*HI, {"role": "assistant"}]}, "messages[1].content", "or 'tool_calls'"),
        ({"model": "m", "messages": [*HI, {"role": "tool", "content": "x"}]}, "messages[1].tool_call_id",
         "the id of the tool call"),
        ({"model": "m", "messages": HI, "n": 0}, "n", "from 1 to 128"),
        ({"model": "m", "messages": HI, "stop": ["a", 1]}, "stop", "list of up to 4"),
        ({"model": "m", "messages": HI, "stream": "yes"}, "stream", "true or false"),
        ({"model": "m", "messages": HI, "stream_options": {"include_usage": True}}, "stream_options",
         "unless 'stream' is true"),
        ({"model": "m", "messages": HI, "temperature": "hot"}, "temperature", "a number"),
        ({"model": "m", "messages": HI, "max_tokens": 0}, "max_tokens", "an integer >= 1"),
    ],
)
def test_a_bad_chat_request_names_the_field_its_value_and_what_is_expected(body, field, words):
    with pytest.raises(OpenAIError) as caught:
        chat_request(body)
    error = caught.value
    assert error.status == 400 and error.param == field and words in error.message, error.message
    assert error.body()["error"]["type"] == "invalid_request_error"
    if "model" in body:
        assert "model 'm'" in error.message


def test_messages_that_call_tools_and_answer_them_pass():
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    messages = [*HI, {"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "c1", "content": "42"},
                {"role": "user", "content": [{"type": "text", "text": "and?"}]}]
    assert chat_request({"model": "m", "messages": messages}).conversations == [messages]


def test_a_chat_request_passes_every_other_field_to_the_callable():
    asked = chat_request({"model": "m", "messages": [{"role": "user", "content": "Hi"}], "stream": True,
                          "stream_options": {"include_usage": True}, "n": 2, "stop": "END", "seed": 7,
                          "my_extension": {"x": 1}})
    assert asked.stream and asked.include_usage and asked.n == 2 and asked.stop == ("END",)
    assert asked.params == {"n": 2, "stop": "END", "seed": 7, "my_extension": {"x": 1}}


def test_a_completion_becomes_one_user_message_per_prompt_with_the_prompt_in_params():
    asked = completion_request({"model": "m", "prompt": ["a", "b"], "max_tokens": 5})
    assert asked.conversations == [[{"role": "user", "content": "a"}], [{"role": "user", "content": "b"}]]
    assert asked.params == {"prompt": ["a", "b"], "max_tokens": 5}
    with pytest.raises(OpenAIError, match="token arrays are not served"):
        completion_request({"model": "m", "prompt": [1, 2]})


def test_embeddings_requests_take_a_string_or_a_list_and_check_the_encoding():
    assert embeddings_request({"model": "e", "input": "x"}).texts == ["x"]
    assert embeddings_request({"model": "e", "input": ["x", "y"], "encoding_format": "base64"}).base64
    with pytest.raises(OpenAIError, match="'encoding_format' is \"int8\"; expected 'float' or 'base64'"):
        embeddings_request({"model": "e", "input": "x", "encoding_format": "int8"})
    with pytest.raises(OpenAIError, match="request body is list"):
        embeddings_request(["x"])


@pytest.mark.parametrize(
    ("pieces", "stops", "streamed", "stopped"),
    [
        (["Hello ", "wor", "ld END tail"], ["END"], ["Hello ", "wor", "ld "], True),
        (["a", "E", "N", "x"], ["END"], ["a", "", "", "ENx"], False),  # a false start is released
        (["one\n", "\ntwo"], ["\n\n"], ["one", ""], True),
        (["abc"], [], ["abc"], False),
    ],
)
def test_stop_sequences_cut_the_text_and_never_stream_a_part_of_one(pieces, stops, streamed, stopped):
    scanner = StopScanner(stops)
    out, met = [], False
    for piece in pieces:
        text, met = scanner.feed(piece)
        out.append(text)
        if met:
            break
    assert out == streamed and met is stopped


def test_a_choice_applies_stop_sequences_counts_pieces_and_takes_the_callables_usage():
    choice = Choice(0, ["STOP"])
    deltas = [d for p in ({"content": "a"}, {"content": "bST"}, {"content": "OP c"}) for d in choice.feed(p)]
    assert deltas == [{"content": "a"}, {"content": "b"}] and choice.finish_reason == "stop"
    assert choice.text == "ab" and choice.completion_tokens() == 3 and choice.prompt_tokens() == 0
    assert choice.feed({"content": "late"}) == []  # nothing after the end
    counted = Choice(1, [])
    counted.feed({"content": "x", "usage": {"prompt_tokens": 4, "completion_tokens": 9}})
    counted.feed({"finish_reason": "length"})
    assert counted.finish_reason == "length"
    assert usage([choice, counted], n=2) == {"prompt_tokens": 4, "completion_tokens": 12, "total_tokens": 16}


def test_tool_calls_are_numbered_in_stream_deltas_and_end_with_tool_calls():
    choice = Choice(0, [])
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    assert choice.feed({"tool_calls": [call]}) == [{"tool_calls": [{"index": 0, **call}]}]
    choice.finish()
    answer = full_answer("chat", "id", 1, "m", [choice], 1)
    message = answer["choices"][0]["message"]
    assert message == {"role": "assistant", "content": None, "tool_calls": [call]}
    assert answer["choices"][0]["finish_reason"] == "tool_calls"


def test_chunks_have_openais_shape():
    assert chunk("chat", "i", 5, "m", 1, {"content": "x"}) == {
        "id": "i", "object": "chat.completion.chunk", "created": 5, "model": "m",
        "choices": [{"index": 1, "delta": {"content": "x"}, "finish_reason": None, "logprobs": None}]}
    text = chunk("text", "i", 5, "m", 0, {}, "stop")
    assert text["object"] == "text_completion" and text["choices"][0] == {
        "index": 0, "text": "", "finish_reason": "stop", "logprobs": None}


def test_events_built_from_parts_are_the_chunks_as_json():
    for kind in ("chat", "text"):
        events = Events(kind, "cmpl-1", 5, 'a "quoted" m\u00f6del')
        for delta in ({"content": 'h\u00e9 "x"\n'}, {"content": ""}, {"tool_calls": [{"index": 0}]}, {}):
            sent = events.delta(2, delta)
            assert sent.startswith(b"data: ") and sent.endswith(b"\n\n")
            assert json.loads(sent[6:]) == chunk(kind, "cmpl-1", 5, 'a "quoted" m\u00f6del', 2, delta)
        assert json.loads(events.delta(0, {}, "stop")[6:])["choices"][0]["finish_reason"] == "stop"
    assert len({answer_id("chat") for _ in range(1000)}) == 1000


def test_a_wrong_kind_of_model_is_said_in_english():
    assert "is an embeddings model" in wrong_kind("e", "embeddings", "/v1/chat/completions").message
    assert "is a chat model" in wrong_kind("c", "chat", "/v1/embeddings").message


@pytest.mark.parametrize(
    ("message", "said"),
    [
        ("Model 'tiny-chat' failed: KeyError: 'content'", "model 'tiny-chat' failed: KeyError: 'content'"),
        ("Model 'tiny-chat': the server is stopping; the stream was cut short",
         "model 'tiny-chat' failed: the server is stopping; the stream was cut short"),
        ("out of memory", "model 'tiny-chat' failed: out of memory"),
        ("Model 'other' failed: x", "model 'tiny-chat' failed: Model 'other' failed: x"),
    ],
)
def test_a_failure_names_the_model_once(message, said):
    assert model_failed("tiny-chat", message).message == said


def test_an_answers_figures_for_the_histograms():
    choice = Choice(0, ())
    assert answer_figures(choice, 1.0, 2.0) is None  # no piece: nothing to measure
    choice.feed({"content": "a"})
    choice.first_at = 1.5
    choice.feed({"content": "b", "usage": {"completion_tokens": 11}})
    assert answer_figures(choice, 1.0, 2.5) == (0.5, 10.0)  # 10 tokens after the first, in 1 s


@pytest.mark.parametrize("batched", [False, True])
def test_a_chat_request_assembled_from_bytes_is_the_message_triton_reads(batched):
    from tritonclient.grpc import service_pb2

    from pytriton.openai.link import chat_request as chat_request_bytes
    from pytriton.openai.link import chat_request_head

    messages = [{"role": "user", "content": "h\u00e9llo " * 40}]  # > 127 bytes: a varint of two bytes
    params = {"max_tokens": 3}
    sent = service_pb2.ModelInferRequest.FromString(
        chat_request_bytes(chat_request_head("tiny-chat", batched), messages, params))
    assert sent.model_name == "tiny-chat"
    assert [(i.name, i.datatype, list(i.shape)) for i in sent.inputs] == [
        ("messages", "BYTES", [1, 1] if batched else [1]), ("params", "BYTES", [1, 1] if batched else [1])]
    assert sent.parameters["triton_enable_empty_final_response"].bool_param is True
    assert [json.loads(bytes_elements(raw)[0]) for raw in sent.raw_input_contents] == [messages, params]


def test_errors_have_openais_shape():
    error = OpenAIError(404, "no such model", param="model", code="model_not_found")
    assert json.loads(error.text()) == {"error": {"message": "no such model", "type": "invalid_request_error",
                                                  "param": "model", "code": "model_not_found"}}
    assert OpenAIError(500, "x").body()["error"]["type"] == "server_error"


def test_without_the_extra_openai_port_fails_at_triton_with_the_pip_line(monkeypatch):
    import sys

    from pytriton.exceptions import PyTritonBadParameterError
    from pytriton.triton import Triton, TritonConfig

    monkeypatch.setitem(sys.modules, "aiohttp", None)  # as if it were not installed: its import fails
    # aiohttp is on PyPI; pytriton itself is on no index, so 'pytriton[openai]' comes with a path only.
    with pytest.raises(PyTritonBadParameterError, match=r"pip install 'aiohttp>=3.9' .*pip install '/path/to/pytriton"):
        Triton(config=TritonConfig(openai_port=9000))


def test_the_api_key_comes_from_the_config_or_the_environment_and_is_never_shown(monkeypatch):
    from pytriton.exceptions import PyTritonBadParameterError
    from pytriton.server.security import TritonSecurityConfig

    monkeypatch.delenv("PYTRITON_OPENAI_API_KEY", raising=False)
    assert TritonSecurityConfig().openai_api_key is None
    chosen = TritonSecurityConfig(openai_api_key="s3cret-key")
    assert chosen.openai_api_key == "s3cret-key" and "s3cret" not in repr(chosen)
    monkeypatch.setenv("PYTRITON_OPENAI_API_KEY", "from-env")
    assert TritonSecurityConfig().openai_api_key == "from-env"
    with pytest.raises(PyTritonBadParameterError, match="openai_api_key=<a string with blanks"):
        TritonSecurityConfig(openai_api_key="has\nnewline")


def test_the_openai_port_must_be_a_port_of_its_own():
    from pytriton.exceptions import PyTritonBadParameterError
    from pytriton.triton import TritonConfig

    with pytest.raises(PyTritonBadParameterError, match="openai_port.*8002.*a port of its own"):
        TritonConfig(openai_port=8002)
    with pytest.raises(PyTritonBadParameterError, match="openai_port"):
        TritonConfig(openai_port=70000)
    assert TritonConfig(http_port=9000, openai_port=8000).openai_port == 8000


def test_a_multiplexed_model_is_read_from_its_configuration_and_named_base_colon_variant():
    from pytriton.client_contract import PARAM_MULTIPLEX, multiplexing
    from pytriton.openai.convention import listed_names, split_variant
    from pytriton.openai.errors import unknown_variant
    from pytriton.openai.link import chat_request_head

    text = json.dumps({"parameter": "adapter", "max_loaded": 4, "variants": ["en", "de"]})
    config = dict(CHAT_CONFIG, parameters={PARAM_MULTIPLEX: {"string_value": text}})
    model = served_model(config)
    assert (model.variant_parameter, model.variants) == ("adapter", ("en", "de"))
    assert listed_names(model) == ["tiny-chat", "tiny-chat:en", "tiny-chat:de"]
    open_text = json.dumps({"parameter": "adapter", "max_loaded": 4, "variants": None})
    assert served_model(dict(CHAT_CONFIG, parameters={PARAM_MULTIPLEX: open_text})).variants is None
    assert served_model(CHAT_CONFIG).variant_parameter is None
    assert multiplexing({PARAM_MULTIPLEX: "not json"}) is None
    assert split_variant("base:v:1") == ("base", "v:1") and split_variant("base") == ("base", None)
    assert split_variant(":v") == (":v", None) and split_variant("base:") == ("base:", None)
    error = unknown_variant("tiny:xx", "tiny", ("en", "de"))
    assert error.status == 404 and error.code == "model_not_found"
    assert error.message == "The model 'tiny:xx' does not exist: model 'tiny' serves the variants de, en"
    head = chat_request_head("tiny", False, ("adapter", "de"))
    from tritonclient.grpc import service_pb2

    parsed = service_pb2.ModelInferRequest.FromString(head)
    assert parsed.parameters["adapter"].string_param == "de"
    assert "adapter" not in service_pb2.ModelInferRequest.FromString(chat_request_head("tiny", False)).parameters
