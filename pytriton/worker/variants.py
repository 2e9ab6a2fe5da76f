"""Multiplexed models: the variants one model instance holds loaded, the least recently used first.

Step of the request flow: worker -> decorators -> the user's callable. ``@multiplexed``
(`pytriton.decorating.multiplexing`) splits a batch by the variant each request names and asks
here, per group, for that variant's object: a `VariantCache` per model instance hands it out
loaded, loading it first when it is not held. The cache belongs to the instance, not to the
decorated callable: instances on threads share the callable object, yet each holds its own
variants (found by the instance's metric registry, which the handler's thread and every thread
or task it starts carry), and a process instance's worker process holds its own.

What it keeps, whatever the loop that serves the instance (one thread at a time, or overlapping
batches on an asyncio loop, or a thread left behind by a timed call):

- one load per variant at a time: a request for a variant being loaded waits for that load
  (`_Pending`), and a load's failure goes to every request that waited for it; the next request
  loads again;
- at most ``max_loaded`` variants held or being loaded: before a load the least recently used
  variant that no running call holds is unloaded (its unloader called); a variant in use (pinned
  by the group that runs with it, until its call ends, a stream or coroutine included) is never
  evicted. When every held variant is in use (a batch, or batches overlapping, that name more
  variants at once than ``max_loaded``), the load goes ahead over the limit, and the surplus is
  evicted as the calls end;
- the order of use is the order the groups asked: the decorator asks for a batch's variants in
  the order they first appear in it, so pytriton's backend, which sees the same batches, can
  mirror each instance's cache exactly (``backend/execute.c``) and route a request to the
  instance that holds its variant.
"""

from __future__ import annotations

import asyncio
import collections
import inspect
import logging
import threading
import time
import weakref
from typing import Any, Callable, Dict, List, MutableMapping, Optional, OrderedDict, Tuple

from pytriton.metrics import Registry, current_registry
from pytriton.worker.measures import VariantMeasures

logger = logging.getLogger("pytriton.worker")

Loader = Callable[[str], Any]
"""``load(variant) -> object`` (or an awaitable of it)."""
Unloader = Callable[[str, Any], Any]
"""``unload(variant, object)`` (or an awaitable): frees what the object holds (GPU memory, files)."""


class VariantLoadError(Exception):
    """A variant's loader raised: the requests that named it get this error, no other.

    Attributes:
        variant: the variant asked for.
        cause: what the loader raised.
        unknown: the loader refused the variant as one it does not know (it raised a `LookupError`,
            such as `KeyError`, or `FileNotFoundError`): the requester named a wrong variant.
    """

    def __init__(self, variant: str, cause: BaseException) -> None:
        self.variant = variant
        self.cause = cause
        self.unknown = isinstance(cause, (LookupError, FileNotFoundError))
        super().__init__(f"{type(cause).__name__}: {cause}")


class _Held:
    """A loaded variant: its object, and how many running calls use it."""

    __slots__ = ("value", "pins")

    def __init__(self, value: Any) -> None:
        self.value = value
        self.pins = 0


class _Pending:
    """A load under way: what a request for the same variant waits for."""

    __slots__ = ("done", "error", "task")

    def __init__(self) -> None:
        self.done = threading.Event()
        self.error: Optional[VariantLoadError] = None
        self.task: Optional[asyncio.Future[None]] = None


class VariantCache:
    """The variants one model instance holds (see the module docstring).

    Args:
        model: the model's name, for the log.
        load: the loader.
        unload: the unloader (None: an evicted object is only dropped).
        max_loaded: how many variants it holds at most (while none is in use over it).
        measures: where its loads, evictions, hits and misses are counted.
    """

    def __init__(self, model: str, load: Loader, unload: Optional[Unloader], max_loaded: int,
                 measures: Optional[VariantMeasures]) -> None:
        self._model = model
        self._load = load
        self._unload = unload
        self._max = max_loaded
        self._measures = measures
        self._lock = threading.Lock()  # held for bookkeeping only, never across a load or an unload
        self._held: OrderedDict[str, _Held] = collections.OrderedDict()  # least recently used first
        self._loading: Dict[str, _Pending] = {}

    def held(self) -> List[str]:
        """The variants held now, the least recently used first."""
        with self._lock:
            return list(self._held)

    def looked_up(self, requests: int, hit: bool) -> None:
        """Count `requests` requests served by one variant (see `VariantMeasures.looked_up`)."""
        if self._measures is not None:
            self._measures.looked_up(requests, hit)

    # --- one thread at a time ------------------------------------------------------------------

    def acquire(self, variant: str) -> Tuple[Any, bool]:
        """The object of `variant`, loaded here or by a load under way, and pinned until `release`;
        and whether it was held already (a hit).

        Raises:
            VariantLoadError: the load this call made or waited for raised.
        """
        first = True
        while True:
            found, pending, victims = self._look(variant)
            if found is not None:
                return found.value, first
            first = False
            if victims is not None:  # this call loads it
                for name, value in victims:
                    self._call_unload(name, value)
                self._finish_load(variant, pending, *self._call_load(variant))
            else:
                pending.done.wait()
            if pending.error is not None:
                raise pending.error
            # loaded: pinned on the next look (unless evicted meanwhile, then loaded again)

    def release(self, variant: str) -> None:
        """A call that used `variant` ended; variants over the limit that no call uses go now."""
        for name, value in self._unpin(variant):
            self._call_unload(name, value)

    # --- an asyncio loop --------------------------------------------------------------------------

    async def acquire_async(self, variant: str) -> Tuple[Any, bool]:
        """As `acquire`, on the instance's asyncio loop: a load runs as a task of its own, so a
        requester cancelled while it waits leaves the load to the others; an async loader is
        awaited, a plain one called on the loop."""
        first = True
        while True:
            found, pending, victims = self._look(variant)
            if found is not None:
                return found.value, first
            first = False
            if victims is not None:
                pending.task = asyncio.ensure_future(self._load_async(variant, pending, victims))
            if pending.task is not None:
                await asyncio.shield(pending.task)
            else:  # loaded by a thread of the instance (a timed call's): wait without blocking the loop
                await asyncio.get_running_loop().run_in_executor(None, pending.done.wait)
            if pending.error is not None:
                raise pending.error

    async def release_async(self, variant: str) -> None:
        for name, value in self._unpin(variant):
            await self._unload_async(name, value)

    async def _load_async(self, variant: str, pending: _Pending, victims: List[Tuple[str, Any]]) -> None:
        for name, value in victims:
            await self._unload_async(name, value)
        started = time.perf_counter()
        try:
            value = self._load(variant)
            if inspect.isawaitable(value):
                value = await value
        except BaseException as exc:
            self._finish_load(variant, pending, None, exc, 0.0)
            if not isinstance(exc, Exception):
                raise
            return
        self._finish_load(variant, pending, value, None, time.perf_counter() - started)

    async def _unload_async(self, variant: str, value: Any) -> None:
        try:
            outcome = self._unload(variant, value) if self._unload is not None else None
            if inspect.isawaitable(outcome):
                await outcome
        except Exception:
            logger.exception("Model '%s': the unloader raised for variant %r (dropped all the same)", self._model,
                             variant)

    # --- the bookkeeping both share ----------------------------------------------------------------

    def _look(self, variant: str) -> Tuple[Optional[_Held], _Pending, Optional[List[Tuple[str, Any]]]]:
        """Under the lock: the variant held (pinned and made the most recent), or the load to wait
        for; when this caller is to load it, the variants it must unload first (else None)."""
        with self._lock:
            found = self._held.get(variant)
            if found is not None:
                self._held.move_to_end(variant)
                found.pins += 1
                return found, _NO_LOAD, None
            pending = self._loading.get(variant)
            if pending is not None:
                return None, pending, None
            pending = self._loading[variant] = _Pending()
            return None, pending, self._surplus()

    def _surplus(self) -> List[Tuple[str, Any]]:
        """Under the lock: take out the least recently used variants that no call uses, while more
        are held or loading than the limit allows; the variants taken, to unload."""
        victims = []
        while len(self._held) + len(self._loading) > self._max:
            name = next((name for name, held in self._held.items() if not held.pins), None)
            if name is None:
                logger.debug("Model '%s': every variant held is in use; loading past max_loaded=%d", self._model,
                             self._max)
                break
            victims.append((name, self._held.pop(name).value))
            if self._measures is not None:
                self._measures.evicted(len(self._held))
        return victims

    def _unpin(self, variant: str) -> List[Tuple[str, Any]]:
        with self._lock:
            held = self._held.get(variant)
            if held is not None and held.pins:
                held.pins -= 1
            return self._surplus()

    def _call_load(self, variant: str) -> Tuple[Any, Optional[BaseException], float]:
        started = time.perf_counter()
        try:
            value = self._load(variant)
        except Exception as exc:  # noqa: BLE001 - goes to the requests of this variant
            return None, exc, 0.0
        if inspect.isawaitable(value):
            close = getattr(value, "close", None)
            if close is not None:
                close()
            return None, TypeError("the loader returned an awaitable where a plain call serves the model; make the "
                                   "loader a coroutine function (async def)"), 0.0
        return value, None, time.perf_counter() - started

    def _finish_load(self, variant: str, pending: _Pending, value: Any, error: Optional[BaseException],
                     seconds: float) -> None:
        with self._lock:
            del self._loading[variant]
            if error is None:
                self._held[variant] = _Held(value)
        if error is not None:
            pending.error = VariantLoadError(variant, error)
            logger.warning("Model '%s': loading variant %r failed: %s: %s", self._model, variant,
                           type(error).__name__, error)
            if self._measures is not None:
                self._measures.load_failed()
        else:
            logger.debug("Model '%s': loaded variant %r in %.3f s", self._model, variant, seconds)
            if self._measures is not None:
                self._measures.loaded(seconds, len(self._held))
        pending.done.set()

    def _call_unload(self, variant: str, value: Any) -> None:
        if self._unload is None:
            return
        try:
            outcome = self._unload(variant, value)
            if inspect.isawaitable(outcome):
                close = getattr(outcome, "close", None)
                if close is not None:
                    close()
                raise TypeError("the unloader returned an awaitable where a plain call serves the model; make it a "
                                "plain function")
        except Exception:
            logger.exception("Model '%s': the unloader raised for variant %r (dropped all the same)", self._model,
                             variant)


_NO_LOAD = _Pending()
"""What `VariantCache._look` returns beside a held variant (nothing to wait for)."""


class InstanceCaches:
    """One `VariantCache` per model instance, for one decorated callable.

    The instance is told by its metric registry (`pytriton.metrics.current_registry`): the handler
    sets it on its thread, a timed call's thread and an asyncio task inherit it. Outside a handler
    (a test calling the callable, a warm-up at bind) one cache serves every caller.
    """

    def __init__(self, make: Callable[[str, Optional[VariantMeasures]], VariantCache]) -> None:
        self._make = make
        self._lock = threading.Lock()
        self._caches: MutableMapping[Registry, VariantCache] = weakref.WeakKeyDictionary()
        self._outside: Optional[VariantCache] = None

    def current(self, model: str) -> VariantCache:
        """The cache of the instance whose callable runs here (made on its first use)."""
        registry = current_registry()
        if registry is None:
            with self._lock:
                if self._outside is None:
                    self._outside = self._make(model, None)
                return self._outside
        cache = self._caches.get(registry)
        if cache is None:
            with self._lock:
                cache = self._caches.get(registry)
                if cache is None:
                    cache = self._caches[registry] = self._make(model, VariantMeasures(registry))
        return cache

    def all(self) -> List[VariantCache]:
        """Every cache made so far (in this process)."""
        with self._lock:
            return [*self._caches.values(), *([self._outside] if self._outside is not None else [])]
