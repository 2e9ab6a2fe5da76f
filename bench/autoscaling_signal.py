"""Both autoscaling signals of the Helm chart, measured on a real server as the load rises.

    .venv/bin/python bench/autoscaling_signal.py [--levels 1 2 4 8 16] [--window 10]

One pytriton server (the bundled tritonserver) serves `Sleep`, a model that sleeps 0.1 s per
request on one instance without batching. For each load level, that many client threads (one
`ModelClient` each) send requests back to back; Triton's `/metrics` (the port the chart's
ServiceMonitor scrapes, which needs no access token) is scraped after a warm-up and again at
the end of the level's window, and the two signals are computed from the counters' deltas,
as Prometheus' `rate()` over that window would give them:

* requests in the server, the chart's default (`pytriton_requests_in_server`):
  delta(nv_inference_request_duration_us) / 1e6 / window. By Little's law this is the average
  number of requests inside Triton (queued or executing), summed over the pod's models;
* the queue-to-compute ratio (`pytriton_queue_compute_ratio`):
  delta(nv_inference_queue_duration_us) / delta(nv_inference_compute_infer_duration_us).

For each signal it prints the replica count the HPA asks for when one pod reports that value,
with the chart's default target. The markdown table on stdout is the one in
docs/deploying.md; progress goes to stderr. tests/functional/deploy/test_autoscaling_signal.py
uses the same functions.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import pathlib
import random
import socket
import sys
import threading
import time
import urllib.request
from typing import Dict, List, Optional, Sequence

import numpy as np

REQUEST_US = "nv_inference_request_duration_us"
QUEUE_US = "nv_inference_queue_duration_us"
COMPUTE_US = "nv_inference_compute_infer_duration_us"
SUCCESS = "nv_inference_request_success"
COUNTERS = (REQUEST_US, QUEUE_US, COMPUTE_US, SUCCESS)

MODEL = "Sleep"
WORK_S = 0.1
LEVELS = (1, 2, 4, 8, 16)
WINDOW_S = 10.0
# The chart's default target of each signal (deploy/helm/pytriton/values.yaml,
# autoscaling.requests.target and autoscaling.queueRatio.target).
TARGETS = {"requests": 4.0, "queueRatio": 0.5}
# The HPA leaves the replica count alone while value / target is within 10 % of 1
# (kube-controller-manager's --horizontal-pod-autoscaler-tolerance default).
HPA_TOLERANCE = 0.1


def scrape(metrics_port: int, host: str = "127.0.0.1") -> Dict[str, float]:
    """Each counter of COUNTERS from Triton's /metrics, summed over models and versions."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://{host}:{metrics_port}/metrics", timeout=5) as response:
        text = response.read().decode()
    totals = dict.fromkeys(COUNTERS, 0.0)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            name = sample.name[: -len("_total")] if sample.name.endswith("_total") else sample.name
            if name in totals:
                if family.type != "counter":
                    raise RuntimeError(f"{name} is a {family.type}; rate() needs a counter")
                totals[name] += sample.value
    return totals


def desired_replicas(value: float, target: float, current: int = 1) -> int:
    """What the HPA asks for: ceil(current * value / target), unless within its tolerance."""
    ratio = value / target
    if abs(ratio - 1.0) <= HPA_TOLERANCE:
        return current
    return max(1, math.ceil(current * ratio))


@dataclasses.dataclass(frozen=True)
class Level:
    """One load level: the counters' deltas over its window and what the clients saw."""

    clients: int
    window_s: float
    deltas: Dict[str, float]
    latencies_s: List[float]
    """Round trips, as the clients measured them, of the requests that ended inside the window."""

    @property
    def requests_in_server(self) -> float:
        return self.deltas[REQUEST_US] / 1e6 / self.window_s

    @property
    def queue_ratio(self) -> float:
        # clamp_min(..., 1) in the chart's query: an idle pod's 0/0 is 0.
        return self.deltas[QUEUE_US] / max(self.deltas[COMPUTE_US], 1.0)

    @property
    def throughput(self) -> float:
        return self.deltas[SUCCESS] / self.window_s

    def latency_quantile(self, q: float) -> float:
        return float(np.quantile(self.latencies_s, q)) if self.latencies_s else float("nan")

    def signal(self, name: str) -> float:
        return {"requests": self.requests_in_server, "queueRatio": self.queue_ratio}[name]


def bind_sleep_model(triton, work_s: float = WORK_S) -> None:
    """Bind `Sleep` to a `pytriton.triton.Triton`: one instance, no batching, `work_s` per request."""
    from pytriton.decorators import sample
    from pytriton.model_config import ModelConfig, Tensor

    @sample
    def sleep(x):
        time.sleep(work_s)
        return {"y": x}

    triton.bind(
        MODEL,
        sleep,
        inputs=[Tensor(name="x", dtype=np.float32, shape=(1,))],
        outputs=[Tensor(name="y", dtype=np.float32, shape=(1,))],
        config=ModelConfig(batching=False),  # one callable: one instance
    )


def measure_level(url: str, metrics_port: int, clients: int, window_s: float) -> Level:
    """Run `clients` closed-loop clients against `MODEL` and measure one window of steady load."""
    from pytriton.client import ModelClient

    stop = threading.Event()
    started = threading.Barrier(clients + 1)
    finished: List[tuple] = []  # (end time, round trip), appended by the client threads
    errors: List[BaseException] = []
    request = np.array([1.0], dtype=np.float32)

    def client_loop() -> None:
        try:
            with ModelClient(url, MODEL, inference_timeout_s=120) as client:
                client.wait_for_model(60)
                started.wait(60)
                while not stop.is_set():
                    begin = time.monotonic()
                    client.infer_sample(x=request)
                    end = time.monotonic()
                    finished.append((end, end - begin))
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread below
            errors.append(exc)
            if not started.broken:
                started.abort()

    threads = [threading.Thread(target=client_loop, name=f"client-{i}", daemon=True) for i in range(clients)]
    for thread in threads:
        thread.start()
    try:
        started.wait(90)
        # Warm-up: every client has had a request through the (single) instance, so the queue
        # holds its steady length before the first scrape.
        time.sleep(clients * WORK_S + 1.0)
        before, begin = scrape(metrics_port), time.monotonic()
        time.sleep(window_s)
        after, end = scrape(metrics_port), time.monotonic()
    finally:
        stop.set()
        for thread in threads:
            thread.join(120)
    if errors:
        raise RuntimeError(f"a client failed at {clients} clients: {errors[0]!r}") from errors[0]
    if any(thread.is_alive() for thread in threads):
        raise RuntimeError(f"a client did not stop at {clients} clients")
    deltas = {name: after[name] - before[name] for name in COUNTERS}
    if min(deltas.values()) < 0:
        raise RuntimeError("a counter went down: the server restarted between the scrapes")
    latencies = [trip for stamp, trip in finished if begin <= stamp <= end]
    return Level(clients=clients, window_s=end - begin, deltas=deltas, latencies_s=latencies)


def markdown_table(levels: Sequence[Level]) -> str:
    requests_target, ratio_target = TARGETS["requests"], TARGETS["queueRatio"]
    lines = [
        f"| clients | requests/s | latency p50 / p95 (s) | requests in server "
        f"| desired pods (target {requests_target:g}) | queue/compute ratio | desired pods (target {ratio_target:g}) |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for level in levels:
        lines.append(
            f"| {level.clients} | {level.throughput:.1f} "
            f"| {level.latency_quantile(0.5):.2f} / {level.latency_quantile(0.95):.2f} "
            f"| {level.requests_in_server:.3f} | {desired_replicas(level.requests_in_server, requests_target)} "
            f"| {level.queue_ratio:.3f} | {desired_replicas(level.queue_ratio, ratio_target)} |"
        )
    return "\n".join(lines)


def spread_table(levels: Sequence[Level]) -> str:
    """The largest level's clients spread evenly over N pods, each pod behaving as measured.

    With N pods, each holds total / N clients, which is one of the measured levels; the HPA
    asks for ceil(N * value / target) pods. A signal proportional to the load gives about the
    same answer from every N (total / target), so the HPA lands there in one step.
    """
    by_clients = {level.clients: level for level in levels}
    total = max(by_clients)
    lines = [
        f"| pods (each with {total} / pods clients) | requests in server per pod | desired pods "
        f"| queue/compute ratio per pod | desired pods |",
        "| ---: | ---: | ---: | ---: | ---: |",
    ]
    for pods in sorted(by_clients):
        if total % pods or total // pods not in by_clients:
            continue
        level = by_clients[total // pods]
        lines.append(
            f"| {pods} | {level.requests_in_server:.3f} "
            f"| {desired_replicas(level.requests_in_server, TARGETS['requests'], pods)} "
            f"| {level.queue_ratio:.3f} | {desired_replicas(level.queue_ratio, TARGETS['queueRatio'], pods)} |"
        )
    return "\n".join(lines)


def free_ports(count: int) -> List[int]:
    """Free ports below the kernel's ephemeral range, so no outgoing connection takes one first."""
    try:
        low, high = map(int, pathlib.Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    except (OSError, ValueError):
        low, high = 32768, 60999
    chosen: List[int] = []
    while len(chosen) < count:
        port = random.randrange(10000, 30000)
        if port in chosen or low <= port <= high:
            continue
        with socket.socket() as probe:
            try:
                probe.bind(("0.0.0.0", port))
            except OSError:
                continue
        chosen.append(port)
    return chosen


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--levels", type=int, nargs="+", default=list(LEVELS), help="concurrent clients per level")
    parser.add_argument("--window", type=float, default=WINDOW_S, help="seconds measured per level")
    args = parser.parse_args(argv)

    from pytriton.triton import Triton, TritonConfig

    http_port, grpc_port, metrics_port = free_ports(3)
    config = TritonConfig(http_port=http_port, grpc_port=grpc_port, metrics_port=metrics_port, exit_timeout_secs=5)
    triton = Triton(config=config)
    levels = []
    try:
        bind_sleep_model(triton)
        triton.run()
        url = f"http://127.0.0.1:{http_port}"
        for clients in args.levels:
            level = measure_level(url, metrics_port, clients, args.window)
            print(
                f"{clients:>3} clients: {level.requests_in_server:.2f} requests in server, "
                f"queue/compute {level.queue_ratio:.2f}, {level.throughput:.1f} requests/s",
                file=sys.stderr,
            )
            levels.append(level)
    finally:
        triton.stop()
    print(
        f"Model sleeping {WORK_S:g} s per request, one instance, no batching; "
        f"{args.window:g} s measured per level after a warm-up."
    )
    print()
    print(markdown_table(levels))
    print()
    print(f"The {max(args.levels)} clients spread over more pods (derived from the rows above):")
    print()
    print(spread_table(levels))
    return 0


if __name__ == "__main__":
    sys.exit(main())
