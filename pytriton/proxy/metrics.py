"""The proxy's metrics thread: brings its worker's metrics to Triton's own ``/metrics`` port.

The worker keeps the instance's metrics as cumulative values in memory (`pytriton.metrics`,
`pytriton.worker.measures`). About once a second this thread asks for them on the control
channel (`protocol.MetricsPoll`, a DEALER socket of its own) and turns the growth since the last
report into updates of Triton's custom metric families (``pb_utils.MetricFamily``), which
Triton serves beside its ``nv_*`` families. It also sets ``pytriton_requests_in_flight`` from
what the proxy itself sent and has no answer for.

Why the values are pulled and not pushed per batch: one update of a Triton metric from the stub
is a round trip to the server process (measured with Triton 2.51 on the project's 2-core
machine: 23 us for an increment, 45 us for a gauge's set or a histogram's observe), more than
a small batch's whole hop. So the batch path adds numbers in memory and this thread sends only
what changed, once a period.

Why histograms go out as counters: Triton's histogram kind takes one observation per call, so
replaying N batches would cost N round trips. A Prometheus histogram is three kinds of series
(``<name>_bucket`` per upper bound ``le``, cumulative; ``<name>_sum``; ``<name>_count``), which
Prometheus stores as plain series whatever the ``# TYPE`` line says; they are exported as
counter families of those names, so ``histogram_quantile`` and heat maps work unchanged.

Counters continue where an earlier stub of the instance left them: the first time a series is
seen, Triton's current value (what a dead stub pushed, if Triton kept it) is the starting point.
When the worker's values restart (a report from another worker process: one forked anew), its
new values are added on top. Only the stub that greeted the worker last exports: a reload
starts the new stub before the old one ends, and the worker answers the old one's polls with
`protocol.MetricsReport.superseded`, which ends its thread.

Why Triton's metric objects are never deleted: Triton (2.51) hands two metric objects with the
same family and labels one shared Prometheus series, and deleting either one frees that series
under the other. A reload or a heal starts the new stub, whose objects carry the same labels,
before the old stub is finalized; the old stub's deletions then freed the series the new stub
went on updating, and the server's heap was corrupted (seen as tritonserver hung in its own
abort handler, answering nothing, after `load_model` calls). So `close` keeps the objects alive
for the rest of the stub's life, interpreter shutdown included: the stub never sends a delete,
and the series live on for the next stub of the instance (whose counters continue from them).
After a model is unloaded for good its series stay on ``/metrics`` with their last values.

Imports only the standard library, zmq and `pytriton.ipc`, like the rest of the proxy.
"""

from __future__ import annotations

import ctypes
import itertools
import logging
import math
import os
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

import zmq

from pytriton.ipc import protocol

logger = logging.getLogger("pytriton.proxy")

PERIOD_S = 1.0
"""How often the worker is asked for its metrics (well within any scrape interval)."""
_REPOLL_S = 10.0
"""How long an unanswered poll is waited for before another is sent (the worker's handler answers
between batches, so a long call delays the answer)."""

IN_FLIGHT = "pytriton_requests_in_flight"
_IN_FLIGHT_HELP = "Requests sent to the inference callable and not answered yet"

Labels = Tuple[Tuple[str, str], ...]


def bound_label(bound: float) -> str:
    """A bucket bound as Prometheus writes the ``le`` label (``0.005``, ``1``, ``+Inf``)."""
    if math.isinf(bound):
        return "+Inf"
    return repr(float(bound)).removesuffix(".0") if float(bound).is_integer() else repr(float(bound))


def histogram_series(name: str, buckets: Tuple[float, ...], labels: Labels,
                     value: Tuple[float, ...]) -> Tuple[Tuple[str, Labels, float], ...]:
    """The counter series of one histogram series: cumulative ``_bucket`` per bound, ``_sum``, ``_count``.

    `value` holds the counts per bucket (+Inf last), then the sum and the count, as
    `protocol.MetricsReport` carries them.
    """
    counts = value[:-2]
    bounds = (*buckets, math.inf)
    series = [(f"{name}_bucket", (*labels, ("le", bound_label(bound))), float(total))
              for bound, total in zip(bounds, itertools.accumulate(counts))]
    series.append((f"{name}_sum", labels, float(value[-2])))
    series.append((f"{name}_count", labels, float(value[-1])))
    return tuple(series)


def counter_increment(last: Optional[float], current: float, start: float) -> float:
    """How much to add to a Triton counter for the worker's cumulative value `current`.

    `last` is the worker's value at the previous report (None: first seen, when `start` is
    Triton's current value of the series); a value below `last` means the worker restarted.
    """
    if last is None:
        return max(0.0, current - start)
    if current < last:
        return current
    return current - last


class MetricsExporter:
    """The thread that keeps Triton's metric families up to date for one model instance.

    Args:
        pb_utils: Triton's ``triton_python_backend_utils`` module.
        zmq_context: the proxy's ZeroMQ context (this thread has a socket of its own in it).
        endpoint: the worker handler's control endpoint.
        instance: the instance number (the poll says it).
        labels: the labels of the proxy's own series (model, version, instance).
        in_flight: how many requests the proxy has sent and not had answered.
        period_s: how often to ask.
    """

    def __init__(self, pb_utils: Any, zmq_context: Any, endpoint: str, instance: int, labels: Labels,
                 in_flight: Callable[[], int], period_s: float = PERIOD_S) -> None:
        self._pb = pb_utils
        self._poll = protocol.encode(protocol.MetricsPoll(instance, os.getpid()))
        self._labels = labels
        self._in_flight = in_flight
        self._period_s = period_s
        self._families: Dict[str, Any] = {}  # Triton's family objects, kept alive while their metrics are
        self._series: Dict[Tuple[str, Labels], List[Any]] = {}  # [metric, worker's last value or None]
        self._socket = zmq_context.socket(zmq.DEALER)
        self._socket.setsockopt(zmq.LINGER, 0)
        self._socket.connect(endpoint)
        self._closing = threading.Event()
        self._failed = False
        self._worker_pid: Optional[int] = None  # the process whose values the last report held
        self._thread = threading.Thread(target=self._run, name="pytriton-metrics", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asked = -math.inf
        while not self._closing.is_set():
            period_end = time.monotonic() + self._period_s
            try:
                self._gauge(IN_FLIGHT, _IN_FLIGHT_HELP, self._labels, float(self._in_flight()))
                if time.monotonic() - asked >= _REPOLL_S:
                    self._socket.send(self._poll)
                    asked = time.monotonic()
                while (left := period_end - time.monotonic()) > 0 and not self._closing.is_set():
                    if self._socket.poll(int(min(left, 0.1) * 1000)):
                        message = protocol.decode(self._socket.recv())
                        if isinstance(message, protocol.MetricsReport):
                            if message.superseded:
                                logger.debug("pytriton metrics: a newer stub exports this instance's metrics")
                                return
                            self.apply(message)
                            asked = -math.inf  # answered: ask again at the next period
            except zmq.ZMQError:
                return  # the socket was closed: the proxy is finalising
            except Exception:
                if not self._failed:
                    logger.exception("pytriton metrics: updating Triton's metric families failed; retrying")
                    self._failed = True
                self._closing.wait(self._period_s)

    def apply(self, report: protocol.MetricsReport) -> None:
        """Bring Triton's families to the cumulative values of `report`."""
        if report.worker_pid != self._worker_pid:
            if self._worker_pid is not None:  # a fresh worker process: its values count from zero
                for entry in self._series.values():
                    if entry[1] is not None:
                        entry[1] = 0.0
            self._worker_pid = report.worker_pid
        for name, documentation, kind, buckets, series in report.families:
            for labels, value in series:
                labels = tuple((str(key), str(text)) for key, text in labels)
                if kind == "histogram":
                    for part, part_labels, part_value in histogram_series(name, tuple(buckets), labels, value):
                        self._counter(part, documentation, part_labels, part_value)
                elif kind == "counter":
                    self._counter(name, documentation, labels, float(value))
                else:
                    self._gauge(name, documentation, labels, float(value))

    def _family(self, name: str, documentation: str, kind: Any) -> Any:
        family = self._families.get(name)
        if family is None:
            family = self._families[name] = self._pb.MetricFamily(name=name, description=documentation, kind=kind)
        return family

    def _counter(self, name: str, documentation: str, labels: Labels, current: float) -> None:
        entry = self._series.get((name, labels))
        if entry is None:
            metric = self._family(name, documentation, self._pb.MetricFamily.COUNTER).Metric(labels=dict(labels))
            increment = counter_increment(None, current, metric.value())
            entry = self._series[(name, labels)] = [metric, current]
        else:
            increment = counter_increment(entry[1], current, 0.0)
            entry[1] = current
        if increment > 0:
            entry[0].increment(increment)

    def _gauge(self, name: str, documentation: str, labels: Labels, current: float) -> None:
        entry = self._series.get((name, labels))
        if entry is None:
            metric = self._family(name, documentation, self._pb.MetricFamily.GAUGE).Metric(labels=dict(labels))
            entry = self._series[(name, labels)] = [metric, None]
        if entry[1] != current:
            entry[0].set(current)
            entry[1] = current

    def close(self) -> None:
        """Stop the thread and close its socket (before the proxy's ZeroMQ context ends).

        Triton's metric and family objects are kept, never deleted (see the module's docstring).
        """
        self._closing.set()
        self._thread.join(2 * self._period_s + 1.0)
        self._socket.close(linger=0)
        keep_forever((self._families, self._series))


def keep_forever(objects: Any) -> None:
    """Give `objects` a reference that is never dropped, so not even interpreter shutdown frees them.

    A module-level list would not do: shutdown clears modules, and freeing a Python backend metric
    object sends Triton the delete this must avoid.
    """
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(objects))
