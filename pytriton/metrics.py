"""Metrics of a callable, on Triton's own ``/metrics`` port: counters, gauges and histograms.

A callable records its own figures with the three kinds Prometheus users know::

    from pytriton.metrics import Counter, Histogram

    TOKENS = Counter("llm_tokens_total", "Tokens generated", labelnames=("phase",))
    PROMPT = Histogram("llm_prompt_tokens", "Prompt length", buckets=(16, 64, 256, 1024))

    def infer(requests):
        ...
        TOKENS.labels(phase="decode").inc(len(tokens))
        PROMPT.observe(prompt_length)

Values live in memory in the process that runs the callable (the user's, or a worker process
forked from it): recording one is a dictionary lookup and an addition. The model instance's
proxy, inside Triton, asks for them about once a second and brings Triton's metric families up
to date, so they appear on the port operators already scrape, beside Triton's ``nv_*`` families
and pytriton's ``pytriton_*`` ones (`pytriton.worker.measures`). Every series gets the labels
``model``, ``version`` and ``instance`` of the callable that recorded it.

Values are recorded per model instance, so a value must be recorded while a callable runs
(in it, in the decorators around it, or in code it calls on its own thread); elsewhere there is
no model to give it to, and recording raises `PyTritonInvalidOperationError`.
"""

from __future__ import annotations

import bisect
import contextvars
import math
import re
import threading
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

from pytriton.exceptions import PyTritonBadParameterError, PyTritonInvalidOperationError

__all__ = ["Counter", "Gauge", "Histogram", "DEFAULT_BUCKETS"]

DEFAULT_BUCKETS: Tuple[float, ...] = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
"""Bucket upper bounds (seconds) of a `Histogram` made without its own: 5 ms to 10 s."""

INSTANCE_LABELS = ("model", "version", "instance")
"""The labels every series gets from the model instance that recorded it."""
_RESERVED_LABELS = frozenset((*INSTANCE_LABELS, "le", "quantile"))
_RESERVED_PREFIXES = ("nv_", "pytriton_")
"""Triton's families and pytriton's own."""
_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
_LABEL = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")

COUNTER, GAUGE, HISTOGRAM = "counter", "gauge", "histogram"

Labels = Tuple[Tuple[str, str], ...]
"""A series' labels as ``(name, value)`` pairs, in a fixed order."""


class Definition:
    """One family: name, help text, kind, label names and (histograms) bucket bounds."""

    __slots__ = ("name", "documentation", "kind", "labelnames", "buckets")

    def __init__(self, name: str, documentation: str, kind: str, labelnames: Tuple[str, ...],
                 buckets: Tuple[float, ...] = ()) -> None:
        self.name = name
        self.documentation = documentation
        self.kind = kind
        self.labelnames = labelnames
        self.buckets = buckets

    def new_series(self) -> List[float]:
        """Storage of one series: ``[value]``, or a histogram's counts per bucket (+Inf last), sum, count."""
        return [0.0] * (len(self.buckets) + 3) if self.kind == HISTOGRAM else [0.0]


def observe(definition: Definition, series: List[float], value: float) -> None:
    """Add one observation to a histogram series (its bucket is the first bound >= value)."""
    series[bisect.bisect_left(definition.buckets, value)] += 1
    series[-2] += value
    series[-1] += 1


class Registry:
    """The metric values recorded for one model instance (one worker handler).

    Args:
        model_name, model_version, instance: the labels every series of the instance gets.
    """

    def __init__(self, model_name: str, model_version: int, instance: int) -> None:
        self.instance_labels: Labels = (("model", model_name), ("version", str(model_version)),
                                        ("instance", str(instance)))
        self._families: Dict[str, Tuple[Definition, Dict[Tuple[str, ...], List[float]]]] = {}
        self._lock = threading.Lock()  # taken only to add a family or a series, never to update one

    def series(self, definition: Definition, values: Tuple[str, ...] = ()) -> List[float]:
        """The storage of the series of `definition` with label `values` (made on first use)."""
        entry = self._families.get(definition.name)
        if entry is not None and entry[0] is definition:
            found = entry[1].get(values)
            if found is not None:
                return found
        with self._lock:
            entry = self._families.get(definition.name)
            if entry is None:
                entry = self._families[definition.name] = (definition, {})
            elif entry[0] is not definition:
                _check_same(entry[0], definition)
            return entry[1].setdefault(values, definition.new_series())

    def report(self) -> Tuple[Any, ...]:
        """Every family's cumulative values, as `protocol.MetricsReport.families` carries them."""
        families = []
        with self._lock:
            entries = list(self._families.values())
        for definition, all_series in entries:
            series = []
            for values, stored in list(all_series.items()):
                labels = (*self.instance_labels, *zip(definition.labelnames, values))
                value: Any = tuple(stored) if definition.kind == HISTOGRAM else stored[0]
                series.append((labels, value))
            families.append((definition.name, definition.documentation, definition.kind, definition.buckets,
                             tuple(series)))
        return tuple(families)


def _check_same(known: Definition, other: Definition) -> None:
    if (known.kind, known.labelnames, known.buckets) != (other.kind, other.labelnames, other.buckets):
        raise PyTritonBadParameterError(
            f"metric '{other.name}' is defined twice: as a {known.kind} with labels {list(known.labelnames)}"
            f"{_buckets_text(known)}, and as a {other.kind} with labels {list(other.labelnames)}"
            f"{_buckets_text(other)}; give each definition its own name"
        )


def _buckets_text(definition: Definition) -> str:
    return f" and buckets {list(definition.buckets)}" if definition.kind == HISTOGRAM else ""


_current: contextvars.ContextVar[Optional[Registry]] = contextvars.ContextVar("pytriton_metrics", default=None)


def current_registry() -> Optional[Registry]:
    """The registry of the model instance whose callable runs on this thread (None elsewhere)."""
    return _current.get()


def set_current_registry(registry: Optional[Registry]) -> contextvars.Token[Optional[Registry]]:
    """Make `registry` the one this thread records into (the worker does it in each handler thread)."""
    return _current.set(registry)


def _registry(name: str) -> Registry:
    registry = _current.get()
    if registry is None:
        raise PyTritonInvalidOperationError(
            f"metric '{name}' was recorded outside an inference callable; its values belong to the model instance "
            "whose callable records them, so record them while the callable runs (in it or in code it calls)"
        )
    return registry


class _Metric:
    """What the three kinds share: the definition, label checks and `labels`."""

    _kind = ""

    def __init__(self, name: str, documentation: str, labelnames: Iterable[str] = (),
                 buckets: Tuple[float, ...] = ()) -> None:
        if not isinstance(name, str) or not _NAME.match(name):
            raise PyTritonBadParameterError(
                f"metric name {name!r} is not a Prometheus name: letters, digits, '_' and ':', "
                "not starting with a digit"
            )
        if name.startswith(_RESERVED_PREFIXES):
            raise PyTritonBadParameterError(
                f"metric name {name!r} starts with {name.split('_')[0]}_, which Triton's and pytriton's own "
                "families use; choose another prefix (e.g. your application's name)"
            )
        labelnames = tuple(labelnames)
        for label in labelnames:
            if not isinstance(label, str) or not _LABEL.match(label) or label.startswith("__"):
                raise PyTritonBadParameterError(f"metric '{name}': label name {label!r} is not a Prometheus label name")
            if label in _RESERVED_LABELS:
                raise PyTritonBadParameterError(
                    f"metric '{name}': label {label!r} is reserved ({', '.join(sorted(_RESERVED_LABELS))}: "
                    "pytriton adds model, version and instance to every series itself)"
                )
        if len(set(labelnames)) != len(labelnames):
            raise PyTritonBadParameterError(f"metric '{name}': label names {list(labelnames)} repeat a name")
        self._definition = Definition(name, str(documentation), self._kind, labelnames, buckets)

    @property
    def name(self) -> str:
        return self._definition.name

    def labels(self, *values: Any, **named: Any) -> _Child:
        """The series with these label values (by position, or by name)."""
        return _Child(self._definition, self._values(values, named))

    def _values(self, args: Sequence[Any], kwargs: Dict[str, Any]) -> Tuple[str, ...]:
        names = self._definition.labelnames
        if args and kwargs:
            raise PyTritonBadParameterError(f"metric '{self.name}': give label values by position or by name, not both")
        if kwargs:
            if set(kwargs) != set(names):
                raise PyTritonBadParameterError(
                    f"metric '{self.name}': got labels {sorted(kwargs)}, expected exactly {list(names)}"
                )
            return tuple(str(kwargs[label]) for label in names)
        if len(args) != len(names):
            raise PyTritonBadParameterError(
                f"metric '{self.name}': got {len(args)} label value(s), expected {len(names)} for {list(names)}"
            )
        return tuple(str(value) for value in args)

    def _own_series(self) -> List[float]:
        if self._definition.labelnames:
            raise PyTritonBadParameterError(
                f"metric '{self.name}' has labels {list(self._definition.labelnames)}: record through "
                f".labels(...), e.g. .labels({', '.join(f'{n}=...' for n in self._definition.labelnames)})"
            )
        return _registry(self.name).series(self._definition)


class _Child:
    """One series of a labelled metric (what `labels` returns); it records into the running instance."""

    __slots__ = ("_definition", "_values")

    def __init__(self, definition: Definition, values: Tuple[str, ...]) -> None:
        self._definition = definition
        self._values = values

    def _series(self) -> List[float]:
        return _registry(self._definition.name).series(self._definition, self._values)

    def inc(self, amount: float = 1.0) -> None:
        _increment(self._definition, self._series(), amount)

    def dec(self, amount: float = 1.0) -> None:
        _require(self._definition, GAUGE, "dec")
        self._series()[0] -= amount

    def set(self, value: float) -> None:
        _require(self._definition, GAUGE, "set")
        self._series()[0] = float(value)

    def observe(self, value: float) -> None:
        _require(self._definition, HISTOGRAM, "observe")
        observe(self._definition, self._series(), float(value))


def _require(definition: Definition, kind: str, method: str) -> None:
    if definition.kind != kind:
        raise PyTritonInvalidOperationError(f"metric '{definition.name}' is a {definition.kind}: it has no {method}()")


def _increment(definition: Definition, series: List[float], amount: float) -> None:
    if definition.kind == HISTOGRAM:
        raise PyTritonInvalidOperationError(f"metric '{definition.name}' is a histogram: use observe()")
    if definition.kind == COUNTER and not amount >= 0:
        raise PyTritonBadParameterError(
            f"counter '{definition.name}' can only grow: inc({amount!r}) needs an amount >= 0 (use a Gauge for values "
            "that go down)"
        )
    series[0] += amount


class Counter(_Metric):
    """A value that only grows (requests, tokens, errors): Prometheus' counter.

    Args:
        name: the family's name; Prometheus' convention ends a counter's name in ``_total``.
        documentation: the help text shown with it.
        labelnames: names of the labels the callable gives each value (besides model, version
            and instance, which pytriton adds).
    """

    _kind = COUNTER

    def inc(self, amount: float = 1.0) -> None:
        """Add `amount` (>= 0) to the series without labels."""
        _increment(self._definition, self._own_series(), amount)


class Gauge(_Metric):
    """A value that goes up and down (a cache's size, items in a queue): Prometheus' gauge."""

    _kind = GAUGE

    def set(self, value: float) -> None:
        self._own_series()[0] = float(value)

    def inc(self, amount: float = 1.0) -> None:
        self._own_series()[0] += amount

    def dec(self, amount: float = 1.0) -> None:
        self._own_series()[0] -= amount


class Histogram(_Metric):
    """Observations counted in buckets (latencies, lengths): Prometheus' histogram.

    Args:
        buckets: increasing upper bounds; +Inf is added. `DEFAULT_BUCKETS` when not given.
    """

    _kind = HISTOGRAM

    def __init__(self, name: str, documentation: str, labelnames: Iterable[str] = (),
                 buckets: Optional[Iterable[float]] = None) -> None:
        bounds = tuple(float(bound) for bound in (DEFAULT_BUCKETS if buckets is None else buckets))
        if bounds and bounds[-1] == math.inf:
            bounds = bounds[:-1]
        if not bounds or any(b >= a for b, a in zip(bounds, bounds[1:])) or any(math.isnan(b) for b in bounds):
            raise PyTritonBadParameterError(
                f"histogram '{name}': buckets {list(bounds)} must be one or more increasing numbers"
            )
        super().__init__(name, documentation, labelnames, bounds)

    def observe(self, value: float) -> None:
        observe(self._definition, self._own_series(), float(value))
