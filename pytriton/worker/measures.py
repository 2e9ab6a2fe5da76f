"""pytriton's own metric families of one model instance, measured on the worker's side of the hop.

Triton sees the proxy model's queue and compute time; what happens behind the proxy is measured
here, in the process that runs the callable, as in-memory counters that the proxy brings to
Triton's ``/metrics`` port (see `pytriton.metrics` and `pytriton.proxy.metrics`). Updating them
costs a few additions per batch. ``pytriton_requests_in_flight`` is the proxy's own
(`pytriton.proxy.metrics`): it knows what it sent and has no answer for.
"""

from __future__ import annotations

import time
from typing import List, Optional, Sequence

from pytriton.metrics import COUNTER, GAUGE, HISTOGRAM, Definition, Registry, observe

_SECONDS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
_WAIT_SECONDS = (0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)
_LOAD_SECONDS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)

CALLABLE_SECONDS = Definition(
    "pytriton_callable_seconds", "Time the inference callable (with its decorators) took per batch; for a "
    "streaming callable, until its last response", HISTOGRAM, (), _SECONDS)
BATCH_SIZE = Definition(
    "pytriton_batch_size", "Requests per batch handed to the inference callable", HISTOGRAM, (), _SIZES)
BATCH_WAIT_SECONDS = Definition(
    "pytriton_batch_wait_seconds", "Time from the proxy sending a batch to the inference callable starting on it "
    "(the hop, and any wait for the worker)", HISTOGRAM, (), _WAIT_SECONDS)
DEADLINE_DROPPED = Definition(
    "pytriton_deadline_dropped_requests_total", "Requests answered with an error without calling the inference "
    "callable, because their client's deadline had passed", COUNTER, ())
CALLABLE_ERRORS = Definition(
    "pytriton_callable_errors_total", "Requests answered with an error the inference callable raised", COUNTER, ())
STUB_RESTARTS = Definition(
    "pytriton_stub_restarts_total", "Times a new Triton model instance (a stub process, or an instance of pytriton's "
    "backend) took over this instance from an earlier one (a heal after a stub died, or a reload of the model)",
    COUNTER, ())
STREAM_PIECES = Definition(
    "pytriton_stream_pieces_total", "Pieces (responses) a continuous-batching model's streams were sent; its rate is "
    "the pieces per second", COUNTER, ())
STREAM_FIRST_PIECE_SECONDS = Definition(
    "pytriton_stream_first_piece_seconds", "Time from pytriton's backend handing a stream of a continuous-batching "
    "model to the worker to its first piece (waiting for room in the running batch included)", HISTOGRAM, (), _SECONDS)
VARIANT_LOADS = Definition(
    "pytriton_variant_loads_total", "Variants of a multiplexed model loaded (calls of its loader, failed ones "
    "included)", COUNTER, ())
VARIANT_LOAD_FAILURES = Definition(
    "pytriton_variant_load_failures_total", "Loads of a multiplexed model's variants that raised (an unknown "
    "variant included)", COUNTER, ())
VARIANT_EVICTIONS = Definition(
    "pytriton_variant_evictions_total", "Variants of a multiplexed model unloaded to make room for another (the "
    "least recently used first)", COUNTER, ())
VARIANT_LOAD_SECONDS = Definition(
    "pytriton_variant_load_seconds", "Time a multiplexed model's loader took per variant (successful loads)",
    HISTOGRAM, (), _LOAD_SECONDS)
VARIANT_HITS = Definition(
    "pytriton_variant_hits_total", "Requests of a multiplexed model served by a variant already loaded (or loaded "
    "for an earlier request of the same batch)", COUNTER, ())
VARIANT_MISSES = Definition(
    "pytriton_variant_misses_total", "Requests of a multiplexed model that waited for their variant to load (one "
    "per variant and batch: the first request naming it)", COUNTER, ())
VARIANTS_LOADED = Definition(
    "pytriton_variants_loaded", "Variants of a multiplexed model the instance holds loaded now", GAUGE, ())
WORKER_RESTARTS = Definition(
    "pytriton_worker_restarts_total", "Times the worker process of a process instance was forked anew after "
    "the one before died", COUNTER, ())


class Measures:
    """The handler's own series, kept at hand so a batch updates them without a lookup.

    Args:
        registry: the instance's registry (the callable's own metrics go there too).
        worker_restarts: how many worker processes of this instance died before this one.
    """

    __slots__ = ("registry", "_callable", "_sizes", "_wait", "_dropped", "_errors", "_stub_restarts", "_pieces",
                 "_first_piece")

    def __init__(self, registry: Registry, worker_restarts: int = 0) -> None:
        self.registry = registry
        self._callable = registry.series(CALLABLE_SECONDS)
        self._sizes = registry.series(BATCH_SIZE)
        self._wait = registry.series(BATCH_WAIT_SECONDS)
        self._dropped = registry.series(DEADLINE_DROPPED)
        self._errors = registry.series(CALLABLE_ERRORS)
        self._stub_restarts = registry.series(STUB_RESTARTS)
        registry.series(WORKER_RESTARTS)[0] = float(worker_restarts)
        self._pieces: Optional[List[float]] = None  # a continuous model's, made at its first piece
        self._first_piece: Optional[List[float]] = None

    def batch_started(self, size: int, sent_ns: int, dropped: int) -> float:
        """A batch of `size` requests reaches the callable (`dropped` more expired before it); the
        start time to give `batch_done`. `sent_ns` is the proxy's send time (0: unknown)."""
        now = time.perf_counter()
        if sent_ns:
            observe(BATCH_WAIT_SECONDS, self._wait, max(0.0, (time.monotonic_ns() - sent_ns) / 1e9))
        if size:
            observe(BATCH_SIZE, self._sizes, size)
        if dropped:
            self._dropped[0] += dropped
        return now

    def batch_done(self, started: float, failed: int = 0) -> None:
        """The callable is done with a batch started at `started`; `failed` requests got its error."""
        observe(CALLABLE_SECONDS, self._callable, time.perf_counter() - started)
        if failed:
            self._errors[0] += failed

    def callable_failed(self, count: int) -> None:
        """`count` requests of a batch got the callable's error (found by calling it on parts)."""
        self._errors[0] += count

    def pieces_sent(self, count: int, first_pieces: Sequence[float]) -> None:
        """A continuous model's step sent `count` pieces; `first_pieces`: for the streams that got
        their first, the seconds each waited for it."""
        if self._pieces is None or self._first_piece is None:
            self._pieces = self.registry.series(STREAM_PIECES)
            self._first_piece = self.registry.series(STREAM_FIRST_PIECE_SECONDS)
        self._pieces[0] += count
        for seconds in first_pieces:
            observe(STREAM_FIRST_PIECE_SECONDS, self._first_piece, seconds)

    def stub_replaced(self) -> None:
        self._stub_restarts[0] += 1


class VariantMeasures:
    """The series of a multiplexed model's variant cache (`pytriton.worker.variants`), made when
    its instance first serves a variant (a model that is not multiplexed shows none of them)."""

    __slots__ = ("_loads", "_failures", "_evictions", "_seconds", "_hits", "_misses", "_loaded")

    def __init__(self, registry: Registry) -> None:
        self._loads = registry.series(VARIANT_LOADS)
        self._failures = registry.series(VARIANT_LOAD_FAILURES)
        self._evictions = registry.series(VARIANT_EVICTIONS)
        self._seconds = registry.series(VARIANT_LOAD_SECONDS)
        self._hits = registry.series(VARIANT_HITS)
        self._misses = registry.series(VARIANT_MISSES)
        self._loaded = registry.series(VARIANTS_LOADED)

    def looked_up(self, requests: int, hit: bool) -> None:
        """`requests` requests of a batch named one variant: loaded already (`hit`), or their
        first waited for its load (a miss) and the others share it."""
        if hit:
            self._hits[0] += requests
        else:
            self._misses[0] += 1
            self._hits[0] += requests - 1

    def loaded(self, seconds: float, held: int) -> None:
        self._loads[0] += 1
        observe(VARIANT_LOAD_SECONDS, self._seconds, seconds)
        self._loaded[0] = float(held)

    def load_failed(self) -> None:
        self._loads[0] += 1
        self._failures[0] += 1

    def evicted(self, held: int) -> None:
        self._evictions[0] += 1
        self._loaded[0] = float(held)

