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
import collections
import json
import time
from typing import Any, Callable, Deque, Dict, List, Optional, Sequence, Set, Tuple

import numpy as np
from aiohttp import web

from pytriton.openai.answers import Choice, Events, answer_id, event, full_answer
from pytriton.openai.convention import CHAT, EMBEDDINGS, listed_names, split_variant
from pytriton.openai.errors import OpenAIError, bad_field, unknown_model, unknown_variant
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
        names = [listed for name in sorted(models) for listed in listed_names(models[name])]
        return web.json_response({"object": "list", "data": [_model_entry(name) for name in names]})

    async def get_model(self, request: web.Request) -> web.Response:
        name = request.match_info["model"]
        models = await self._link.models()
        if name not in models:
            base, variant = split_variant(name)
            model = models.get(base) if variant is not None else None
            if model is None or model.variant_parameter is None:
                raise unknown_model(name, models)
            if model.variants is not None and variant not in model.variants:
                raise unknown_variant(name, base, model.variants)
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
        answer, created = answer_id(kind), int(time.time())
        answers: Answers = (_One(calls[0], choices[0]) if len(calls) == 1 else _Several(calls, choices))
        answered = False
        try:
            if asked.stream:
                response, answered = await self._stream(request, kind, asked, choices, answers,
                                                         Events(kind, answer, created, asked.model))
                return response
            while await answers.next() is not None:  # deltas: the answers go on
                pass
            answered = True
            return web.json_response(full_answer(kind, answer, created, asked.model, choices, asked.n))
        finally:
            if answered:  # every answer ended: let their calls take their final responses
                settling = answers.settle()
                if settling is not None:
                    self._settling.add(settling)
                    settling.add_done_callback(self._settling.discard)
            else:  # an error, or the client left: cancel what still runs
                answers.cancel()
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
                      answers: Answers, events: Events) -> Tuple[web.StreamResponse, bool]:
        """Send the answers as events; the response, and whether every answer ended without an error.

        Each delta goes out as it comes; an answer's last chunk waits for what follows it (the
        next delta, or the stream's end), so that a stream's end is one write.
        """
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await response.prepare(request)
        if kind == CHAT:
            await response.write(b"".join(events.delta(choice.index, {"role": "assistant", "content": ""})
                                          for choice in choices))
        ends: List[bytes] = []
        try:
            while True:
                step = await answers.next()
                if step is None:
                    break
                index, delta = step
                if delta is None:  # that answer ended
                    ends.append(events.delta(index, {}, choices[index].finish_reason))
                    continue
                data = events.delta(index, delta)
                if ends:
                    data = b"".join([*ends, data])
                    ends.clear()
                await response.write(data)
        except OpenAIError as error:
            await response.write_eof(b"".join([*ends, event(error.body())]))
            return response, False
        if asked.include_usage:
            ends.append(events.usage(choices, asked.n))
        await response.write_eof(b"".join([*ends, b"data: [DONE]\n\n"]))
        return response, True


Step = Tuple[int, Optional[Dict[str, Any]]]
"""(choice, its next delta), or (choice, None) once that answer ended."""


class Answers:
    """The deltas of a request's answers as they come, from their calls (`_One`, `_Several`)."""

    async def next(self) -> Optional[Step]:
        """The next step; None once every answer ended.

        Raises:
            OpenAIError: an answer failed (the model raised, the server stops, ...).
        """
        raise NotImplementedError

    def settle(self) -> Optional[asyncio.Future[Any]]:
        """Once every answer ended: let calls that have not had their final response take it
        (within `SETTLE_S`, then they are cancelled); the task doing it, or None when none waits."""
        raise NotImplementedError

    def cancel(self) -> None:
        """Cancel every call whose answer is not complete."""
        raise NotImplementedError


class _One(Answers):
    """The one answer of a request (no ``n``, one prompt): read in the handler's own task."""

    def __init__(self, call: ChatCall, choice: Choice) -> None:
        self._call = call
        self._choice = choice
        self._pieces = call.pieces()
        self._ready: Deque[Dict[str, Any]] = collections.deque()
        self._over = False

    async def next(self) -> Optional[Step]:
        choice = self._choice
        while not self._ready:
            if self._over:
                return None
            if choice.done:
                self._over = True
                if choice.cut:  # the model would go on for nobody
                    self._call.cancel()
                return choice.index, None
            try:
                piece = await self._pieces.__anext__()
            except StopAsyncIteration:
                self._ready.extend(choice.finish())
                self._over = not self._ready
                if self._over:
                    return choice.index, None
                continue
            self._ready.extend(choice.feed(piece))
        return choice.index, self._ready.popleft()

    def settle(self) -> Optional[asyncio.Future[Any]]:
        if self._call.finished or self._choice.cut:
            self.cancel()
            return None
        return asyncio.ensure_future(self._settle())

    async def _settle(self) -> None:
        """Read the call on to its final response (what comes after its end is nobody's), for up
        to `SETTLE_S`; then cancel it."""
        timer = asyncio.get_running_loop().call_later(SETTLE_S, self._call.cancel)
        try:
            async for _ in self._pieces:
                pass
        except OpenAIError:
            pass
        finally:
            timer.cancel()
            self._call.cancel()

    def cancel(self) -> None:
        self._call.cancel()


class _Several(Answers):
    """Several answers (``n``, several prompts) at once: one task reads each call."""

    def __init__(self, calls: Sequence[ChatCall], choices: Sequence[Choice]) -> None:
        self._calls = calls
        self._queue: asyncio.Queue[Tuple[int, Any]] = asyncio.Queue()
        self._readers = [asyncio.ensure_future(_read(call, choice, self._queue))
                         for call, choice in zip(calls, choices)]
        self._open = len(choices)

    async def next(self) -> Optional[Step]:
        if not self._open:
            return None
        index, delta = await self._queue.get()
        if isinstance(delta, OpenAIError):
            raise delta
        if delta is None:
            self._open -= 1
        return index, delta

    def settle(self) -> Optional[asyncio.Future[Any]]:
        return asyncio.ensure_future(_settle(self._readers, self._calls))

    def cancel(self) -> None:
        _cancel(self._readers, self._calls)


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
