"""``@multiplexed``: many variants of one model (an adapter per customer, a checkpoint per
language) served by one bound model, each loaded on demand and the least recently used evicted.

Step of the request flow: worker -> decorators (here, the outermost) -> the user's callable. A
request names its variant in a request parameter (``"variant"`` by default); the decorator
groups a batch's requests by variant, in the order each first appears, gets each variant's
object from the instance's cache (`pytriton.worker.variants`: it loads the variant there when it
is not held, evicting the least recently used first) and calls the callable once per group with
the object as a keyword argument (``model`` by default). Each group's answers go back to its own
requests. A request whose variant cannot be had (no parameter, a variant the loader refuses, a
load that raised) gets its error; the other groups of the batch are served.

`bind` finds the decorator on the callable (`multiplexing_of`) and tells pytriton's backend
(`pytriton.ipc.protocol.PARAM_MULTIPLEX`), which then sends a batch to the instance that holds
its variants when one is free.
"""

from __future__ import annotations

import inspect
import json
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

import wrapt

from pytriton.client_contract import UNKNOWN_VARIANT
from pytriton.decorating.common import _requests_arg
from pytriton.decorating.results import gather, is_lazy
from pytriton.exceptions import PyTritonBadParameterError, PyTritonModelConfigError, PyTritonValidationError
from pytriton.worker.context import current_context
from pytriton.worker.handler import is_async_callable
from pytriton.worker.outcomes import Failure, bad_request
from pytriton.worker.variants import InstanceCaches, Loader, Unloader, VariantCache, VariantLoadError

__all__ = ["Multiplexing", "multiplex_parameter", "multiplexed", "multiplexed_directly", "multiplexing_of"]

_SHOWN_VARIANTS = 10
"""How many known variants an error lists."""


class Multiplexing:
    """What ``@multiplexed`` was given, and its caches: the wrapper of the decorated callable.

    Attributes:
        load, unload, max_loaded, parameter, argument, variants: as given to `multiplexed`.
    """

    def __init__(self, load: Loader, unload: Optional[Unloader], max_loaded: int, parameter: str, argument: str,
                 variants: Optional[Tuple[str, ...]]) -> None:
        self.load = load
        self.unload = unload
        self.max_loaded = max_loaded
        self.parameter = parameter
        self.argument = argument
        self.variants = variants
        self._known = frozenset(variants) if variants is not None else None
        self._loads_async = inspect.iscoroutinefunction(load) or inspect.iscoroutinefunction(unload)
        self.caches = InstanceCaches(lambda model, measures: VariantCache(model, load, unload, max_loaded, measures))

    def wrap(self, func: Any) -> Any:
        """`func` under this ``@multiplexed`` (`bind_chat` puts the chat runner, which takes the
        requests, where the user's chat function was)."""
        return wrapt.FunctionWrapper(func, self)

    def describe(self) -> str:
        """A few words for the start line: the parameter, the budget, the variants known."""
        text = f"multiplexed by request parameter '{self.parameter}', {self.max_loaded} per instance"
        if self.variants:
            shown = ", ".join(self.variants[:5])
            text += f", variants {shown}" + (f" and {len(self.variants) - 5} more" if len(self.variants) > 5 else "")
        return text

    def config_text(self) -> str:
        """What pytriton's backend reads of it (`pytriton.ipc.protocol.PARAM_MULTIPLEX`): JSON."""
        return json.dumps({"parameter": self.parameter, "max_loaded": self.max_loaded,
                           "variants": list(self.variants) if self.variants is not None else None})

    # --- one batch --------------------------------------------------------------------------------

    def __call__(self, wrapped: Callable[..., Any], instance: Any, args: Tuple[Any, ...],
                 kwargs: Dict[str, Any]) -> Any:
        requests = _requests_arg("multiplexed", args, kwargs)
        if not requests:
            return []
        context = current_context()
        model = context.model_name if context is not None else "(not served)"
        groups, refused = self._groups(model, requests)
        cache = self.caches.current(model)
        if self._loads_async or is_async_callable(wrapped):
            return self._serve_async(wrapped, cache, model, requests, groups, refused)
        parts: List[Tuple[Sequence[int], Any]] = list(refused)
        pins: List[_Pin] = []  # variants in use by a call whose answer is still to come
        try:
            for variant, indices in groups.items():
                try:
                    value, hit = cache.acquire(variant)
                except VariantLoadError as exc:
                    parts.append((indices, [_load_failure(model, self.parameter, exc)] * len(indices)))
                    continue
                cache.looked_up(len(indices), hit)
                pin = _Pin(cache, variant)
                pins.append(pin)
                result = wrapped([requests[i] for i in indices], **{self.argument: value})
                if is_lazy(result):  # a stream or coroutine runs on: the variant is released at its end
                    result = _released_at_end(result, pin, asynchronous=False)
                else:
                    pins.pop().release()
                parts.append((indices, result))
        except BaseException:
            _close_all(parts)
            for pin in pins:
                pin.release()
            raise
        return gather(len(requests), parts, _checked)

    async def _serve_async(self, wrapped: Callable[..., Any], cache: VariantCache, model: str,
                           requests: List[Any], groups: Dict[str, List[int]],
                           refused: List[Tuple[List[int], List[Failure]]]) -> Any:
        """The batch on the instance's asyncio loop (an async callable, loader or unloader): the
        variants are taken in the same order; the groups' coroutines then run together."""
        parts: List[Tuple[Sequence[int], Any]] = list(refused)
        pins: List[_Pin] = []
        try:
            for variant, indices in groups.items():
                try:
                    value, hit = await cache.acquire_async(variant)
                except VariantLoadError as exc:
                    parts.append((indices, [_load_failure(model, self.parameter, exc)] * len(indices)))
                    continue
                cache.looked_up(len(indices), hit)
                pin = _Pin(cache, variant)
                pins.append(pin)
                result = wrapped([requests[i] for i in indices], **{self.argument: value})
                if is_lazy(result):
                    result = _released_at_end(result, pin, asynchronous=True)
                else:
                    await pins.pop().release_async()
                parts.append((indices, result))
        except BaseException:
            _close_all(parts)
            for pin in pins:
                await pin.release_async()
            raise
        merged = gather(len(requests), parts, _checked)
        return await merged if inspect.iscoroutine(merged) else merged

    def _groups(self, model: str, requests: Sequence[Any]) -> Tuple[Dict[str, List[int]],
                                                                       List[Tuple[List[int], List[Failure]]]]:
        """The requests' positions by variant, in the order each variant first appears; and the
        requests refused before any load (no variant, or one outside `variants`)."""
        groups: Dict[str, List[int]] = {}
        refused: List[Tuple[List[int], List[Failure]]] = []
        parameter, known = self.parameter, self._known
        for index, request in enumerate(requests):
            parameters = getattr(request, "parameters", None)
            variant = parameters.get(parameter) if isinstance(parameters, dict) else None
            if type(variant) is str and variant and (known is None or variant in known):
                indices = groups.get(variant)
                if indices is None:
                    groups[variant] = [index]
                else:
                    indices.append(index)
            else:
                refused.append(([index], [bad_request(self._refusal(model, variant))]))
        return groups, refused

    def _refusal(self, model: str, variant: Any) -> str:
        parameter = self.parameter
        if variant is None:
            return (f"Model '{model}' serves variants: name one in the request parameter '{parameter}' (e.g. "
                    f"parameters={{'{parameter}': ...}}); this request has none")
        if type(variant) is not str or not variant:
            return (f"Model '{model}': the request parameter '{parameter}' must name a variant (a non-empty string), "
                    f"got {variant!r}")
        shown = ", ".join(repr(name) for name in (self.variants or ())[:_SHOWN_VARIANTS])
        more = f", ... ({len(self.variants or ())} in all)" if len(self.variants or ()) > _SHOWN_VARIANTS else ""
        return (f"Model '{model}': {UNKNOWN_VARIANT} {variant!r} (request parameter '{parameter}'); it serves "
                f"{shown}{more}")


def _load_failure(model: str, parameter: str, error: VariantLoadError) -> Failure:
    """The error of the requests whose variant did not load: a 400-class one for a variant the
    loader does not know, else the loader's failure (the next request loads it again)."""
    if error.unknown:
        return bad_request(f"Model '{model}': {UNKNOWN_VARIANT} {error.variant!r} (request parameter '{parameter}'): "
                           f"the loader refused it ({error})")
    return Failure(f"Model '{model}': loading variant {error.variant!r} failed: {error}")


def _checked(indices: Sequence[int], responses: Any) -> List[Any]:
    """One group's answers: one per request of the group."""
    if not isinstance(responses, (list, tuple)) or len(responses) != len(indices):
        got = len(responses) if isinstance(responses, (list, tuple)) else type(responses).__name__
        raise PyTritonValidationError(
            f"@multiplexed: the wrapped callable must return one response per request of the variant's group "
            f"({len(indices)}), got {got}. Place @batch or @sample under @multiplexed, or answer each request.")
    return list(responses)


class _Pin:
    """One group's hold on its variant: released once, when its call's answer is complete (or
    never started: a later group's failure drops it)."""

    __slots__ = ("_cache", "_variant", "_held")

    def __init__(self, cache: VariantCache, variant: str) -> None:
        self._cache = cache
        self._variant = variant
        self._held = True

    def release(self) -> None:
        if self._held:
            self._held = False
            self._cache.release(self._variant)

    async def release_async(self) -> None:
        if self._held:
            self._held = False
            await self._cache.release_async(self._variant)


def _released_at_end(result: Any, pin: _Pin, asynchronous: bool) -> Any:
    """`result` (a generator or coroutine) that releases its variant once it ends or is closed;
    on an asyncio loop (`asynchronous`) an async unloader is awaited there."""
    if inspect.isgenerator(result):
        return _released_generator(result, pin)
    if inspect.isasyncgen(result):
        return _released_async_generator(result, pin, asynchronous)
    return _released_coroutine(result, pin, asynchronous)


def _released_generator(generator: Any, pin: _Pin) -> Any:
    try:
        yield from generator
    finally:
        generator.close()
        pin.release()


async def _released_async_generator(generator: Any, pin: _Pin, asynchronous: bool) -> Any:
    try:
        async for step in generator:
            yield step
    finally:
        await generator.aclose()
        if asynchronous:
            await pin.release_async()
        else:
            pin.release()


async def _released_coroutine(coroutine: Any, pin: _Pin, asynchronous: bool) -> Any:
    try:
        return await coroutine
    finally:
        if asynchronous:
            await pin.release_async()
        else:
            pin.release()


def _close_all(parts: Iterable[Tuple[Sequence[int], Any]]) -> None:
    """Close the lazy answers of groups already called (a later group failed): never run, they
    would warn; their variants are released by the caller."""
    for _, result in parts:
        if inspect.isgenerator(result) or inspect.iscoroutine(result):
            result.close()


def multiplexed(
    load: Loader,
    *,
    max_loaded: int = 8,
    unload: Optional[Unloader] = None,
    parameter: str = "variant",
    argument: str = "model",
    variants: Optional[Iterable[str]] = None,
) -> Callable[[Any], Any]:
    """Serve many variants of one model: each request names its variant, loaded on demand.

    The outermost decorator of the inference callable (above ``@batch``, ``@sample`` or a plain
    callable; sync or ``async def``)::

        @multiplexed(load_adapter, max_loaded=8)
        @batch
        def infer(tokens, model):      # `model`: what load_adapter returned for the request's variant
            return {"logits": model(tokens)}

        client.infer_batch(tokens=..., parameters={"variant": "customer-17"})

    Each instance holds at most `max_loaded` variants: a variant not held is loaded (once, however
    many requests wait for it) after the least recently used one that no running call uses is
    unloaded. A batch that mixes variants is served one call per variant, in the order each first
    appears, and each request gets its own variant's answer. With several instances, pytriton's
    backend sends a batch to a free instance that holds its variants (docs/multiplexing.md).

    Args:
        load: ``load(variant) -> object``, a plain function or a coroutine function. Raise
            `KeyError` (any `LookupError`) or `FileNotFoundError` for a variant that does not exist:
            its requests get an error naming it that says the request was wrong (a 400); any other
            exception fails that variant's requests with its message, and the next request loads
            it again.
        max_loaded: how many variants one instance holds at most (>= 1).
        unload: ``unload(variant, object)``, called when a variant is evicted (free GPU memory,
            close files); plain or coroutine function. None: the object is only dropped.
        parameter: the request parameter that names the variant (a string).
        argument: the keyword argument the callable receives the variant's object in.
        variants: the variants that exist, when they are known ahead: a request naming another is
            refused without calling `load`, the server's start line names them and the OpenAI
            front lists them (``base:variant`` in ``/v1/models``). None: `load` decides.

    Raises:
        PyTritonBadParameterError: an argument of the wrong kind or out of range.
    """
    if not callable(load):
        raise PyTritonBadParameterError(f"@multiplexed: load must be a callable (variant -> object), got {load!r}")
    if unload is not None and not callable(unload):
        raise PyTritonBadParameterError(f"@multiplexed: unload must be a callable (variant, object) or None, "
                                        f"got {unload!r}")
    if not isinstance(max_loaded, int) or isinstance(max_loaded, bool) or max_loaded < 1:
        raise PyTritonBadParameterError(f"@multiplexed: max_loaded={max_loaded!r} is invalid: expected an int >= 1")
    for name, value in (("parameter", parameter), ("argument", argument)):
        if not isinstance(value, str) or not value.isidentifier():
            raise PyTritonBadParameterError(f"@multiplexed: {name}={value!r} is invalid: expected a name (letters, "
                                            "digits and '_', not starting with a digit)")
    known: Optional[Tuple[str, ...]] = None
    if variants is not None:
        if isinstance(variants, str):
            raise PyTritonBadParameterError(f"@multiplexed: variants={variants!r} is a string; give a list of the "
                                            "variants' names")
        known = tuple(variants)
        bad = [name for name in known if not isinstance(name, str) or not name]
        if bad or not known or len(set(known)) != len(known):
            raise PyTritonBadParameterError(
                f"@multiplexed: variants={list(known)!r} is invalid: expected a non-empty list of distinct, "
                "non-empty strings (or None: the loader decides)")
    multiplexing = Multiplexing(load, unload, max_loaded, parameter, argument, known)

    def decorate(wrapped: Any) -> Any:
        if not callable(wrapped):
            raise PyTritonBadParameterError(f"@multiplexed decorates an inference callable, got {wrapped!r}")
        return wrapt.FunctionWrapper(wrapped, multiplexing)

    return decorate


def multiplexed_directly(func: Any) -> Optional[Tuple[Multiplexing, Any]]:
    """For a callable whose outermost decorator is ``@multiplexed``: its `Multiplexing` and the
    callable under it; else None."""
    wrapper = getattr(func, "_self_wrapper", None)
    if isinstance(wrapper, Multiplexing):
        return wrapper, func.__wrapped__
    return None


def multiplexing_of(func: Any) -> Optional[Multiplexing]:
    """The `Multiplexing` of a callable decorated with ``@multiplexed`` (itself, an object whose
    ``__call__`` is, or under other decorators that take the list of requests); else None."""
    for candidate in (func, getattr(func, "__call__", None)):  # noqa: B004 - the method itself
        for _ in range(32):  # a stack of decorators, each a wrapper of the next
            if candidate is None:
                break
            wrapper = getattr(candidate, "_self_wrapper", None)
            if isinstance(wrapper, Multiplexing):
                return wrapper
            candidate = getattr(candidate, "__wrapped__", None)
    return None


def multiplex_parameter(model_name: str, funcs: Sequence[Any]) -> Optional[str]:
    """The model's `pytriton.ipc.protocol.PARAM_MULTIPLEX` value when its callables are
    ``@multiplexed``, else None: the check `bind` makes of them.

    Raises:
        PyTritonModelConfigError: some instances' callables are multiplexed and others not, or
            they name the variant in different request parameters or hold different numbers.
    """
    found = [multiplexing_of(func) for func in funcs]
    if not any(found):
        return None
    texts = {multiplexing.config_text() if multiplexing is not None else None for multiplexing in found}
    if len(texts) > 1:
        raise PyTritonModelConfigError(
            f"model '{model_name}': its instances' callables differ in @multiplexed (some are not, or they name "
            "the variant in another parameter, hold another max_loaded or know other variants); give every "
            "instance the same @multiplexed(...) or none")
    return texts.pop()
