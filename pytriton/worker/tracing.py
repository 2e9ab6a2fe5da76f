"""OpenTelemetry spans of the worker's side of a request: the hop from the proxy, and the callable.

When the server traces with OpenTelemetry (``TritonConfig(trace_config=["mode=opentelemetry",
...])``), Triton exports its own spans for each sampled request, and its Python backend hands the
proxy the request's trace context (a W3C ``traceparent``). The proxy sends those along with the
batch (`pytriton.ipc.protocol.InferBatch.traces`), and this module continues each trace in the
user's process, so one trace shows client -> Triton -> the hop to the worker -> the callable:

- ``pytriton hop``, a child of the span Triton's context names, from the proxy's send of the
  batch until the worker sent the answer;
- ``callable``, a child of the hop, from just before the call until the callable returned (for a
  generator or a coroutine: until its whole run ended). It is the request's `Request.span`, so the
  user's own spans (`Request.traced_span`) nest below it. It is marked as an error, with the
  exception as an event, when the callable raised for its request.

Spans are exported with the OpenTelemetry SDK (the optional extra ``pytriton[telemetry]``:
`pytriton.install_hints.TELEMETRY_EXTRA`) over OTLP/HTTP, to the collector and with the resource attributes that the
server's trace_config gives. Without the SDK, tracing is off with one log line; requests then have
no span. Sampling is Triton's (its ``rate``): spans are made only for requests whose context
Triton passes.

Each process makes its exporter the first time it needs one: a provider made before a fork would
carry a dead export thread into the child (process instances).
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import logging
import os
import threading
import time
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

from pytriton.install_hints import TELEMETRY_EXTRA

logger = logging.getLogger("pytriton.tracing")

DEFAULT_URL = "http://localhost:4318/v1/traces"
"""Where Triton itself exports when its trace_config names no ``opentelemetry,url``."""
DEFAULT_SERVICE_NAME = "pytriton"
"""The ``service.name`` of pytriton's spans when the trace_config's resource gives none."""
HOP_SPAN = "pytriton hop"
CALLABLE_SPAN = "callable"

# The batch-span-processor settings of Triton's trace_config that the worker's exporter follows too.
_BSP_SETTINGS = {
    "bsp_max_queue_size": "max_queue_size",
    "bsp_schedule_delay": "schedule_delay_millis",
    "bsp_max_export_batch_size": "max_export_batch_size",
}


@dataclasses.dataclass(frozen=True)
class TraceExport:
    """Where and how the worker exports its spans: what the server's trace_config says for its own."""

    url: str = DEFAULT_URL
    resource: Tuple[Tuple[str, str], ...] = ()
    """The ``opentelemetry,resource=<key>=<value>`` items, in order."""
    processor: Tuple[Tuple[str, int], ...] = ()
    """`BatchSpanProcessor` keyword arguments from the ``opentelemetry,bsp_*`` items."""


def export_settings(trace_config: Optional[Sequence[str]]) -> Optional[TraceExport]:
    """The worker's export settings when `trace_config` (``--trace-config`` items) has Triton trace
    with OpenTelemetry (``mode=opentelemetry``); None otherwise (then nothing of this module runs)."""
    items = [item.strip() for item in trace_config or () if isinstance(item, str)]
    if not any(item.replace(" ", "").lower() == "mode=opentelemetry" for item in items):
        return None
    url = DEFAULT_URL
    resource: List[Tuple[str, str]] = []
    processor: List[Tuple[str, int]] = []
    for item in items:
        mode, comma, setting = item.partition(",")
        if not comma or mode.strip().lower() != "opentelemetry":
            continue
        key, _, value = setting.partition("=")
        key = key.strip()
        if key == "url":
            url = value.strip()
        elif key == "resource":
            name, _, text = value.partition("=")
            resource.append((name.strip(), text.strip()))
        elif key in _BSP_SETTINGS and value.strip().isdigit():
            processor.append((_BSP_SETTINGS[key], int(value)))
    return TraceExport(url, tuple(resource), tuple(processor))


class _Exporter:
    """One process's tracer for one `TraceExport`, with the provider that exports its spans."""

    def __init__(self, settings: TraceExport) -> None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        attributes = {"service.name": DEFAULT_SERVICE_NAME, **dict(settings.resource)}
        # Not the process's global provider: the user's own tracing setup stays theirs.
        self.provider = TracerProvider(resource=Resource.create(attributes), shutdown_on_exit=False)
        options: Dict[str, Any] = dict(settings.processor)
        self.provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=settings.url), **options))
        self.tracer = self.provider.get_tracer("pytriton")


_exporters: Dict[Tuple[int, TraceExport], Optional[_Exporter]] = {}
"""By (process id, settings): a child's entries are its own, whatever it inherited at the fork."""
_exporters_lock = threading.Lock()
_unavailable_told = False


def _exporter(settings: TraceExport) -> Optional[_Exporter]:
    """This process's exporter for `settings`, made at first use; None without the SDK."""
    key = (os.getpid(), settings)
    try:
        return _exporters[key]
    except KeyError:
        pass
    global _unavailable_told
    with _exporters_lock:
        if key not in _exporters:
            try:
                _exporters[key] = _Exporter(settings)
            except ImportError as exc:
                _exporters[key] = None
                if not _unavailable_told:
                    _unavailable_told = True
                    logger.warning("Triton traces with OpenTelemetry, but pytriton cannot continue the traces into "
                                   "the callables (%s); for that, the pytriton[telemetry] extra: %s", exc,
                                   TELEMETRY_EXTRA)
        return _exporters[key]


def shutdown(settings: Optional[TraceExport] = None) -> None:
    """Export what this process's exporters hold and stop them (those of `settings` only, if given).

    Called when a `Triton` stops and before a process instance's child exits (``os._exit`` runs
    no exit hooks), so the last spans are not lost.
    """
    pid = os.getpid()
    with _exporters_lock:
        keys = [key for key in _exporters if key[0] == pid and (settings is None or key[1] == settings)]
        exporters = [_exporters.pop(key) for key in keys]
    for exporter in exporters:
        if exporter is not None:
            try:
                exporter.provider.shutdown()
            except Exception:
                logger.debug("Exporting the last spans failed", exc_info=True)


class BatchTrace:
    """The spans of one batch's sampled requests, from their start to the answer's send."""

    __slots__ = ("_spans", "_called_ns", "_status")

    def __init__(self, exporter: _Exporter, traces: Sequence[str], sent_ns: int, requests: Sequence[Any]) -> None:
        from opentelemetry import trace
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        now_ns = time.time_ns()
        # The proxy's send, on this host's monotonic clock, as wall-clock time for the span.
        sent_wall_ns = now_ns - max(0, time.monotonic_ns() - sent_ns) if sent_ns else now_ns
        propagator = TraceContextTextMapPropagator()
        tracer = exporter.tracer
        self._spans: List[Tuple[Any, Any, Any]] = []  # (request, hop span, callable span)
        for request, traceparent in zip(requests, traces):
            if not traceparent:
                continue  # not sampled by Triton
            parent = propagator.extract({"traceparent": traceparent})
            hop = tracer.start_span(HOP_SPAN, context=parent, start_time=sent_wall_ns)
            call = tracer.start_span(CALLABLE_SPAN, context=trace.set_span_in_context(hop), start_time=now_ns)
            request._tracing = (call, tracer)
            self._spans.append((request, hop, call))
        self._called_ns = 0
        self._status: Any = None

    def called(self) -> None:
        """The callable returned its answers (the first time counts): its spans end then."""
        if not self._called_ns:
            self._called_ns = time.time_ns()

    def failed(self, exc: BaseException, requests: Optional[Sequence[Any]] = None) -> None:
        """The callable raised `exc` for `requests` (None: the whole batch): their spans say so."""
        from opentelemetry.trace import Status, StatusCode

        self.called()
        chosen = None if requests is None else {id(request) for request in requests}
        for request, _hop, call in self._spans:
            if chosen is None or id(request) in chosen:
                call.record_exception(exc)
                call.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))

    def end(self) -> None:
        """The answer went (or the batch was given up): end every span."""
        now_ns = time.time_ns()
        for _request, hop, call in self._spans:
            call.end(end_time=self._called_ns or now_ns)
            hop.end(end_time=now_ns)
        self._spans = []


_current: contextvars.ContextVar[Optional[BatchTrace]] = contextvars.ContextVar("pytriton_batch_trace",
                                                                                 default=None)
"""The batch being served by this thread (blocking loop) or task (asyncio loop)."""


def begin(settings: Optional[TraceExport], traces: Sequence[str], sent_ns: int, requests: Sequence[Any]) -> None:
    """Start the spans of a batch that carries trace contexts, and give each sampled request its span."""
    if settings is None or not any(traces):
        return
    exporter = _exporter(settings)
    if exporter is None:
        return
    try:
        _current.set(BatchTrace(exporter, traces, sent_ns, requests))
    except Exception:
        logger.debug("Could not start the spans of a batch", exc_info=True)


def called() -> None:
    """The callable of the current batch returned its answers (see `BatchTrace.called`)."""
    batch = _current.get()
    if batch is not None:
        batch.called()


def failed(exc: BaseException, requests: Optional[Sequence[Any]] = None) -> None:
    """The callable of the current batch raised `exc` (see `BatchTrace.failed`)."""
    batch = _current.get()
    if batch is not None:
        try:
            batch.failed(exc, requests)
        except Exception:
            logger.debug("Could not mark the spans of a failed batch", exc_info=True)


def end() -> None:
    """End the current batch's spans (its answer went); the next batch starts afresh."""
    batch = _current.get()
    if batch is not None:
        _current.set(None)
        batch.end()


@contextlib.contextmanager
def child_span(tracing: Optional[Tuple[Any, Any]], name: str) -> Iterator[Any]:
    """A span `name` below a request's span, current while the block runs; None (and no span) when
    the request has none. For `Request.traced_span`."""
    if tracing is None:
        yield None
        return
    from opentelemetry import trace

    parent, tracer = tracing
    with tracer.start_as_current_span(name, context=trace.set_span_in_context(parent)) as span:
        yield span
