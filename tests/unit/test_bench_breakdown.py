"""bench/breakdown.py without a server: reading Triton's trace, joining the models' stamps, the stage figures."""

from __future__ import annotations

import json
import pathlib
import sys

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))

import breakdown  # noqa: E402


def _trace_events(request_id, start, protocol="http"):
    """Triton's trace events of one request whose compute runs from start+30 to start+230 (us)."""
    us = 1000
    names = {
        "HTTP_RECV_START" if protocol == "http" else "GRPC_WAITREAD_END": start,
        "REQUEST_START": start + 10 * us,
        "QUEUE_START": start + 12 * us,
        "COMPUTE_START": start + 20 * us,
        "COMPUTE_INPUT_END": start + 30 * us,
        "COMPUTE_OUTPUT_START": start + 230 * us,
        "INFER_RESPONSE_COMPLETE": start + 250 * us,
        "HTTP_SEND_END" if protocol == "http" else "GRPC_SEND_END": start + 260 * us,
    }
    return [{"id": request_id, "timestamps": [{"name": name, "ns": ns}]} for name, ns in names.items()]


def test_trace_join_and_stages(tmp_path):
    us = 1000
    events = _trace_events(1, 1_000_000) + _trace_events(2, 2_000_000, "grpc") + [{"id": 3, "model_name": "x"}]
    trace_path = tmp_path / "trace.json"
    trace_path.write_text(json.dumps(events))
    traces = breakdown.read_trace(trace_path)
    assert len(traces) == 2  # the third id has no compute: not a request of the model

    # our eight stamps for request 1 only: entry 40 us after COMPUTE_INPUT_END's start + 30
    start = 1_000_000 + 40 * us
    record = [start + offset * us for offset in (0, 10, 40, 55, 80, 90, 120, 150)]
    (tmp_path / "stamps").mkdir()
    (tmp_path / "stamps" / "identity-0-1.json").write_text(json.dumps({"records": [record]}))
    records = breakdown.read_stamps(tmp_path / "stamps", "identity-*.json")

    http = [t for t in traces if breakdown._protocol_of(t) == "http"]
    joined = breakdown.join(http, records, (0, 10**12))
    assert len(joined) == 1 and joined[0][1] == tuple(record)
    figures = breakdown.stage_figures(joined)
    assert figures["Triton front end (receive, parse)"]["median_us"] == 10.0
    assert figures["Triton queue"]["median_us"] == 8.0
    assert figures["Triton -> stub (into execute)"]["median_us"] == 10.0
    assert figures["execute, all of it (the stub's, or the backend's)"]["median_us"] == 150.0
    assert figures["- carrier to the worker (send, wake)"]["median_us"] == 30.0
    assert figures["- backend or proxy: Triton responses"]["median_us"] == 30.0
    assert figures["stub -> Triton (out of execute)"]["median_us"] == 40.0
    assert figures["server, receive to send"]["median_us"] == 260.0

    grpc = [t for t in traces if breakdown._protocol_of(t) == "grpc"]
    (unmatched,) = breakdown.join(grpc, records, (0, 10**12))
    assert unmatched[1] is None  # no record inside its compute
    assert "execute, all of it (the stub's, or the backend's)" not in breakdown.stage_figures([unmatched])
    assert breakdown.join(grpc, records, (0, 1)) == []  # outside the measured window


def test_the_backends_record_has_no_stub_stages_but_its_own(tmp_path):
    # pytriton's backend reports its compute once the batch is laid out: its execute began before
    # COMPUTE_INPUT_END and ended after COMPUTE_OUTPUT_START, and there is no stub in between.
    us = 1000
    (tmp_path / "trace.json").write_text(json.dumps(_trace_events(1, 1_000_000)))
    (trace,) = breakdown.read_trace(tmp_path / "trace.json")
    record = tuple(1_000_000 + offset * us for offset in (25, 29, 60, 80, 100, 120, 225, 240))
    figures = breakdown.stage_figures([(trace, record)])
    assert "Triton -> stub (into execute)" not in figures and "stub -> Triton (out of execute)" not in figures
    assert figures["- carrier to the worker (send, wake)"]["median_us"] == 31.0
    assert figures["execute, all of it (the stub's, or the backend's)"]["median_us"] == 215.0


def test_markdown_has_every_stage_and_the_cpu_rows():
    stage = {"median_us": 1.0, "p99_us": 2.0, "n": 1}
    side = {"client": {"latency_avg_us": 300.0}, "stages": {label: stage for label, _ in breakdown.STAGES}}
    cpu = {"ms_per_1000_requests": {"tritonserver": 100.0, "stubs": 50.0, "all": 150.0}, "throughput": 1000.0}
    text = breakdown.markdown({"stages": {"http": {"reference": side, "ours": side}},
                               "cpu": {"reference": cpu, "ours": cpu}})
    for label, _ in breakdown.STAGES:
        assert f"| {label} | 1 / 2 | 1 / 2 |" in text
    assert "| plain backend (1,000 infer/s) | 100 | 50 | 0 | 150 |" in text
