"""The chart's default autoscaling signal, requests in the server, grows in proportion to the load.

The signal (prometheus-adapter rule `pytriton_requests_in_server` in deploy/helm/pytriton/README.md,
the chart's KEDA query) is, per pod, rate(nv_inference_request_duration_us) / 1e6: by Little's
law the average number of requests inside Triton. Here it is computed from two scrapes of a real
server's `/metrics` (bench/autoscaling_signal.py's functions, the table in docs/deploying.md)
for a model that takes 0.1 s per request on one instance: with 4 clients that each wait for
their answer, 4 requests are inside the server on average, against 1 with one client.
"""

from __future__ import annotations

import pathlib
import sys

import pytest
from helm_chart_support import adapter_rule, only, render
from support import http_url, our_leftovers, running_triton

# bench/ is not a package: its scripts import each other by file name.
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[3] / "bench"))

import autoscaling_signal as bench

pytestmark = pytest.mark.functional

WINDOW_S = 3.0


def test_the_chart_and_the_rule_compute_the_signal_measured_here():
    rule = adapter_rule("pytriton_requests_in_server")
    assert rule["seriesQuery"].startswith(bench.REQUEST_US + "{")
    assert f"rate({bench.REQUEST_US}{{<<.LabelMatchers>>}}[1m])" in rule["metricsQuery"]
    assert rule["metricsQuery"].rstrip().endswith("/ 1e6")
    values = {"autoscaling": {"keda": {"enabled": True}},
              "serviceMonitor": {"enabled": True, "labels": {"release": "kube-prometheus-stack"}}}
    [trigger] = only(render(values), "ScaledObject")["spec"]["triggers"]
    assert f"rate({bench.REQUEST_US}{{" in trigger["metadata"]["query"]
    assert trigger["metadata"]["query"].endswith("/ 1e6")
    assert float(trigger["metadata"]["threshold"]) == bench.TARGETS["requests"]


def test_requests_in_server_grow_in_proportion_to_the_clients():
    with running_triton() as triton:
        bench.bind_sleep_model(triton)
        triton.run()
        url, metrics_port = http_url(triton._config), triton._config.metrics_port
        one = bench.measure_level(url, metrics_port, clients=1, window_s=WINDOW_S)
        four = bench.measure_level(url, metrics_port, clients=4, window_s=WINDOW_S)
    figures = (
        f"requests in server: 1 client {one.requests_in_server:.3f} ({one.throughput:.1f}/s), "
        f"4 clients {four.requests_in_server:.3f} ({four.throughput:.1f}/s); "
        f"queue/compute ratio {one.queue_ratio:.3f} -> {four.queue_ratio:.3f}"
    )
    print(figures)
    # One instance busy with one 0.1 s request at a time: ~10 requests/s at both levels.
    assert one.throughput > 5 and four.throughput > 5, figures
    assert 0.5 < one.requests_in_server <= 1.2, figures
    assert 2.5 <= four.requests_in_server / one.requests_in_server <= 5.5, figures
    # What the HPA does with it at the chart's default target (4): one pod suffices for both.
    assert bench.desired_replicas(one.requests_in_server, bench.TARGETS["requests"]) == 1
    assert our_leftovers() == {"processes": [], "segments": [], "folders": []}
