"""The serving script's start and stop lines (pytriton.server.announce), from the configuration alone."""

from __future__ import annotations

import signal

from pytriton.server.announce import SERVING_PREFIX, draining_line, endpoint_urls, remote_serving_line, serving_line
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


def test_the_remote_start_line_names_the_server_it_serves_through_and_that_a_stop_spares_it():
    assert remote_serving_line("http://127.0.0.1:8000", [("Scale", 1), ("Add", 2)]) == (
        "serving Scale (version 1), Add (version 2) through the tritonserver at http://127.0.0.1:8000; Ctrl+C or "
        "SIGTERM unloads them (the server runs on)")
    # As RemoteTriton reads its URL: no scheme is HTTP, no port the protocol's default.
    assert remote_serving_line("localhost:9000", [("M", 1)]).startswith(
        SERVING_PREFIX + "M (version 1) through the tritonserver at http://localhost:9000;")
    assert " at grpc://[::1]:8001;" in remote_serving_line("grpc://[::1]", [("M", 1)])
