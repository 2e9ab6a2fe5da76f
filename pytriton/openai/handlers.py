"""The front's routes: OpenAI requests -> calls through Triton -> OpenAI answers.

One request step of the OpenAI-compatible API: `pytriton.openai.requests` checks the body,
`pytriton.openai.link` calls Triton, `pytriton.openai.answers` builds what the client reads.
A chat or completion request makes one call per answer (``n`` per prompt) at once; streamed,
each piece goes out as a server-sent event as soon as it arrives. Any error raised here is an
`OpenAIError`, which the front's middleware sends in OpenAI's shape; once a stream has begun,
an error goes out as an event with an ``error`` object, which OpenAI's clients raise.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Tuple

import numpy as np
from aiohttp import web

from pytriton.openai.answers import Choice, answer_id, chunk, full_answer, usage_chunk
from pytriton.openai.convention import CHAT, EMBEDDINGS
from pytriton.openai.errors import OpenAIError, bad_field, unknown_model
from pytriton.openai.link import ChatCall, TritonLink
from pytriton.openai.requests import TextRequest, chat_request, completion_request, embeddings_request

Observe = Callable[[str, Choice, float, float], None]
"""Records one finished answer: (model, choice, request start, end), `time.perf_counter` times."""

MAX_BODY_BYTES = 64 * 1024 * 1024
SETTLE_S = 5.0
"""How long an answer that ended by the model's own finish piece waits for the stream's final response
before its call is cancelled: cancelling a request that is about to end would count it as cancelled,
not as a success, in Triton's metrics."""


async def read_body(request: web.Request) -> Any:
    """The request's JSON body (400 when it is not JSON)."""
    raw = await request.read()
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise OpenAIError(400, f"the request body is not JSON ({exc}); expected a JSON object") from exc


def _event(payload: Any) -> bytes:
    return b"data: " + json.dumps(payload, separators=(",", ":")).encode("utf-8") + b"\n\n"


class Routes:
    """The handlers of the front's routes, over one `TritonLink`."""

    def __init__(self, link: TritonLink, observe: Optional[Observe] = None) -> None:
        self._link = link
        self._observe = observe
        self._settling: Set[asyncio.Future[Any]] = set()

    async def health(self, request: web.Request) -> web.Response:
        if await self._link.ready():
            return web.json_response({"status": "ok"})
        raise OpenAIError(503, "Triton is not ready")

    async def list_models(self, request: web.Request) -> web.Response:
        models = await self._link.models()
        return web.json_response({"object": "list", "data": [_model_entry(name) for name in sorted(models)]})

    async def get_model(self, request: web.Request) -> web.Response:
        name = request.match_info["model"]
        models = await self._link.models()
        if name not in models:
            raise unknown_model(name, models)
        return web.json_response(_model_entry(name))

    async def chat(self, request: web.Request) -> web.StreamResponse:
        return await self._text(request, CHAT, chat_request(await read_body(request)), "/v1/chat/completions")

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._text(request, "text", completion_request(await read_body(request)), "/v1/completions")

    async def embeddings(self, request: web.Request) -> web.Response:
        asked = embeddings_request(await read_body(request))
        model = await self._link.model(asked.model, EMBEDDINGS, "/v1/embeddings")
        if asked.dimensions is not None and not model.dimensions:
            raise bad_field(asked.model, "dimensions", asked.dimensions,
                            "to be left out: this model does not take 'dimensions' (its embeddings have one length)")
        rows = await self._link.embed(model, asked.texts, asked.dimensions)
        data = [{"object": "embedding", "index": i, "embedding": _encoded(row, asked.base64)}
                for i, row in enumerate(rows)]
        return web.json_response({"object": "list", "data": data, "model": asked.model,
                                  "usage": {"prompt_tokens": 0, "total_tokens": 0}})

    async def _text(self, request: web.Request, kind: str, asked: TextRequest, endpoint: str) -> web.StreamResponse:
        started = time.perf_counter()
        model = await self._link.model(asked.model, CHAT, endpoint)
        choices = [Choice(index, asked.stop) for index in range(len(asked.conversations) * asked.n)]
        calls = [self._link.chat(model, asked.conversations[index // asked.n], asked.params)
                 for index in range(len(choices))]
        queue: asyncio.Queue[Tuple[int, Any]] = asyncio.Queue()
        readers = [asyncio.ensure_future(_read(call, choice, queue)) for call, choice in zip(calls, choices)]
        answer, created = answer_id(kind), int(time.time())
        answered = False
        try:
            if asked.stream:
                response, answered = await self._stream(request, kind, asked, choices, queue, answer, created)
                return response
            for _ in choices:
                index, event = await queue.get()
                while event is not None and not isinstance(event, OpenAIError):  # deltas: the answer goes on
                    index, event = await queue.get()
                if isinstance(event, OpenAIError):
                    raise event
            answered = True
            return web.json_response(full_answer(kind, answer, created, asked.model, choices, asked.n))
        finally:
            if answered:  # every answer ended: let their calls take their final responses
                settling = asyncio.ensure_future(_settle(readers, calls))
                self._settling.add(settling)
                settling.add_done_callback(self._settling.discard)
            else:  # an error, or the client left: cancel what still runs
                _cancel(readers, calls)
            if self._observe is not None:
                ended = time.perf_counter()
                for choice in choices:
                    if choice.done:
                        self._observe(asked.model, choice, started, ended)

    async def close(self) -> None:
        """Cancel the calls still settling (the server stops)."""
        for settling in list(self._settling):
            settling.cancel()

    async def _stream(self, request: web.Request, kind: str, asked: TextRequest, choices: List[Choice],
                      queue: asyncio.Queue[Tuple[int, Any]], answer: str,
                      created: int) -> Tuple[web.StreamResponse, bool]:
        """Send the answers as events; the response, and whether every answer ended without an error."""
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await response.prepare(request)
        model = asked.model
        if kind == CHAT:
            for choice in choices:
                await response.write(_event(chunk(kind, answer, created, model, choice.index,
                                                  {"role": "assistant", "content": ""})))
        open_choices = len(choices)
        while open_choices:
            index, event = await queue.get()
            if isinstance(event, OpenAIError):
                await response.write(_event(event.body()))
                await response.write_eof()
                return response, False
            if event is None:
                open_choices -= 1
                await response.write(_event(chunk(kind, answer, created, model, index, {},
                                                  choices[index].finish_reason)))
                continue
            await response.write(_event(chunk(kind, answer, created, model, index, event)))
        if asked.include_usage:
            await response.write(_event(usage_chunk(kind, answer, created, model, choices, asked.n)))
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response, True


async def _read(call: ChatCall, choice: Choice, queue: asyncio.Queue[Tuple[int, Any]]) -> None:
    """Feed one call's pieces to its choice; each delta, then None at its end (or the error), go to `queue`.

    An answer the model ended (a finish piece) is told at once; the call is then read on to its
    final response. One a stop sequence cut is cancelled at once: the model would go on for nobody.
    """
    try:
        async for piece in call.pieces():
            if choice.done:
                continue
            for delta in choice.feed(piece):
                queue.put_nowait((choice.index, delta))
            if choice.finish_reason is not None:  # this piece ended it
                queue.put_nowait((choice.index, None))
                if choice.cut:
                    break
        if not choice.done:
            for delta in choice.finish():
                queue.put_nowait((choice.index, delta))
            queue.put_nowait((choice.index, None))
    except OpenAIError as error:
        if not choice.done:
            queue.put_nowait((choice.index, error))
    finally:
        call.cancel()  # nothing when the final response came


async def _settle(readers: Sequence[asyncio.Future[None]], calls: Sequence[ChatCall]) -> None:
    """Give answered calls `SETTLE_S` to take their final responses, then cancel those still open."""
    try:
        await asyncio.wait(readers, timeout=SETTLE_S)
    finally:
        _cancel(readers, calls)


def _cancel(readers: Sequence[asyncio.Future[None]], calls: Sequence[ChatCall]) -> None:
    for call in calls:
        call.cancel()
    for reader in readers:
        reader.cancel()


def _model_entry(name: str) -> Dict[str, Any]:
    return {"id": name, "object": "model", "created": 0, "owned_by": "pytriton"}


def _encoded(row: np.ndarray, as_base64: bool) -> Any:
    if as_base64:
        return base64.b64encode(np.asarray(row, dtype="<f4").tobytes()).decode("ascii")
    return [float(value) for value in row]
