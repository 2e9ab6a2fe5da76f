"""The serving script's start and stop lines (pytriton.server.announce), from the configuration alone."""

from __future__ import annotations

import signal

from pytriton.server.announce import draining_line, endpoint_urls, serving_line
from pytriton.server.config import TritonConfig


def test_the_start_line_names_each_model_and_the_urls_a_client_on_this_machine_uses():
    assert serving_line(TritonConfig(), [("Scale", 1), ("Add", 2)]) == (
        "serving Scale (version 1), Add (version 2) on http://localhost:8000 and grpc://localhost:8001; "
        "metrics on http://localhost:8002/metrics; Ctrl+C or SIGTERM stops")


def test_the_urls_follow_the_ports_addresses_and_endpoints_configured():
    config = TritonConfig(http_port=9000, grpc_address="::1", grpc_port=9001, allow_metrics=False,
                          http_address="0.0.0.0")
    assert endpoint_urls(config) == ("http://localhost:9000", "grpc://[::1]:9001", None)
    assert serving_line(TritonConfig(allow_grpc=False), [("M", 1)]) == (
        "serving M (version 1) on http://localhost:8000; metrics on http://localhost:8002/metrics; "
        "Ctrl+C or SIGTERM stops")


def test_the_signal_line_says_draining_for_how_long_and_how_to_stop_at_once():
    assert draining_line(signal.SIGINT, TritonConfig()) == (
        "SIGINT received: draining (not ready any more; the requests in flight finish, for up to 30 s), then "
        "stopping; a second Ctrl+C or SIGTERM stops at once")
    assert draining_line(signal.SIGTERM, TritonConfig(exit_timeout_secs=5)).startswith(
        "SIGTERM received: draining (not ready any more; the requests in flight finish, for up to 5 s)")
