"""OpenAI request bodies -> checked requests for the front (pure).

The fields the front acts on are checked here (``model``, ``messages`` or ``prompt``, ``stream``,
``stream_options``, ``n``, ``stop``, ``input``, ``encoding_format``, ``dimensions``), and the
numeric sampling fields for their type; every other field is passed to the callable unchanged
in ``params``, unknown ones included, so a model may read extensions the front knows nothing of.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, List, Mapping, Optional, Tuple

from pytriton.openai.errors import OpenAIError, bad_field, missing_field

MAX_N = 128
MAX_STOP = 4
_NUMBERS = ("temperature", "top_p", "presence_penalty", "frequency_penalty")
_POSITIVE_INTS = ("max_tokens", "max_completion_tokens")


@dataclasses.dataclass(frozen=True)
class TextRequest:
    """A checked chat or completion request: one or more conversations, each asked for `n` answers."""

    model: str
    conversations: List[List[Dict[str, Any]]]
    """The messages of each prompt (a chat request has one; a completion one per prompt)."""
    params: Dict[str, Any]
    stream: bool
    include_usage: bool
    n: int
    stop: Tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class EmbeddingsRequest:
    model: str
    texts: List[str]
    base64: bool
    dimensions: Optional[int]


def _model(body: Any) -> str:
    if not isinstance(body, dict):
        raise OpenAIError(400, f"the request body is {type(body).__name__}; expected a JSON object")
    model = body.get("model")
    if model is None:
        raise missing_field("", "model", "the name of a served model (GET /v1/models lists them)")
    if not isinstance(model, str) or not model:
        raise bad_field("", "model", model, "the name of a served model (GET /v1/models lists them)")
    return model


def model_of(body: Any) -> str:
    """The ``model`` field of a body, checked (400 when absent or not a non-empty string)."""
    return _model(body)


def _common(model: str, body: Mapping[str, Any]) -> Tuple[bool, bool, int, Tuple[str, ...]]:
    stream = body.get("stream", False)
    if stream is None:
        stream = False
    if not isinstance(stream, bool):
        raise bad_field(model, "stream", stream, "true or false")
    options = body.get("stream_options")
    include_usage = False
    if options is not None:
        if not stream:
            raise bad_field(model, "stream_options", options, "to be left out unless 'stream' is true")
        if not isinstance(options, dict) or not isinstance(options.get("include_usage", False), bool):
            raise bad_field(model, "stream_options", options, 'an object such as {"include_usage": true}')
        include_usage = bool(options.get("include_usage", False))
    n = body.get("n", 1)
    if n is None:
        n = 1
    if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= MAX_N:
        raise bad_field(model, "n", n, f"an integer from 1 to {MAX_N}")
    stop = body.get("stop")
    if stop is None:
        stops: Tuple[str, ...] = ()
    elif isinstance(stop, str):
        stops = (stop,) if stop else ()
    elif isinstance(stop, list) and len(stop) <= MAX_STOP and all(isinstance(s, str) and s for s in stop):
        stops = tuple(stop)
    else:
        raise bad_field(model, "stop", stop, f"a non-empty string or a list of up to {MAX_STOP} of them")
    for name in _NUMBERS:
        value = body.get(name)
        if value is not None and (not isinstance(value, (int, float)) or isinstance(value, bool)):
            raise bad_field(model, name, value, "a number")
    for name in _POSITIVE_INTS:
        value = body.get(name)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
            raise bad_field(model, name, value, "an integer >= 1")
    return stream, include_usage, n, stops


def chat_request(body: Any) -> TextRequest:
    """A ``/v1/chat/completions`` body, checked.

    Raises:
        OpenAIError: 400, naming the model, the field, its value and what is expected.
    """
    model = _model(body)
    messages = body.get("messages")
    if messages is None:
        raise missing_field(model, "messages", "a non-empty list of message objects")
    if not isinstance(messages, list) or not messages:
        raise bad_field(model, "messages", messages, "a non-empty list of message objects")
    for index, message in enumerate(messages):
        _check_message(model, index, message)
    stream, include_usage, n, stops = _common(model, body)
    params = {key: value for key, value in body.items() if key not in ("model", "messages", "stream", "stream_options")}
    return TextRequest(model, [messages], params, stream, include_usage, n, stops)


def _check_message(model: str, index: int, message: Any) -> None:
    """One chat message: a role, and content as OpenAI asks (an assistant's may be left out when
    it calls tools; a tool's answer names its call), so that a callable reading
    ``message["content"]`` never meets a message without it."""
    field = f"messages[{index}]"
    if not isinstance(message, dict) or not isinstance(message.get("role"), str):
        raise bad_field(model, field, message,
                        'an object with a string \'role\', such as {"role": "user", "content": "Hi"}')
    role = message["role"]
    content = message.get("content")
    expected = f"a string or a list of content parts in a '{role}' message"
    if role == "assistant":
        if content is None and not message.get("tool_calls") and not message.get("function_call"):
            raise missing_field(model, f"{field}.content", f"{expected} (or 'tool_calls' in its place)")
    elif content is None:
        raise (bad_field(model, f"{field}.content", content, expected) if "content" in message
               else missing_field(model, f"{field}.content", expected))
    if content is not None and not isinstance(content, (str, list)):
        raise bad_field(model, f"{field}.content", content, expected)
    if role == "tool" and not isinstance(message.get("tool_call_id"), str):
        raise missing_field(model, f"{field}.tool_call_id", "the id of the tool call this 'tool' message answers")


def _texts(model: str, body: Dict[str, Any], field: str) -> List[str]:
    """The texts of `field` (a completion's ``prompt``, an embeddings ``input``): a string or a
    non-empty list of strings, as a list."""
    value = body.get(field)
    if value is None:
        raise missing_field(model, field, "a string or a non-empty list of strings")
    texts = [value] if isinstance(value, str) else value
    if not isinstance(texts, list) or not texts or not all(isinstance(text, str) for text in texts):
        raise bad_field(model, field, value, "a string or a non-empty list of strings (token arrays are not served)")
    return texts


def completion_request(body: Any) -> TextRequest:
    """A ``/v1/completions`` body, checked: each prompt becomes one user message (and ``params["prompt"]``)."""
    model = _model(body)
    prompts = _texts(model, body, "prompt")
    stream, include_usage, n, stops = _common(model, body)
    params = {key: value for key, value in body.items() if key not in ("model", "stream", "stream_options")}
    conversations = [[{"role": "user", "content": text}] for text in prompts]
    return TextRequest(model, conversations, params, stream, include_usage, n, stops)


def embeddings_request(body: Any) -> EmbeddingsRequest:
    """A ``/v1/embeddings`` body, checked."""
    model = _model(body)
    texts = _texts(model, body, "input")
    encoding = body.get("encoding_format", "float")
    if encoding is None:
        encoding = "float"
    if encoding not in ("float", "base64"):
        raise bad_field(model, "encoding_format", encoding, "'float' or 'base64'")
    dimensions = body.get("dimensions")
    if dimensions is not None and (not isinstance(dimensions, int) or isinstance(dimensions, bool) or dimensions < 1):
        raise bad_field(model, "dimensions", dimensions, "an integer >= 1")
    return EmbeddingsRequest(model, texts, encoding == "base64", dimensions)
