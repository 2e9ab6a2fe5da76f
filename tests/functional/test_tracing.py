"""OpenTelemetry traces that go on into the callable: Triton's spans and pytriton's ("pytriton hop",
"callable", the user's own) reach one collector as one trace, against the real server and a real
OTLP/HTTP receiver run by the test."""

from __future__ import annotations

import asyncio
import http.server
import json
import threading
import time
from typing import Dict, Iterator, List

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from support import server_config, wait_until

from pytriton.decorators import batch
from pytriton.model_config import ModelConfig, Tensor
from pytriton.triton import Triton

pytestmark = pytest.mark.functional

trace_service = pytest.importorskip("opentelemetry.proto.collector.trace.v1.trace_service_pb2")

TENSORS = {
    "inputs": [Tensor(name="x", dtype=np.float32, shape=(2,))],
    "outputs": [Tensor(name="y", dtype=np.float32, shape=(2,))],
}
HOP, CALLABLE = "pytriton hop", "callable"


class Collector:
    """An OTLP/HTTP receiver on a free port: keeps every span POSTed to /v1/traces, flattened.

    Triton sends OTLP as JSON, the Python SDK as protobuf; both end up as dicts of the ids (hex),
    the parent's id ("" for a root), the name, the status code (2: error), the events' names and
    the resource's attributes.
    """

    def __init__(self) -> None:
        self.spans: List[dict] = []
        self.lock = threading.Lock()
        collector = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if "json" in self.headers.get("Content-Type", ""):
                    spans = list(_from_json(json.loads(body)))
                    reply, kind = b"{}", "application/json"
                else:
                    message = trace_service.ExportTraceServiceRequest()
                    message.ParseFromString(body)
                    spans = list(_from_protobuf(message))
                    reply = trace_service.ExportTraceServiceResponse().SerializeToString()
                    kind = "application/x-protobuf"
                with collector.lock:
                    collector.spans.extend(spans)
                self.send_response(200)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1/traces"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def named(self, name: str) -> List[dict]:
        with self.lock:
            return [span for span in self.spans if span["name"] == name]

    def by_id(self) -> Dict[str, dict]:
        with self.lock:
            return {span["span_id"]: span for span in self.spans}

    def wait_for(self, name: str, count: int, timeout_s: float = 20.0) -> List[dict]:
        wait_until(lambda: len(self.named(name)) >= count, timeout_s)
        return self.named(name)


def _value(value: dict):
    for key in ("stringValue", "intValue", "boolValue", "doubleValue"):
        if key in value:
            return value[key]
    return None


def _from_json(document: dict) -> Iterator[dict]:
    for resource_spans in document.get("resourceSpans", ()):
        resource = {a["key"]: _value(a["value"]) for a in resource_spans.get("resource", {}).get("attributes", ())}
        for scope in resource_spans.get("scopeSpans", ()):
            for span in scope.get("spans", ()):
                status = span.get("status", {}).get("code", 0)
                yield {
                    "trace_id": span["traceId"].lower(), "span_id": span["spanId"].lower(),
                    "parent_id": span.get("parentSpanId", "").lower(), "name": span["name"],
                    "status": 2 if status in (2, "STATUS_CODE_ERROR") else 0,
                    "events": [event.get("name") for event in span.get("events", ())],
                    "start": int(span.get("startTimeUnixNano", 0)), "end": int(span.get("endTimeUnixNano", 0)),
                    "resource": resource,
                }


def _from_protobuf(message) -> Iterator[dict]:
    for resource_spans in message.resource_spans:
        resource = {a.key: getattr(a.value, a.value.WhichOneof("value")) for a in resource_spans.resource.attributes}
        for scope in resource_spans.scope_spans:
            for span in scope.spans:
                yield {
                    "trace_id": span.trace_id.hex(), "span_id": span.span_id.hex(),
                    "parent_id": span.parent_span_id.hex(), "name": span.name,
                    "status": int(span.status.code), "events": [event.name for event in span.events],
                    "start": span.start_time_unix_nano, "end": span.end_time_unix_nano, "resource": resource,
                }


def _tracing_config(collector: Collector, *extra: str) -> List[str]:
    return [
        "mode=opentelemetry", f"opentelemetry,url={collector.url}", "level=TIMESTAMPS",
        "opentelemetry,resource=service.name=traced-test", "opentelemetry,resource=deployment=ci",
        "opentelemetry,bsp_schedule_delay=50", *extra,
    ]


def _infer(address: str, protocol: str, model: str, value: float = 1.0) -> np.ndarray:
    module = httpclient if protocol == "http" else grpcclient
    client = module.InferenceServerClient(address)
    try:
        data = module.InferInput("x", [1, 2], "FP32")
        data.set_data_from_numpy(np.full((1, 2), value, np.float32))
        return client.infer(model, [data]).as_numpy("y")
    finally:
        client.close()


def _traced(requests):
    answers = []
    for request in requests:
        with request.traced_span("inner") as span:  # None, and no span, for a request not sampled
            if span is not None:
                span.set_attribute("rows", int(request["x"].shape[0]))
            answers.append({"y": request["x"] * 2})
    return answers


async def _traced_async(requests):
    await asyncio.sleep(0.01)
    answers = []
    for request in requests:
        with request.traced_span("inner"):
            answers.append({"y": request["x"] * 2})
    return answers


def _streaming(requests):
    for step in range(2):
        time.sleep(0.1)
        with requests[0].traced_span(f"step {step}"):
            yield [{"y": request["x"] * step} for request in requests]


def _failing(requests):
    raise ValueError("no answer today")


class BatchSpans:
    """An @batch callable that keeps the span ids it is given through ``spans``."""

    def __init__(self) -> None:
        self.span_ids: List[str] = []

    def __call__(self, x, spans):
        self.span_ids.extend(f"{span.get_span_context().span_id:016x}" for span in spans if span is not None)
        return {"y": x * 2}


@pytest.fixture(scope="module")
def served() -> Iterator[dict]:
    collector = Collector()
    config = server_config(trace_config=_tracing_config(collector, "rate=1"))
    batch_spans = BatchSpans()
    try:
        with Triton(config=config) as triton:
            triton.bind("Traced", _traced, config=ModelConfig(max_batch_size=4), **TENSORS)
            triton.bind("TracedAsync", _traced_async, config=ModelConfig(max_batch_size=4), **TENSORS)
            triton.bind("Failing", _failing, config=ModelConfig(max_batch_size=4), **TENSORS)
            triton.bind("Batched", batch(batch_spans), config=ModelConfig(max_batch_size=4), **TENSORS)
            triton.bind("Forked", _traced, config=ModelConfig(max_batch_size=4, process_instances=True), **TENSORS)
            triton.bind("Streaming", _streaming, config=ModelConfig(max_batch_size=4, decoupled=True), **TENSORS)
            yield {"collector": collector, "batch_spans": batch_spans,
                   "http": f"127.0.0.1:{config.http_port}", "grpc": f"127.0.0.1:{config.grpc_port}"}
    finally:
        collector.close()


def _chain(collector: Collector, inner: dict, timeout_s: float = 20.0) -> List[dict]:
    """`inner` and its ancestors, up to the root, once they all arrived (Triton exports its spans
    on its own schedule, which may be after ours)."""

    def complete() -> List[dict]:
        spans = collector.by_id()
        chain = [inner]
        while chain[-1]["parent_id"]:
            parent = spans.get(chain[-1]["parent_id"])
            if parent is None:
                return []
            chain.append(parent)
        return chain

    chain = wait_until(complete, timeout_s)
    assert chain, f"some ancestor of {inner['name']} never arrived: {collector.spans}"
    return chain


@pytest.mark.parametrize(("protocol", "model"), [
    ("http", "Traced"), ("grpc", "Traced"), ("http", "TracedAsync"), ("grpc", "TracedAsync"),
    ("http", "Forked"),  # a process instance: its forked child exports its own spans
])
def test_one_trace_goes_from_triton_through_the_hop_into_the_callable(served, protocol, model):
    collector: Collector = served["collector"]
    before = len(collector.named("inner"))
    np.testing.assert_array_equal(_infer(served[protocol], protocol, model), np.full((1, 2), 2.0, np.float32))
    inner = collector.wait_for("inner", before + 1)[-1]
    chain = _chain(collector, inner)
    names = [span["name"] for span in chain]
    # The hop's parent is Triton's span of the model, below Triton's root span of the request.
    assert names == ["inner", CALLABLE, HOP, model, "InferRequest"], names
    assert {span["trace_id"] for span in chain} == {inner["trace_id"]}
    # Ours carry the resource the trace_config gives (as Triton's do), not the SDK's defaults.
    for span in chain[:3]:
        assert span["resource"]["service.name"] == "traced-test"
        assert span["resource"]["deployment"] == "ci"
    inner, call, hop, model_span = chain[:4]
    assert model_span["start"] <= hop["start"] <= call["start"] <= inner["start"]
    assert inner["end"] <= call["end"] <= hop["end"]


def test_the_callable_span_of_a_stream_covers_the_whole_run(served):
    collector: Collector = served["collector"]
    answers: list = []
    client = grpcclient.InferenceServerClient(served["grpc"])
    try:
        client.start_stream(callback=lambda result, error: answers.append(error or result))
        data = grpcclient.InferInput("x", [1, 2], "FP32")
        data.set_data_from_numpy(np.ones((1, 2), np.float32))
        client.async_stream_infer("Streaming", [data], enable_empty_final_response=True)
        assert wait_until(lambda: len(answers) >= 3, 20.0), answers
    finally:
        client.stop_stream()
        client.close()
    last = collector.wait_for("step 1", 1)[-1]
    call = wait_until(lambda: collector.by_id().get(last["parent_id"]), 20.0)
    assert call is not None and call["name"] == CALLABLE
    assert call["end"] - call["start"] >= 0.2e9  # both steps of the generator, not only its creation
    assert collector.named("step 0")[-1]["parent_id"] == call["span_id"]


def test_a_callable_that_raises_marks_its_span_as_an_error(served):
    collector: Collector = served["collector"]
    with pytest.raises(Exception, match="no answer today"):
        _infer(served["http"], "http", "Failing")
    failed = wait_until(lambda: [span for span in collector.named(CALLABLE) if span["status"] == 2], 20.0)
    assert failed[-1]["events"] == ["exception"]
    hop = wait_until(lambda: collector.by_id().get(failed[-1]["parent_id"]), 20.0)
    assert hop is not None and hop["name"] == HOP


def test_a_batch_callable_gets_the_spans_of_its_requests(served):
    collector: Collector = served["collector"]
    _infer(served["grpc"], "grpc", "Batched")
    assert len(served["batch_spans"].span_ids) == 1
    given = served["batch_spans"].span_ids[-1]
    wait_until(lambda: given in collector.by_id(), 20.0)
    assert collector.by_id()[given]["name"] == CALLABLE


def test_the_sampling_rate_is_triton_s_and_bind_may_set_it_for_one_model():
    collector = Collector()
    config = server_config(trace_config=_tracing_config(collector, "rate=1"))
    try:
        with Triton(config=config) as triton:
            triton.bind("Sampled", _traced, config=ModelConfig(max_batch_size=4), trace_config=["rate=2"], **TENSORS)
            for value in range(4):
                _infer(f"127.0.0.1:{config.http_port}", "http", "Sampled", float(value))
            hops = collector.wait_for(HOP, 2)
            time.sleep(0.5)  # any further span would have arrived by now
            hops = collector.named(HOP)
        assert len(hops) == 2
        assert len({span["trace_id"] for span in hops}) == 2
    finally:
        collector.close()


def test_a_stop_sends_the_spans_still_waiting_to_be_exported():
    """With the exporters' default 5 s delay, the spans of a request just served are still held
    when the server stops: Triton's (at the end of its own shutdown) and pytriton's reach the
    collector before `stop()` returns."""
    collector = Collector()
    items = [item for item in _tracing_config(collector, "rate=1") if "bsp_schedule_delay" not in item]
    config = server_config(trace_config=items)
    try:
        with Triton(config=config) as triton:
            triton.bind("Quick", _traced, config=ModelConfig(max_batch_size=4), **TENSORS)
            _infer(f"127.0.0.1:{config.http_port}", "http", "Quick")
            assert collector.named(HOP) == []  # still held by the exporter
        names = {span["name"] for span in collector.spans}
        assert {"InferRequest", "Quick", HOP, CALLABLE, "inner"} <= names, names
    finally:
        collector.close()
