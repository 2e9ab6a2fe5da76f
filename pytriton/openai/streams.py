"""A chat callable's pieces -> the responses of a decoupled model (the worker side of `bind_chat`).

`Triton.bind_chat` binds `chat_callable(...)`, an async generator that pytriton's asynchronous
worker loop runs once per batch of requests. It always is async, whatever the user wrote,
because a decoupled model's plain generator holds its model instance for the whole stream: one
instance would serve one conversation at a time. An async callable's batches overlap on the
instance's event loop instead, so one instance holds hundreds of streams at once.

What the user's callable is decides how it is driven:

- an async generator (or a coroutine): awaited on the instance's loop;
- a plain generator (or function): run on a thread of its own from a pool, each piece handed to
  the loop as it comes, so that a callable that blocks (a model's forward pass, a sleep) blocks
  only its own stream. A cancelled request sets a flag the thread reads after each piece: the
  generator is closed at its next ``yield`` (``GeneratorExit`` there, its ``finally`` runs);
- under ``@batch``: one call for the whole batch, ``infer_func(conversations, params)``, whose
  every step is a list with one piece (or None) per conversation;
- a ``@continuous`` step function: served by the continuous loop (`pytriton.worker.continuous`),
  not by `ChatRunner`: `ChatSteps` decodes each stream's conversation when it joins and turns the
  step's pieces into the convention's tensors; conversations join and leave the running step.

Every answer ends with a piece carrying ``finish_reason`` (``"stop"``, or ``"tool_calls"`` after
tool calls, unless the callable gave one), so the front ends it without waiting for the rest of
the batch.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import inspect
import json
import threading
from typing import Any, AsyncIterator, Callable, Deque, Dict, List, Optional, Tuple

import numpy as np

from pytriton.decorating.continuous import ContinuousStep, Stream
from pytriton.openai.convention import CHAT_MESSAGES, CHAT_PARAMS, CHAT_PIECE, check_piece

_DONE = object()
_MAX_STREAM_THREADS = 1024
"""Threads of one chat model that may run plain generators at once; more streams wait for one."""


def _decode(model_name: str, request: Any, name: str, default: Any) -> Any:
    if name not in request:
        return default
    values = np.asarray(request[name]).reshape(-1)
    if values.size != 1:
        raise ValueError(f"model '{model_name}': input '{name}' holds {values.size} values; a chat request carries "
                         "exactly one conversation")
    raw = values[0]
    return json.loads(raw.decode("utf-8") if isinstance(raw, bytes) else str(raw))


def _piece_array(piece: Dict[str, Any], batched: bool) -> Dict[str, np.ndarray]:
    encoded = np.array([json.dumps(piece).encode("utf-8")], dtype=object)
    return {CHAT_PIECE: encoded.reshape(1, 1) if batched else encoded}


class _ThreadedStream:
    """A plain generator run on a pool thread; its pieces land in `queue` on the loop."""

    def __init__(self, pool: concurrent.futures.Executor, loop: asyncio.AbstractEventLoop,
                 start: Callable[[], Any], push: Callable[[Any], None]) -> None:
        self._cancelled = threading.Event()
        self._push = push
        self._loop = loop
        self.future = pool.submit(self._run, start)

    def _run(self, start: Callable[[], Any]) -> None:
        outcome: Any = _DONE
        try:
            result = start()
            if isinstance(result, (str, dict)) or result is None:
                result = () if result is None else (result,)
            iterator = iter(result)
            try:
                for item in iterator:
                    if self._cancelled.is_set():
                        break
                    self._loop.call_soon_threadsafe(self._push, item)
                    if self._cancelled.is_set():
                        break
            finally:
                close = getattr(iterator, "close", None)
                if close is not None:
                    close()  # GeneratorExit at the yield it stands on
        except BaseException as exc:  # noqa: BLE001 - handed to the loop, raised there
            outcome = exc
        if not self._cancelled.is_set():
            try:
                self._loop.call_soon_threadsafe(self._push, outcome)
            except RuntimeError:  # the loop closed meanwhile: nobody waits
                pass

    def cancel(self) -> None:
        self._cancelled.set()


async def _drive_async(result: Any, push: Callable[[Any], None]) -> None:
    """Await a coroutine or run an async generator, pushing its pieces; `_DONE` or the error last."""
    try:
        if inspect.isawaitable(result):
            result = await result
        if inspect.isasyncgen(result):
            try:
                async for item in result:
                    push(item)
            finally:
                await result.aclose()
        else:
            for item in (() if result is None else (result,) if isinstance(result, (str, dict)) else result):
                push(item)
    except asyncio.CancelledError:
        raise
    except BaseException as exc:  # noqa: BLE001 - handed to the merge, raised there
        push(exc)
        return
    push(_DONE)


class ChatRunner:
    """The async generator bound for one chat model (see the module docstring).

    Args:
        model_name: for error messages.
        infer_func: the user's callable.
        batched_func: the function under ``@batch`` when `infer_func` is ``@batch``-decorated.
        batched: whether the model's tensors carry Triton's batch axis.
    """

    def __init__(self, model_name: str, infer_func: Callable[..., Any], batched_func: Optional[Callable[..., Any]],
                 batched: bool) -> None:
        self._model_name = model_name
        self._infer_func = infer_func
        self._batched_func = batched_func
        self._batched = batched
        self._pool: Optional[concurrent.futures.ThreadPoolExecutor] = None
        self._pool_lock = threading.Lock()

    def _threads(self) -> concurrent.futures.ThreadPoolExecutor:
        with self._pool_lock:
            if self._pool is None:
                self._pool = concurrent.futures.ThreadPoolExecutor(
                    _MAX_STREAM_THREADS, thread_name_prefix=f"pytriton-chat-{self._model_name}")
            return self._pool

    def close(self) -> None:
        """Let the pool's threads end once their streams have (called when the model stops)."""
        if self._pool is not None:
            self._pool.shutdown(wait=False)

    async def __call__(self, requests: List[Any], **extra: Any) -> AsyncIterator[List[Optional[Dict[str, np.ndarray]]]]:
        """The pieces of the requests' answers, step by step. Keyword arguments (a multiplexed chat
        model's variant, `pytriton.decorating.multiplexing`) are passed on to each call of the chat callable."""
        conversations = [_decode(self._model_name, r, CHAT_MESSAGES, None) for r in requests]
        params = [_decode(self._model_name, r, CHAT_PARAMS, {}) for r in requests]
        count = len(requests)
        queue: asyncio.Queue[Tuple[int, Any]] = asyncio.Queue()
        loop = asyncio.get_running_loop()
        streams: Dict[int, Callable[[], None]] = {}  # running stream -> how to cancel it

        def pusher(index: int) -> Callable[[Any], None]:
            return lambda item: queue.put_nowait((index, item))

        if self._batched_func is not None:
            streams[-1] = self._start(self._batched_func, (conversations, params), pusher(-1), loop, extra)
        else:
            for index in range(count):
                streams[index] = self._start(self._infer_func, (conversations[index], params[index]),
                                             pusher(index), loop, extra)
        finished = [False] * count
        tools = [False] * count  # an answer that called tools and ended by itself ends with "tool_calls"
        ready: Deque[Tuple[int, Dict[str, Any]]] = collections.deque()

        def take(index: int, item: Any) -> None:
            if isinstance(item, BaseException):
                raise item
            if item is _DONE:
                streams.pop(index, None)
                ready.extend((end, {"finish_reason": "tool_calls" if tools[end] else "stop"})
                             for end in (range(count) if index < 0 else (index,)))
            else:
                for slot, piece in self._pieces(index, item, count):
                    tools[slot] = tools[slot] or bool(piece.get("tool_calls"))
                    ready.append((slot, piece))

        try:
            while streams or ready:
                if not ready:
                    take(*await queue.get())
                while not queue.empty():
                    take(*queue.get_nowait())
                step: List[Optional[Dict[str, Any]]] = [None] * count
                rest: Deque[Tuple[int, Dict[str, Any]]] = collections.deque()
                for slot, piece in ready:
                    if finished[slot]:
                        continue
                    if step[slot] is not None:
                        rest.append((slot, piece))
                        continue
                    step[slot] = piece
                    if piece.get("finish_reason") is not None:
                        finished[slot] = True
                        cancel = streams.pop(slot, None)  # an answer that ended before its generator did
                        if cancel is not None:
                            cancel()
                ready = rest
                if any(piece is not None for piece in step):
                    yield [None if piece is None else _piece_array(piece, self._batched) for piece in step]
        finally:
            for cancel in streams.values():
                cancel()

    def _pieces(self, index: int, item: Any, count: int) -> List[Tuple[int, Dict[str, Any]]]:
        """(request, checked piece) of one item: a piece, or under ``@batch`` a list of them."""
        if index >= 0:
            return [(index, check_piece(self._model_name, item))]
        if not isinstance(item, (list, tuple)) or len(item) != count:
            raise ValueError(f"model '{self._model_name}': a @batch chat callable must yield a list of {count} "
                             f"piece(s), one per conversation (None where there is none); got {item!r:.80}")
        return [(slot, check_piece(self._model_name, piece)) for slot, piece in enumerate(item) if piece is not None]

    def _start(self, func: Callable[..., Any], args: Tuple[Any, ...], push: Callable[[Any], None],
               loop: asyncio.AbstractEventLoop, kwargs: Dict[str, Any]) -> Callable[[], None]:
        """Start one run of `func`; return how to cancel it."""
        if _is_async(func):
            task = loop.create_task(_drive_async(func(*args, **kwargs), push))
            return lambda: None if task.cancel() else None
        return _ThreadedStream(self._threads(), loop, lambda: func(*args, **kwargs), push).cancel


def _is_async(func: Callable[..., Any]) -> bool:
    return any(inspect.iscoroutinefunction(c) or inspect.isasyncgenfunction(c)
               for c in (func, getattr(func, "__call__", None)))  # noqa: B004 - the method itself


class ChatSteps:
    """The step function bound for a chat model whose callable is a ``@continuous`` step function.

    Each stream is a conversation: when it joins, its `Stream.inputs` becomes
    ``{"messages": [...], "params": {...}}`` (decoded once), and the user's function returns a
    piece per stream (a str or a dict, as a chat generator yields; None for nothing this step).
    A stream the function finishes ends its answer with ``finish_reason`` ``"stop"`` (or
    ``"tool_calls"`` after tool calls) unless its last piece gave one; a piece that gives one
    finishes the stream.

    Args:
        model_name: for error messages.
        user_step: the user's marked step function.
        batched: whether the model's tensors carry Triton's batch axis.
    """

    def __init__(self, model_name: str, user_step: ContinuousStep, batched: bool) -> None:
        self._model_name = model_name
        self._function = user_step.function
        self._batched = batched
        self.__name__ = user_step.__name__

    def __call__(self, streams: List[Stream]) -> Any:
        for stream in streams:
            if stream.steps == 0 and stream._wrapper is None:  # joins now: its conversation, once
                request = stream.inputs
                stream.inputs = {"messages": _decode(self._model_name, request, CHAT_MESSAGES, None),  # type: ignore[assignment]
                                 "params": _decode(self._model_name, request, CHAT_PARAMS, {})}
                stream._wrapper = False  # whether it called tools
        outcome = self._function(streams)
        if inspect.iscoroutine(outcome):
            return self._converted_later(streams, outcome)
        return self._converted(streams, outcome)

    async def _converted_later(self, streams: List[Stream], outcome: Any) -> List[Optional[Dict[str, np.ndarray]]]:
        return self._converted(streams, await outcome)

    def _converted(self, streams: List[Stream], pieces: Any) -> List[Optional[Dict[str, np.ndarray]]]:
        if not isinstance(pieces, (list, tuple)) or len(pieces) != len(streams):
            raise ValueError(f"model '{self._model_name}': a @continuous chat step must return a list of "
                             f"{len(streams)} piece(s), one per stream (None where there is none); got {pieces!r:.80}")
        arrays: List[Optional[Dict[str, np.ndarray]]] = []
        for stream, raw in zip(streams, pieces):
            piece = None if raw is None else check_piece(self._model_name, raw)
            if piece is not None and piece.get("tool_calls"):
                stream._wrapper = True
            if piece is not None and piece.get("finish_reason") is not None:
                stream.finish()  # the answer says it ended
            elif stream._ending:
                piece = {**(piece or {}), "finish_reason": "tool_calls" if stream._wrapper else "stop"}
            arrays.append(None if piece is None else _piece_array(piece, self._batched))
        return arrays
