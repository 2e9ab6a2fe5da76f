"""The worker's side of OpenTelemetry tracing without a server: which trace_config turns it on,
the spans a batch gets, and tracing turned off (one log line) when the SDK is missing."""

from __future__ import annotations

import logging
import sys
import types

import numpy as np
import pytest

from pytriton.decorators import batch
from pytriton.worker import tracing
from pytriton.worker.request import Request, rebuilt

sdk_trace = pytest.importorskip("opentelemetry.sdk.trace")
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402
from opentelemetry.trace import StatusCode  # noqa: E402

PARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def test_tracing_is_on_only_in_opentelemetry_mode_and_follows_the_export_settings():
    assert tracing.export_settings(None) is None
    assert tracing.export_settings(["triton,file=/tmp/trace.json", "rate=1"]) is None
    settings = tracing.export_settings([
        "mode=opentelemetry", "opentelemetry,url=http://collector:4318/v1/traces", "rate=2",
        "opentelemetry,resource=service.name=svc", "opentelemetry,resource=team=a=b",
        "opentelemetry,bsp_schedule_delay=50", "opentelemetry,bsp_max_export_batch_size=8",
    ])
    assert settings == tracing.TraceExport(
        "http://collector:4318/v1/traces", (("service.name", "svc"), ("team", "a=b")),
        (("schedule_delay_millis", 50), ("max_export_batch_size", 8)),
    )
    assert tracing.export_settings(["mode=opentelemetry"]).url == tracing.DEFAULT_URL


def _memory_exporter():
    spans = InMemorySpanExporter()
    provider = sdk_trace.TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    return types.SimpleNamespace(tracer=provider.get_tracer("test"), provider=provider), spans


def test_sampled_requests_get_a_hop_and_a_callable_span_and_failures_mark_only_their_own():
    exporter, spans = _memory_exporter()
    requests = [Request({"x": np.ones(1)}) for _ in range(3)]
    trace = tracing.BatchTrace(exporter, (PARENT, "", PARENT), 0, requests)
    assert requests[1].span is None  # Triton did not sample it
    with requests[0].traced_span("inner") as inner:
        assert inner is not None
    assert rebuilt(requests[2], {"x": np.zeros(1)}).span is requests[2].span  # decorators keep it
    trace.failed(ValueError("bad"), [requests[2]])
    trace.end()
    by_name = {}
    for span in spans.get_finished_spans():
        by_name.setdefault(span.name, []).append(span)
    hops, calls = by_name[tracing.HOP_SPAN], by_name[tracing.CALLABLE_SPAN]
    assert len(hops) == 2 and len(calls) == 2
    assert {f"{hop.parent.span_id:016x}" for hop in hops} == {"b7ad6b7169203331"}
    assert {call.parent.span_id for call in calls} == {hop.context.span_id for hop in hops}
    assert by_name["inner"][0].parent.span_id == requests[0].span.get_span_context().span_id
    statuses = {call.context.span_id: call.status.status_code for call in calls}
    assert statuses[requests[2].span.get_span_context().span_id] == StatusCode.ERROR
    assert statuses[requests[0].span.get_span_context().span_id] == StatusCode.UNSET
    assert [event.name for event in requests[2].span.events] == ["exception"]


def test_a_batch_callable_that_names_spans_gets_one_per_request():
    exporter, _spans = _memory_exporter()
    requests = [Request({"x": np.ones((1, 1))}) for _ in range(2)]
    trace = tracing.BatchTrace(exporter, ("", PARENT), 0, requests)
    given = []

    @batch
    def infer(x, spans):
        given.extend(spans)
        return {"y": x}

    infer(requests)
    trace.end()
    assert given == [None, requests[1].span]


def test_without_the_sdk_tracing_is_off_with_one_log_line(monkeypatch, caplog):
    monkeypatch.setitem(sys.modules, "opentelemetry.sdk.trace", None)  # its import now fails
    monkeypatch.setattr(tracing, "_exporters", {})
    monkeypatch.setattr(tracing, "_unavailable_told", False)
    settings = tracing.TraceExport("http://127.0.0.1:9/v1/traces")
    with caplog.at_level(logging.WARNING, logger="pytriton.tracing"):
        for _ in range(2):
            request = Request({"x": np.ones(1)})
            tracing.begin(settings, (PARENT,), 0, [request])
            tracing.end()
            assert request.span is None
            with request.traced_span("inner") as span:
                assert span is None
    assert len([record for record in caplog.records if "pytriton[telemetry]" in record.getMessage()]) == 1
