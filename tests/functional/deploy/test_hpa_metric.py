"""The optional autoscaling signal against a real server: the queue-to-compute ratio rises under load and falls back.

With autoscaling.signal=queueRatio, the chart's HPA (through the prometheus-adapter rule in
deploy/helm/pytriton/README.md) and its KEDA trigger scale on, per pod,

    sum(rate(nv_inference_queue_duration_us)) / clamp_min(sum(rate(nv_inference_compute_infer_duration_us)), 1)

Here the same expression is computed from two scrapes of a real server's `/metrics` (the port
the chart's ServiceMonitor scrapes), parsed with prometheus_client's text parser, for a slow
model under three loads: one sequential client, many concurrent clients, none.
"""

from __future__ import annotations

import threading
import time
import urllib.request

import numpy as np
import pytest
from helm_chart_support import adapter_rule
from support import http_url, our_leftovers, running_triton

from pytriton.client import ModelClient
from pytriton.decorators import batch
from pytriton.model_config import ModelConfig, Tensor

pytestmark = pytest.mark.functional

QUEUE = "nv_inference_queue_duration_us"
COMPUTE = "nv_inference_compute_infer_duration_us"
WORK_S = 0.1
CLIENTS = 6


@batch
def _work(seconds):
    time.sleep(float(seconds.max()))
    return {"seconds": seconds}


def _scrape(metrics_port: int):
    """Summed over the server's models: (queue µs, compute µs), as `sum(...)` in the rule does."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5) as response:
        text = response.read().decode()
    totals = {QUEUE: 0.0, COMPUTE: 0.0}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            name = sample.name[: -len("_total")] if sample.name.endswith("_total") else sample.name
            if name in totals:
                assert family.type == "counter", f"{name} is a {family.type}; rate() needs a counter"
                totals[name] += sample.value
    return totals[QUEUE], totals[COMPUTE]


def queue_compute_ratio(before, after) -> float:
    """The adapter rule's ratio over the interval between two scrapes (rates share the interval)."""
    queue, compute = after[0] - before[0], after[1] - before[1]
    assert queue >= 0 and compute >= 0, "counters went down: the server restarted between the scrapes"
    return queue / max(compute, 1.0)


def test_the_rule_computes_the_ratio_measured_here():
    rule = adapter_rule("pytriton_queue_compute_ratio")["metricsQuery"]
    numerator, denominator = rule.split("\n/\n") if "\n/\n" in rule else rule.split(" / ")
    assert QUEUE in numerator and COMPUTE in denominator and "clamp_min(" in denominator and ", 1)" in denominator


def test_queue_to_compute_ratio_rises_under_load_and_falls_back():
    with running_triton() as triton:
        triton.bind(
            "Slow",
            _work,
            inputs=[Tensor(name="seconds", dtype=np.float32, shape=(1,))],
            outputs=[Tensor(name="seconds", dtype=np.float32, shape=(1,))],
            # One request per execution on one instance: concurrent requests must queue.
            config=ModelConfig(max_batch_size=1),
        )
        triton.run()
        base, metrics_port = http_url(triton._config), triton._config.metrics_port
        request = np.array([WORK_S], dtype=np.float32)

        # Light: one client, one request at a time; nothing waits.
        with ModelClient(base, "Slow", inference_timeout_s=30) as client:
            client.infer_sample(seconds=request)
            before = _scrape(metrics_port)
            for _ in range(8):
                client.infer_sample(seconds=request)
            light = queue_compute_ratio(before, _scrape(metrics_port))

        # Heavy: CLIENTS clients at once on one instance; each request waits for the others.
        stop, served, errors = threading.Event(), [], []

        def client_loop():
            try:
                with ModelClient(base, "Slow", inference_timeout_s=30) as client:
                    while not stop.is_set():
                        client.infer_sample(seconds=request)
                        served.append(1)
            except Exception as exc:  # noqa: BLE001 - reported by the assertion below
                errors.append(exc)

        clients = [threading.Thread(target=client_loop) for _ in range(CLIENTS)]
        for thread in clients:
            thread.start()
        time.sleep(1.0)  # the queue fills
        before = _scrape(metrics_port)
        time.sleep(2.0)
        heavy_scrapes = (before, _scrape(metrics_port))
        stop.set()
        for thread in clients:
            thread.join(30)
        assert errors == [] and not any(t.is_alive() for t in clients)
        heavy = queue_compute_ratio(*heavy_scrapes)

        # After: the load stopped; the counters stand still and the ratio is 0, not 0/0.
        time.sleep(0.2)
        before = _scrape(metrics_port)
        time.sleep(1.0)
        after = queue_compute_ratio(before, _scrape(metrics_port))

        compute_s = (heavy_scrapes[1][1] - heavy_scrapes[0][1]) / 1e6
        figures = (
            f"queue/compute ratio: one client {light:.3f}, {CLIENTS} clients {heavy:.2f} "
            f"({compute_s:.2f} s computed in 2 s, {len(served)} requests), after {after:.3f}"
        )
        print(figures)
        # Each of CLIENTS requests waits for about CLIENTS - 1 others: ~5 expected; a busy test
        # machine delays threads, which Triton also counts as queueing, hence the wide bounds.
        assert light < 0.5, figures
        # One Triton instance: each request waits for the others in Triton's queue, about
        # CLIENTS - 1 = 5 expected; a slow machine lowers it, hence the bound of 1.
        assert heavy > 1.0 and heavy > 4 * light, figures
        assert compute_s > 1.0, f"the model was not busy during the heavy phase: {figures}"
        assert after == 0.0, figures
    assert our_leftovers() == {"processes": [], "segments": [], "folders": []}
