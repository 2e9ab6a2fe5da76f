"""What an inference callable may return, and how decorators transform it without running it.

Step of the request flow: worker -> decorators (here, the helpers all of them share) -> the
user's callable.

A callable returns its answer directly (a list of responses, or the keyword form below
`@batch`), or lazily: a generator or async generator (a streaming model: each value is one
step of responses) or a coroutine (an async model). Decorators such as `@batch` and `@sample`
must transform every step in the same way as a direct answer, without consuming anything
early, so cancellation still reaches the user's generator and coroutines still overlap. The
two helpers here do that:

- `map_result`: apply a function to the answer, or to each step, or to the awaited value;
- `gather`: merge the answers of several calls, each covering some requests of a batch, into
  one answer for the whole batch (steps of streams are merged step by step; a request whose
  stream ended, or that got nothing in a step, gets None in that step).
"""

from __future__ import annotations

import asyncio
import inspect
from typing import Any, AsyncIterator, Callable, Iterator, List, Optional, Sequence, Tuple

_DONE = object()


def is_lazy(result: Any) -> bool:
    """Whether `result` is a generator, an async generator or a coroutine."""
    return inspect.isgenerator(result) or inspect.isasyncgen(result) or inspect.iscoroutine(result)


def map_result(result: Any, transform: Callable[[Any], Any]) -> Any:
    """`transform` applied to a direct answer, to each step of a stream, or to a coroutine's value.

    Closing the returned generator closes the wrapped one, so a cancelled stream stops at once.
    """
    if inspect.isgenerator(result):
        return _mapped_generator(result, transform)
    if inspect.isasyncgen(result):
        return _mapped_async_generator(result, transform)
    if inspect.iscoroutine(result):
        return _mapped_coroutine(result, transform)
    return transform(result)


def _mapped_generator(generator: Any, transform: Callable[[Any], Any]) -> Iterator[Any]:
    try:
        for step in generator:
            yield transform(step)
    finally:
        generator.close()


async def _mapped_async_generator(generator: Any, transform: Callable[[Any], Any]) -> AsyncIterator[Any]:
    try:
        async for step in generator:
            yield transform(step)
    finally:
        await generator.aclose()


async def _mapped_coroutine(coroutine: Any, transform: Callable[[Any], Any]) -> Any:
    return map_result(await coroutine, transform)


Part = Tuple[Sequence[int], Any]
"""The request indices one call covered, and what that call returned."""


def gather(count: int, parts: Sequence[Part], convert: Callable[[Sequence[int], Any], List[Any]]) -> Any:
    """One answer for `count` requests from several calls' answers.

    Args:
        count: the number of requests in the batch.
        parts: per call, the indices of the requests it covered and its (possibly lazy) answer.
        convert: turns one call's answer (or one step of it) into one response per covered
            request, in the order of its indices; raises when it cannot.

    Returns:
        A list of `count` responses; a coroutine of it when some calls were coroutines; a
        generator (async when some call was async) of such lists when some call streams.
    """
    results = [result for _, result in parts]
    if not any(is_lazy(result) for result in results):
        return _fill(count, [(indices, convert(indices, result)) for indices, result in parts])
    if not any(inspect.isgenerator(r) or inspect.isasyncgen(r) for r in results):
        return _gathered_coroutines(count, parts, convert)
    if any(inspect.isasyncgen(r) or inspect.iscoroutine(r) for r in results):
        return _merged_async_streams(count, parts, convert)
    return _merged_streams(count, parts, convert)


def _fill(count: int, pieces: Sequence[Tuple[Sequence[int], Optional[List[Any]]]]) -> List[Any]:
    responses: List[Any] = [None] * count
    for indices, values in pieces:
        if values is None:
            continue
        for index, value in zip(indices, values):
            responses[index] = value
    return responses


async def _gathered_coroutines(count: int, parts: Sequence[Part], convert: Callable[..., List[Any]]) -> List[Any]:
    async def value(result: Any) -> Any:
        return await result if inspect.iscoroutine(result) else result

    values = await asyncio.gather(*(value(result) for _, result in parts))
    return _fill(count, [(indices, convert(indices, v)) for (indices, _), v in zip(parts, values)])


def _merged_streams(count: int, parts: Sequence[Part], convert: Callable[..., List[Any]]) -> Iterator[List[Any]]:
    iterators = [result if inspect.isgenerator(result) else iter((result,)) for _, result in parts]
    active = list(range(len(parts)))
    try:
        while active:
            pieces = []
            still = []
            for k in active:
                step = next(iterators[k], _DONE)
                if step is not _DONE:
                    still.append(k)
                    pieces.append((parts[k][0], convert(parts[k][0], step)))
            active = still
            if pieces:
                yield _fill(count, pieces)
    finally:
        for iterator in iterators:
            close = getattr(iterator, "close", None)
            if close is not None:
                close()


async def _merged_async_streams(
    count: int, parts: Sequence[Part], convert: Callable[..., List[Any]]
) -> AsyncIterator[List[Any]]:
    iterators = [_as_async_iterator(result) for _, result in parts]
    active = list(range(len(parts)))
    try:
        while active:
            steps = await asyncio.gather(*(iterators[k].__anext__() for k in active), return_exceptions=True)
            pieces = []
            still = []
            for k, step in zip(active, steps):
                if isinstance(step, StopAsyncIteration):
                    continue
                if isinstance(step, BaseException):
                    raise step
                still.append(k)
                pieces.append((parts[k][0], convert(parts[k][0], step)))
            active = still
            if pieces:
                yield _fill(count, pieces)
    finally:
        for iterator in iterators:
            await iterator.aclose()


async def _as_async_iterator(result: Any) -> Any:
    """Any answer as an async generator of steps (a direct answer or a coroutine is one step)."""
    if inspect.isasyncgen(result):
        try:
            async for step in result:
                yield step
        finally:
            await result.aclose()
    elif inspect.isgenerator(result):
        try:
            for step in result:
                yield step
        finally:
            result.close()
    else:
        yield await result if inspect.iscoroutine(result) else result
