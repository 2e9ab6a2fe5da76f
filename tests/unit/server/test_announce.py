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


def test_the_start_line_shows_the_openai_url_and_whether_tritons_ports_ask_for_its_key():
    from pytriton.server.config.merge import merge

    config = TritonConfig(openai_port=8813)
    assert "; OpenAI-compatible API on http://localhost:8813/v1 (no API key); metrics on" in serving_line(
        config, [("chat", 1)])
    # A key set, Triton's ports on every interface: they serve the same models without it, and the line says so.
    assert ("; OpenAI-compatible API on http://localhost:8813/v1 (API key required; Triton's http and grpc ports "
            "serve the same models without it: TritonConfig(triton_on_localhost=True) keeps them on this machine)"
            ) in serving_line(config, [("chat", 1)], openai_key=True)
    local = merge(TritonConfig(openai_port=8813, triton_on_localhost=True), {})
    assert serving_line(local, [("chat", 1)], openai_key=True).startswith(
        "serving chat (version 1) on http://127.0.0.1:8000 and grpc://127.0.0.1:8001; OpenAI-compatible API on "
        "http://localhost:8813/v1 (API key required); metrics")
    assert "OpenAI" not in serving_line(TritonConfig(), [("chat", 1)])


def test_the_start_lines_say_which_models_are_multiplexed():
    config = TritonConfig(http_port=8000, grpc_port=8001, metrics_port=8002)
    notes = {"Adapters": "multiplexed by request parameter 'variant', 8 per instance, variants en, de"}
    line = serving_line(config, [("Scale", 1), ("Adapters", 2)], notes=notes)
    assert line.startswith("serving Scale (version 1), Adapters (version 2; multiplexed by request parameter "
                           "'variant', 8 per instance, variants en, de) on http://localhost:8000"), line
    remote = remote_serving_line("localhost:8000", [("Adapters", 1)], notes=notes)
    assert "Adapters (version 1; multiplexed by request parameter 'variant'" in remote
