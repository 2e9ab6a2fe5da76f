"""Pieces from a chat model -> OpenAI's answers: choices, stream chunks, usage (pure).

One `Choice` follows one call of the model: it applies the request's ``stop`` sequences (the
text streamed never holds a stop sequence or a part of one, so a stream and the answer without
streaming agree), gathers tool calls, and counts usage. Usage is the callable's when it yields
``{"usage": {...}}``; otherwise ``completion_tokens`` counts the pieces that carried text or
tool calls (a piece is not a token: a callable that yields words counts words) and
``prompt_tokens`` is 0, unknown.
"""

from __future__ import annotations

import itertools
import json
import time
import uuid
from typing import Any, Dict, List, Optional, Sequence, Tuple


class StopScanner:
    """Cuts a stream of text at the first of the stop sequences.

    Text that could be the start of a stop sequence is held back until the next piece shows
    whether it is; `flush` gives it at the end.
    """

    def __init__(self, stops: Sequence[str]) -> None:
        self._stops = tuple(s for s in stops if s)
        self._held = ""

    def feed(self, text: str) -> Tuple[str, bool]:
        """The text to emit now, and whether a stop sequence was met (then nothing more comes)."""
        if not self._stops:
            return text, False
        buffer = self._held + text
        found = [buffer.find(stop) for stop in self._stops if stop in buffer]
        if found:
            self._held = ""
            return buffer[:min(found)], True
        hold = 0
        for stop in self._stops:
            for size in range(min(len(stop) - 1, len(buffer)), hold, -1):
                if buffer.endswith(stop[:size]):
                    hold = size
                    break
        self._held = buffer[len(buffer) - hold:] if hold else ""
        return buffer[:len(buffer) - hold], False

    def flush(self) -> str:
        held, self._held = self._held, ""
        return held


class Choice:
    """One answer being built from the pieces of one call (see the module docstring)."""

    def __init__(self, index: int, stops: Sequence[str]) -> None:
        self.index = index
        self._scanner = StopScanner(stops)
        self.text_parts: List[str] = []
        self.tool_calls: List[Dict[str, Any]] = []
        self.finish_reason: Optional[str] = None
        self.pieces = 0
        self.usage: Dict[str, int] = {}
        self.cut = False
        """Whether a stop sequence ended the answer (the model may still be generating)."""
        self.first_at: Optional[float] = None
        """`time.perf_counter` of the first piece with text or tool calls."""

    @property
    def done(self) -> bool:
        return self.finish_reason is not None

    @property
    def text(self) -> str:
        return "".join(self.text_parts)

    def feed(self, piece: Dict[str, Any]) -> List[Dict[str, Any]]:
        """Take one piece; return the deltas to stream now (``{"content": ...}``, ``{"tool_calls": ...}``)."""
        if self.done:
            return []
        deltas: List[Dict[str, Any]] = []
        if piece.get("usage"):
            self.usage.update(piece["usage"])
        content = piece.get("content")
        calls = piece.get("tool_calls")
        if content or calls:
            self.pieces += 1
            if self.first_at is None:
                self.first_at = time.perf_counter()
        if content:
            text, stopped = self._scanner.feed(content)
            if text:
                self.text_parts.append(text)
                deltas.append({"content": text})
            if stopped:
                self.finish_reason, self.cut = "stop", True
                return deltas
        if calls:
            numbered = [{"index": len(self.tool_calls) + i, **call} for i, call in enumerate(calls)]
            self.tool_calls.extend(numbered)
            deltas.append({"tool_calls": numbered})
        if piece.get("finish_reason") is not None:
            deltas.extend(self.finish(str(piece["finish_reason"])))
        return deltas

    def finish(self, reason: Optional[str] = None) -> List[Dict[str, Any]]:
        """End the answer (held text is released); its last deltas."""
        if self.done:
            return []
        held = self._scanner.flush()
        if held:
            self.text_parts.append(held)
        self.finish_reason = reason or ("tool_calls" if self.tool_calls else "stop")
        return [{"content": held}] if held else []

    def completion_tokens(self) -> int:
        return int(self.usage.get("completion_tokens", self.pieces))

    def prompt_tokens(self) -> int:
        return int(self.usage.get("prompt_tokens", 0))


def usage(choices: Sequence[Choice], n: int) -> Dict[str, int]:
    """The usage of a request: each prompt counted once (its `n` calls share it), every answer's tokens."""
    prompt = sum(max(c.prompt_tokens() for c in choices[start:start + n]) for start in range(0, len(choices), n))
    completion = sum(c.completion_tokens() for c in choices)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


_ID_PREFIX = uuid.uuid4().hex[:16]
_ids = itertools.count()


def answer_id(kind: str) -> str:
    """A new answer's id: this process's random prefix and a counter (no random bytes per answer)."""
    return f"{'chatcmpl' if kind == 'chat' else 'cmpl'}-{_ID_PREFIX}{next(_ids):x}"


def chat_message(choice: Choice) -> Dict[str, Any]:
    message: Dict[str, Any] = {"role": "assistant", "content": choice.text if choice.text or not choice.tool_calls
                               else None}
    if choice.tool_calls:
        message["tool_calls"] = [{key: value for key, value in call.items() if key != "index"}
                                 for call in choice.tool_calls]
    return message


def full_answer(kind: str, answer: str, created: int, model: str, choices: Sequence[Choice], n: int) -> Dict[str, Any]:
    """The answer without streaming (``chat.completion`` or ``text_completion``)."""
    if kind == "chat":
        listed = [{"index": c.index, "message": chat_message(c), "finish_reason": c.finish_reason, "logprobs": None}
                  for c in choices]
        obj = "chat.completion"
    else:
        listed = [{"index": c.index, "text": c.text, "finish_reason": c.finish_reason, "logprobs": None}
                  for c in choices]
        obj = "text_completion"
    return {"id": answer, "object": obj, "created": created, "model": model, "choices": listed,
            "usage": usage(choices, n)}


def chunk(kind: str, answer: str, created: int, model: str, index: int, delta: Dict[str, Any],
          finish_reason: Optional[str] = None) -> Dict[str, Any]:
    """One streamed chunk of one choice: a delta (chat) or a text piece (completion)."""
    if kind == "chat":
        entry: Dict[str, Any] = {"index": index, "delta": delta, "finish_reason": finish_reason, "logprobs": None}
        obj = "chat.completion.chunk"
    else:
        entry = {"index": index, "text": delta.get("content", "") or "", "finish_reason": finish_reason,
                 "logprobs": None}
        obj = "text_completion"
    return {"id": answer, "object": obj, "created": created, "model": model, "choices": [entry]}


def usage_chunk(kind: str, answer: str, created: int, model: str, choices: Sequence[Choice], n: int) -> Dict[str, Any]:
    """The last chunk of a stream asked with ``stream_options.include_usage``: no choices, the usage."""
    return {"id": answer, "object": "chat.completion.chunk" if kind == "chat" else "text_completion",
            "created": created, "model": model, "choices": [], "usage": usage(choices, n)}


class Events:
    """The server-sent events of one streamed answer, as bytes; what every chunk repeats is encoded once.

    ``content`` is the one a stream sends most (a text delta), so it is assembled from encoded
    parts; the rest go through `chunk` and `json.dumps`. Both give the same JSON.
    """

    def __init__(self, kind: str, answer: str, created: int, model: str) -> None:
        self._kind, self._answer, self._created, self._model = kind, answer, created, model
        self._chat = kind == "chat"
        head = {"id": answer, "object": "chat.completion.chunk" if self._chat else "text_completion",
                "created": created, "model": model}
        self._head = "data: " + json.dumps(head, separators=(",", ":"))[:-1] + ',"choices":[{"index":'
        self._text_key = ',"delta":{"content":' if self._chat else ',"text":'
        self._tail = ('},"finish_reason":null,"logprobs":null}]}\n\n' if self._chat
                      else ',"finish_reason":null,"logprobs":null}]}\n\n')

    def content(self, index: int, text: str) -> bytes:
        """A chunk carrying text `text` of choice `index`."""
        return (self._head + str(index) + self._text_key + json.dumps(text) + self._tail).encode("utf-8")

    def delta(self, index: int, delta: Dict[str, Any], finish_reason: Optional[str] = None) -> bytes:
        """A chunk of choice `index` with `delta` (``{"content": ...}`` takes the quick way)."""
        if finish_reason is None and len(delta) == 1 and isinstance(delta.get("content"), str):
            return self.content(index, delta["content"])
        return event(chunk(self._kind, self._answer, self._created, self._model, index, delta, finish_reason))

    def usage(self, choices: Sequence[Choice], n: int) -> bytes:
        return event(usage_chunk(self._kind, self._answer, self._created, self._model, choices, n))


def event(payload: Any) -> bytes:
    """One server-sent event carrying `payload` as JSON."""
    return b"data: " + json.dumps(payload, separators=(",", ":")).encode("utf-8") + b"\n\n"
