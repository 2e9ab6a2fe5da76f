"""Where one request's time goes, stage by stage, and the CPU each process spends (``run.py --breakdown``).

Two measurements, each on three servers: the plain Python-backend reference, ours on pytriton's
backend (``ours``) and ours on the proxy path (``proxy``, ``model_backend="python"``):

1. **Stages at concurrency 1**, 16 values, over HTTP and gRPC. Triton traces every request's
   timestamps (``--trace-config triton,file=...,level=TIMESTAMPS,rate=1``), and the Python
   models record their own: the reference its `execute`'s entry and exit, ours the eight stamps
   of `pytriton.ipc.protocol.Stamp` (``PYTRITON_HOP_STAMPS``). Every clock is the host's
   monotonic clock, so a request's Triton timestamps and its batch's stamps line up: at
   concurrency 1 each batch is one request, found as the record whose entry falls between
   the request's COMPUTE_INPUT_END and COMPUTE_OUTPUT_START. Each stage gets its median and
   99th percentile in microseconds.
2. **CPU per 1,000 requests at concurrency 16** over HTTP, untraced: the user and system time
   of tritonserver, of the Python-backend stubs and (ours) of the user's process, read from
   ``/proc`` before and after one perf_analyzer run, divided by the requests Triton counted.

Tracing costs Triton some time per request on both servers alike; the client latency of the
stage table is therefore a little above the untraced run's.
"""

from __future__ import annotations

import bisect
import json
import pathlib
import statistics
import time
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

import psutil
from report import say

VALUES = 16
CONCURRENCY_STAGES = 1
CONCURRENCY_CPU = 16
WINDOW_MS = 2000

# Stamps of ours (pytriton.ipc.protocol.Stamp), by index.
EXECUTE, SENT, RECEIVED, DECODED, CALLED, ANSWERED, RESULT, RESPONDED = range(8)

Stage = Tuple[str, Callable[[Dict[str, int], Optional[Sequence[int]]], Optional[int]]]


def _between(first: str, last: str) -> Callable[[Dict[str, int], Optional[Sequence[int]]], Optional[int]]:
    def stage(trace: Dict[str, int], _stamps: Optional[Sequence[int]]) -> Optional[int]:
        if first in trace and last in trace:
            return trace[last] - trace[first]
        return None

    return stage


def _received(trace: Dict[str, int]) -> Optional[int]:
    """When the request's bytes began to be read (gRPC's wait for a read includes idle time)."""
    return trace.get("HTTP_RECV_START", trace.get("GRPC_WAITREAD_END"))


def _front_end(trace: Dict[str, int], _stamps: Optional[Sequence[int]]) -> Optional[int]:
    start = _received(trace)
    return trace["REQUEST_START"] - start if start is not None and "REQUEST_START" in trace else None


def _reply(trace: Dict[str, int], _stamps: Optional[Sequence[int]]) -> Optional[int]:
    end = trace.get("HTTP_SEND_END", trace.get("GRPC_SEND_END"))
    return end - trace["INFER_RESPONSE_COMPLETE"] if end is not None and "INFER_RESPONSE_COMPLETE" in trace else None


def _server_total(trace: Dict[str, int], _stamps: Optional[Sequence[int]]) -> Optional[int]:
    start = _received(trace)
    end = trace.get("HTTP_SEND_END", trace.get("GRPC_SEND_END"))
    return end - start if start is not None and end is not None else None


def _to_stub(trace: Dict[str, int], stamps: Optional[Sequence[int]]) -> Optional[int]:
    """From Triton's compute to the stub's execute (pytriton's backend has no stub: it reports
    its compute once the batch is laid out, after its execute began)."""
    if not stamps or stamps[0] < trace["COMPUTE_INPUT_END"]:
        return None
    return stamps[0] - trace["COMPUTE_INPUT_END"]


def _from_stub(trace: Dict[str, int], stamps: Optional[Sequence[int]]) -> Optional[int]:
    if not stamps or stamps[-1] > trace["COMPUTE_OUTPUT_START"]:
        return None
    return trace["COMPUTE_OUTPUT_START"] - stamps[-1]


def _stamp(first: int, last: int) -> Callable[[Dict[str, int], Optional[Sequence[int]]], Optional[int]]:
    """A stage inside ours' `execute` (the reference records only the entry and the exit)."""

    def stage(_trace: Dict[str, int], stamps: Optional[Sequence[int]]) -> Optional[int]:
        return stamps[last] - stamps[first] if stamps and len(stamps) == RESPONDED + 1 else None

    return stage


def _execute(trace: Dict[str, int], stamps: Optional[Sequence[int]]) -> Optional[int]:
    return stamps[-1] - stamps[0] if stamps else None


STAGES: List[Stage] = [
    ("Triton front end (receive, parse)", _front_end),
    ("Triton queue", _between("QUEUE_START", "COMPUTE_START")),
    ("Triton compute input (ours on the backend: the batch laid out)", _between("COMPUTE_START",
                                                                                 "COMPUTE_INPUT_END")),
    ("Triton compute infer (the stub, or the hop and the callable)", _between("COMPUTE_INPUT_END",
                                                                               "COMPUTE_OUTPUT_START")),
    ("Triton -> stub (into execute)", _to_stub),
    ("execute, all of it (the stub's, or the backend's)", _execute),
    ("- backend or proxy: read requests, lay out", _stamp(EXECUTE, SENT)),
    ("- carrier to the worker (send, wake)", _stamp(SENT, RECEIVED)),
    ("- worker: decode, build requests", _stamp(RECEIVED, DECODED)),
    ("- @batch and the callable", _stamp(DECODED, CALLED)),
    ("- worker: check, encode", _stamp(CALLED, ANSWERED)),
    ("- carrier back (send, wake)", _stamp(ANSWERED, RESULT)),
    ("- backend or proxy: Triton responses", _stamp(RESULT, RESPONDED)),
    ("stub -> Triton (out of execute)", _from_stub),
    ("Triton compute output", _between("COMPUTE_OUTPUT_START", "INFER_RESPONSE_COMPLETE")),
    ("Triton reply (send)", _reply),
    ("server, receive to send", _server_total),
]


def read_trace(path: pathlib.Path) -> List[Dict[str, int]]:
    """Triton's trace file: one dict of timestamp name -> ns per traced request."""
    events = json.loads(path.read_text())
    requests: Dict[int, Dict[str, int]] = {}
    for event in events:
        stamps = requests.setdefault(int(event["id"]), {})
        for timestamp in event.get("timestamps", ()):
            stamps.setdefault(timestamp["name"], int(timestamp["ns"]))
    return [stamps for stamps in requests.values() if "COMPUTE_INPUT_END" in stamps]


def read_stamps(folder: pathlib.Path, pattern: str) -> List[Tuple[int, ...]]:
    """Every stamp record of the files matching `pattern` in `folder`, sorted by entry."""
    records: List[Tuple[int, ...]] = []
    for path in folder.glob(pattern):
        records.extend(tuple(record) for record in json.loads(path.read_text())["records"])
    return sorted(records)


def _key(record: Sequence[int]) -> int:
    return record[RECEIVED] if len(record) == RESPONDED + 1 else record[0]


def join(traces: Iterable[Dict[str, int]], records: Sequence[Tuple[int, ...]],
         window: Tuple[int, int]) -> List[Tuple[Dict[str, int], Optional[Tuple[int, ...]]]]:
    """Each traced request within `window` (ns), with the model's record whose entry falls inside
    its compute (None when none does: the model recorded nothing for it)."""
    # The reference records execute's entry; ours the eight stamps, of which the worker's receipt
    # falls inside Triton's compute infer on both of ours' paths (the proxy's execute, or the
    # backend's wait for the worker, which reports its compute after laying the inputs out).
    records = sorted(records, key=_key)
    entries = [_key(record) for record in records]
    joined = []
    for trace in traces:
        if not window[0] <= trace.get("REQUEST_START", 0) <= window[1]:
            continue
        at = bisect.bisect_left(entries, trace["COMPUTE_INPUT_END"])
        match = records[at] if at < len(records) and entries[at] <= trace.get("COMPUTE_OUTPUT_START", 0) else None
        joined.append((trace, match))
    return joined


def stage_figures(joined: Sequence[Tuple[Dict[str, int], Optional[Sequence[int]]]]) -> Dict[str, Dict[str, float]]:
    """Per stage: median and p99 in microseconds, and how many requests had it."""
    figures: Dict[str, Dict[str, float]] = {}
    for label, stage in STAGES:
        values = sorted(v for v in (stage(trace, stamps) for trace, stamps in joined) if v is not None)
        if values:
            figures[label] = {
                "median_us": round(statistics.median(values) / 1000, 1),
                "p99_us": round(values[min(len(values) - 1, int(len(values) * 0.99))] / 1000, 1),
                "n": len(values),
            }
    return figures


def _protocol_of(trace: Dict[str, int]) -> str:
    return "grpc" if "GRPC_WAITREAD_START" in trace or "GRPC_SEND_END" in trace else "http"


def measure_stages(pa: Any, make_server: Callable[[str], Any], run_dir: pathlib.Path,
                   protocols: Sequence[str]) -> Dict[str, Any]:
    """Phase 1 of the module docstring; per protocol and server: client figures and stages."""
    results: Dict[str, Any] = {protocol: {} for protocol in protocols}
    for name in SERVERS:
        server = make_server(name)
        server.trace_file = run_dir / f"trace-{name}.json"
        server.stamps_dir = run_dir / f"stamps-{name}"
        server.stamps_dir.mkdir(parents=True, exist_ok=True)
        windows: Dict[str, Tuple[int, int]] = {}
        clients: Dict[str, Any] = {}
        try:
            server.start()
            server.check_identity("identity")
            for protocol in protocols:
                started = time.monotonic_ns()
                clients[protocol] = pa.measure(
                    model="identity", url=server.url(protocol), protocol=protocol, shape=f"INPUT_1:{VALUES}",
                    concurrency=CONCURRENCY_STAGES, interval_ms=WINDOW_MS, workdir=run_dir,
                    label=f"breakdown-{protocol}-{name}", stabilize=False, headers=server.headers(protocol),
                )  # fmt: skip
                windows[protocol] = (started, time.monotonic_ns())
                say(f"bench: breakdown, {protocol}, {name}: {clients[protocol]['latency_avg_us']:.0f} us mean")
        finally:
            server.stop()  # writes the trace file and the models' stamps
        traces = read_trace(server.trace_file)
        pattern = "reference-identity-*.json" if name == "reference" else "identity-*.json"
        records = read_stamps(server.stamps_dir, pattern)
        for protocol in protocols:
            joined = join((t for t in traces if _protocol_of(t) == protocol), records, windows[protocol])
            results[protocol][name] = {
                "client": clients[protocol],
                "requests": len(joined),
                "with_stamps": sum(1 for _, stamps in joined if stamps is not None),
                "stages": stage_figures(joined),
            }
    return results


def _process_kind(process: psutil.Process) -> str:
    name = " ".join(process.cmdline()[:1])
    if "triton_python_backend_stub" in name:
        return "stubs"
    if "tritonserver" in name:
        return "tritonserver"
    return "user process"


def _cpu_by_kind(root: psutil.Process) -> Dict[str, float]:
    spent: Dict[str, float] = {}
    for process in [root, *root.children(recursive=True)]:
        try:
            times = process.cpu_times()
            kind = _process_kind(process)
        except psutil.NoSuchProcess:
            continue
        spent[kind] = spent.get(kind, 0.0) + times.user + times.system
    return spent


def measure_cpu(pa: Any, make_server: Callable[[str], Any], run_dir: pathlib.Path) -> Dict[str, Any]:
    """Phase 2 of the module docstring: per server and process kind, CPU ms per 1,000 requests."""
    results: Dict[str, Any] = {}
    for name in SERVERS:
        server = make_server(name)
        try:
            server.start()
            server.check_identity("identity")
            root = psutil.Process(server.child.pid)
            before, counted = _cpu_by_kind(root), server.counts("identity")[0]
            figures = pa.measure(
                model="identity", url=server.url("http"), protocol="http", shape=f"INPUT_1:{VALUES}",
                concurrency=CONCURRENCY_CPU, interval_ms=WINDOW_MS, workdir=run_dir, label=f"breakdown-cpu-{name}",
                stabilize=False, headers=server.headers("http"),
            )  # fmt: skip
            after, requests = _cpu_by_kind(root), server.counts("identity")[0] - counted
        finally:
            server.stop()
        per_kind = {kind: round((after[kind] - before.get(kind, 0.0)) * 1000 / requests * 1000, 1)
                    for kind in after if requests}
        per_kind["all"] = round(sum(per_kind.values()), 1)
        results[name] = {"ms_per_1000_requests": per_kind, "requests": requests, "throughput": figures["throughput"]}
        say(f"bench: breakdown CPU, {name}: {per_kind['all']} ms per 1,000 requests")
    return results


SERVERS = ("reference", "ours", "proxy")
"""The plain Python backend, ours on pytriton's backend, ours on the proxy path."""
_COLUMNS = {"reference": "plain", "ours": "ours", "proxy": "ours, proxy"}


def markdown(breakdown: Dict[str, Any]) -> str:
    """The two tables of the docs: stages (median / p99, us) and CPU per 1,000 requests."""
    lines: List[str] = []
    stages = breakdown["stages"]
    protocols = list(stages)
    names = [name for name in SERVERS if all(name in stages[p] for p in protocols)]
    header = "| stage (µs, median / p99) |" + "".join(f" {_COLUMNS[n]}, {p} |" for p in protocols for n in names)
    lines += [header, "| --- |" + " ---: |" * (len(protocols) * len(names))]

    def cell(protocol: str, name: str, label: str) -> str:
        figure = stages[protocol][name]["stages"].get(label)
        return f"{figure['median_us']:g} / {figure['p99_us']:g}" if figure else "–"

    for label, _ in STAGES:
        lines.append(f"| {label} |" + "".join(f" {cell(p, n, label)} |" for p in protocols for n in names))
    client = "| client latency, mean (perf_analyzer) |"
    for protocol in protocols:
        for name in names:
            client += f" {stages[protocol][name]['client']['latency_avg_us']:.0f} |"
    lines += [client, ""]
    cpu = breakdown["cpu"]
    kinds = ["tritonserver", "stubs", "user process", "all"]
    lines += ["| CPU ms per 1,000 requests (16 values, c=16, HTTP) |" + "".join(f" {kind} |" for kind in kinds),
              "| --- |" + " ---: |" * len(kinds)]
    for name, label in (("reference", "plain backend"), ("ours", "pytriton's backend"), ("proxy", "pytriton, proxy")):
        if name not in cpu:
            continue
        per_kind = cpu[name]["ms_per_1000_requests"]
        lines.append(f"| {label} ({cpu[name]['throughput']:,.0f} infer/s) |"
                     + "".join(f" {per_kind.get(kind, 0.0):g} |" for kind in kinds))
    return "\n".join(lines)
