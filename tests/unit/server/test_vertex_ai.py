"""Vertex AI options: the four TritonConfig fields, the AIP_* environment, the argv (no process started)."""

from __future__ import annotations

import logging
import pathlib

import pytest

from pytriton.exceptions import PyTritonBadParameterError
from pytriton.server.argv import build_argv
from pytriton.server.config import TritonConfig
from pytriton.server.config.merge import merge
from pytriton.server.vertex_ai import check_vertex_ai_models, resolve_vertex_ai, vertex_ai_routes

P = "PYTRITON_TRITON_CONFIG_"
ROUTES = {"AIP_PREDICT_ROUTE": "/predict", "AIP_HEALTH_ROUTE": "/health"}
PATHS = {
    "binary": pathlib.Path("/opt/ts/bin/tritonserver"),
    "model_repository": pathlib.Path("/tmp/repo"),
    "backend_directory": pathlib.Path("/opt/ts/backends"),
    "cache_directory": pathlib.Path("/opt/ts/caches"),
    "shm_region_prefix": "pytriton_abc_",
}
VERTEX_FLAGS = ("--allow-vertex-ai", "--vertex-ai-port", "--vertex-ai-thread-count", "--vertex-ai-default-model")


def _vertex_words(config: TritonConfig) -> list:
    return [word for word in build_argv(config, **PATHS) if word.split("=", 1)[0] in VERTEX_FLAGS]


# --- the fields ---------------------------------------------------------------------------------


def test_the_fields_default_to_none_and_the_port_to_8080():
    config = TritonConfig()
    assert (config.allow_vertex_ai, config.vertex_ai_port, config.vertex_ai_thread_count) == (None, None, None)
    assert config.vertex_ai_default_model is None
    assert config.effective_vertex_ai_port == 8080
    assert TritonConfig(vertex_ai_port=9090).effective_vertex_ai_port == 9090


def test_valid_values_are_kept():
    config = TritonConfig(allow_vertex_ai=True, vertex_ai_port=1, vertex_ai_thread_count=1,
                          vertex_ai_default_model="my-model_v1.2")
    assert (config.vertex_ai_port, config.vertex_ai_thread_count) == (1, 1)
    assert repr(config) == ("TritonConfig(allow_vertex_ai=True, vertex_ai_port=1, vertex_ai_thread_count=1, "
                            "vertex_ai_default_model='my-model_v1.2')")


@pytest.mark.parametrize(
    "kwargs, fragments",
    [
        ({"allow_vertex_ai": "yes"}, ["allow_vertex_ai='yes'", "True or False"]),
        ({"allow_vertex_ai": 1}, ["allow_vertex_ai=1", "True or False"]),
        ({"vertex_ai_port": 0}, ["vertex_ai_port=0", "1..65535"]),
        ({"vertex_ai_port": 65536}, ["vertex_ai_port=65536", "1..65535"]),
        ({"vertex_ai_port": "8080"}, ["vertex_ai_port='8080'", "an integer"]),
        ({"vertex_ai_port": True}, ["vertex_ai_port=True", "an integer"]),
        ({"vertex_ai_thread_count": 0}, ["vertex_ai_thread_count=0", "> 0"]),
        ({"vertex_ai_thread_count": -2}, ["vertex_ai_thread_count=-2", "> 0"]),
        ({"vertex_ai_thread_count": 2.5}, ["vertex_ai_thread_count=2.5", "an integer"]),
        ({"vertex_ai_default_model": ""}, ["vertex_ai_default_model=''", "bound model"]),
        ({"vertex_ai_default_model": " m"}, ["vertex_ai_default_model=' m'", "bound model"]),
        ({"vertex_ai_default_model": "a/b"}, ["vertex_ai_default_model='a/b'", "no '/'"]),
        ({"vertex_ai_default_model": 5}, ["vertex_ai_default_model=5", "a string"]),
    ],
)
def test_bad_values_name_the_field_the_value_and_what_is_allowed(kwargs, fragments):
    with pytest.raises(PyTritonBadParameterError) as caught:
        TritonConfig(**kwargs)
    for fragment in ["TritonConfig." + fragments[0], *fragments[1:]]:
        assert fragment in caught.value.message


def test_the_fields_come_from_their_environment_variables():
    config = TritonConfig.from_env({
        P + "ALLOW_VERTEX_AI": "yes",
        P + "VERTEX_AI_PORT": "9090",
        P + "VERTEX_AI_THREAD_COUNT": "3",
        P + "VERTEX_AI_DEFAULT_MODEL": "ranker",
    })
    assert config == TritonConfig(allow_vertex_ai=True, vertex_ai_port=9090, vertex_ai_thread_count=3,
                                  vertex_ai_default_model="ranker")


@pytest.mark.parametrize(
    "variable, raw, fragment",
    [
        ("ALLOW_VERTEX_AI", "maybe", "expected one of"),
        ("VERTEX_AI_PORT", "http", "expected an integer"),
        ("VERTEX_AI_PORT", "70000", "1..65535"),
        ("VERTEX_AI_THREAD_COUNT", "0", "> 0"),
    ],
)
def test_a_bad_environment_value_names_the_variable(variable, raw, fragment):
    with pytest.raises(PyTritonBadParameterError) as caught:
        TritonConfig.from_env({P + variable: raw})
    assert f"{P}{variable}={raw!r} is invalid for TritonConfig.{variable.lower()}" in caught.value.message
    assert fragment in caught.value.message


# --- the AIP_* environment (merge) --------------------------------------------------------------


def test_without_aip_mode_nothing_changes():
    assert merge(None, {}) == TritonConfig()
    assert merge(None, {"AIP_MODE": "TRAINING", "AIP_HTTP_PORT": "9090", **ROUTES}) == TritonConfig()


def test_aip_mode_prediction_turns_vertex_ai_on_and_keeps_http_and_grpc_on():
    # Triton would turn HTTP and gRPC off; the library's readiness checks and clients need them.
    config = merge(None, {"AIP_MODE": "PREDICTION", **ROUTES})
    assert config == TritonConfig(allow_vertex_ai=True, allow_http=True, allow_grpc=True)
    assert config.effective_vertex_ai_port == 8080


def test_aip_http_port_is_the_vertex_ai_port_when_the_field_is_unset():
    config = merge(None, {"AIP_MODE": "PREDICTION", "AIP_HTTP_PORT": " 9090 ", **ROUTES})
    assert config.vertex_ai_port == 9090
    config = merge(TritonConfig(allow_vertex_ai=True), {"AIP_HTTP_PORT": "9091", **ROUTES})
    assert config.vertex_ai_port == 9091


def test_aip_http_port_is_ignored_while_the_endpoint_is_off():
    assert merge(None, {"AIP_HTTP_PORT": "9090"}).vertex_ai_port is None


def test_every_other_source_wins_over_the_aip_variables():
    environ = {"AIP_MODE": "PREDICTION", "AIP_HTTP_PORT": "9090", P + "VERTEX_AI_PORT": "9191", **ROUTES}
    assert merge(None, environ).vertex_ai_port == 9191
    assert merge(TritonConfig(vertex_ai_port=9292), environ).vertex_ai_port == 9292
    config = merge(TritonConfig(allow_grpc=False), environ)
    assert (config.allow_grpc, config.allow_http) == (False, True)
    config = merge(TritonConfig(allow_vertex_ai=False), {"AIP_MODE": "PREDICTION"})  # no routes needed when off
    assert config.allow_vertex_ai is False and config.vertex_ai_port is None


def test_a_bad_aip_http_port_names_the_variable():
    with pytest.raises(PyTritonBadParameterError, match=r"AIP_HTTP_PORT='80a' is invalid .*1\.\.65535"):
        merge(TritonConfig(allow_vertex_ai=True), {"AIP_HTTP_PORT": "80a", **ROUTES})
    with pytest.raises(PyTritonBadParameterError, match="AIP_HTTP_PORT='0'"):
        merge(TritonConfig(allow_vertex_ai=True), {"AIP_HTTP_PORT": "0", **ROUTES})


@pytest.mark.parametrize(
    "environ, missing",
    [
        ({}, "variables AIP_PREDICT_ROUTE and AIP_HEALTH_ROUTE:"),
        ({"AIP_PREDICT_ROUTE": "/predict"}, "variable AIP_HEALTH_ROUTE:"),
        ({"AIP_PREDICT_ROUTE": " ", "AIP_HEALTH_ROUTE": "/health"}, "variable AIP_PREDICT_ROUTE:"),
    ],
)
def test_the_endpoint_needs_both_route_variables(environ, missing):
    # tritonserver refuses to open the endpoint without them, and then exits.
    with pytest.raises(PyTritonBadParameterError) as caught:
        merge(TritonConfig(allow_vertex_ai=True), environ)
    assert f"TritonConfig.allow_vertex_ai=True needs the environment {missing}" in caught.value.message
    with pytest.raises(PyTritonBadParameterError, match="AIP_HEALTH_ROUTE"):
        merge(None, {"AIP_MODE": "PREDICTION", "AIP_PREDICT_ROUTE": "/predict"})


def test_vertex_ai_routes_reads_both_variables():
    assert vertex_ai_routes({"AIP_PREDICT_ROUTE": "/v1/p", "AIP_HEALTH_ROUTE": "/v1/h"}) == ("/v1/p", "/v1/h")
    with pytest.raises(PyTritonBadParameterError, match="AIP_PREDICT_ROUTE"):
        vertex_ai_routes({"AIP_HEALTH_ROUTE": "/v1/h"})


@pytest.mark.parametrize(
    "config, field",
    [
        (TritonConfig(allow_vertex_ai=True, http_port=8080), "http_port"),
        (TritonConfig(allow_vertex_ai=True, vertex_ai_port=8001), "grpc_port"),
        (TritonConfig(allow_vertex_ai=True, vertex_ai_port=9002, metrics_port=9002), "metrics_port"),
        # The endpoint binds every interface: another address does not keep them apart.
        (TritonConfig(allow_vertex_ai=True, http_address="127.0.0.1", http_port=8080), "http_port"),
    ],
)
def test_the_vertex_ai_port_must_be_its_own(config, field):
    with pytest.raises(PyTritonBadParameterError) as caught:
        merge(config, ROUTES)
    assert f"TritonConfig.vertex_ai_port={config.effective_vertex_ai_port} is invalid: TritonConfig.{field}" in (
        caught.value.message)


def test_a_switched_off_endpoint_may_share_the_vertex_ai_port():
    config = merge(TritonConfig(allow_vertex_ai=True, allow_metrics=False, metrics_port=8080), ROUTES)
    assert config.effective_vertex_ai_port == config.metrics_port == 8080


def test_the_port_clash_is_checked_after_aip_http_port_moved_the_endpoint():
    clash = {"AIP_MODE": "PREDICTION", "AIP_HTTP_PORT": "8000", **ROUTES}
    with pytest.raises(PyTritonBadParameterError, match="vertex_ai_port=8000 is invalid: TritonConfig.http_port"):
        merge(None, clash)
    # The same explicit config is fine once AIP_HTTP_PORT moves the endpoint away from 8080.
    assert merge(TritonConfig(http_port=8080), {**clash, "AIP_HTTP_PORT": "9090"}).vertex_ai_port == 9090


def test_an_open_endpoint_is_logged_as_unprotected(caplog):
    with caplog.at_level(logging.WARNING, logger="pytriton.server.vertex_ai"):
        merge(TritonConfig(allow_vertex_ai=True, vertex_ai_port=9090), ROUTES)
    assert "port 9090" in caplog.text and "X-Vertex-Ai-Triton-Redirect" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="pytriton.server.vertex_ai"):
        merge(TritonConfig(allow_vertex_ai=False), ROUTES)
    assert caplog.text == ""


def test_resolve_leaves_an_unrelated_config_as_it_is():
    config = TritonConfig(http_port=9000)
    assert resolve_vertex_ai(config, {}) is config


# --- the models the predict route can run -------------------------------------------------------


def test_one_model_needs_no_default():
    check_vertex_ai_models(TritonConfig(allow_vertex_ai=True), ["only"])


def test_a_switched_off_endpoint_does_not_care_about_models():
    check_vertex_ai_models(TritonConfig(), ["a", "b"])
    check_vertex_ai_models(TritonConfig(allow_vertex_ai=False, vertex_ai_default_model="gone"), ["a"])


@pytest.mark.parametrize("names, listed", [(["b", "a"], "2 bound models (a, b)"), ([], "0 bound models (none)")])
def test_other_than_one_model_needs_a_default(names, listed):
    with pytest.raises(PyTritonBadParameterError) as caught:
        check_vertex_ai_models(TritonConfig(allow_vertex_ai=True), names)
    assert f"TritonConfig.allow_vertex_ai=True with {listed} needs TritonConfig.vertex_ai_default_model" in (
        caught.value.message)


def test_the_default_model_must_be_bound():
    config = TritonConfig(allow_vertex_ai=True, vertex_ai_default_model="ranker")
    check_vertex_ai_models(config, ["ranker", "embedder"])
    with pytest.raises(PyTritonBadParameterError,
                       match=r"vertex_ai_default_model='ranker' is invalid: expected one of the bound models \(a, b\)"):
        check_vertex_ai_models(config, ["b", "a"])


# --- the argv -----------------------------------------------------------------------------------


def test_no_vertex_ai_flag_while_the_fields_are_unset():
    assert _vertex_words(TritonConfig()) == []


def test_an_open_endpoint_always_gets_its_port_like_the_other_endpoints():
    assert _vertex_words(TritonConfig(allow_vertex_ai=True)) == ["--allow-vertex-ai=true", "--vertex-ai-port=8080"]
    assert _vertex_words(TritonConfig(allow_vertex_ai=True, vertex_ai_port=9090)) == [
        "--allow-vertex-ai=true",
        "--vertex-ai-port=9090",
    ]


def test_every_vertex_ai_field_reaches_its_flag():
    config = TritonConfig(allow_vertex_ai=True, vertex_ai_port=9090, vertex_ai_thread_count=2,
                          vertex_ai_default_model="ranker")
    assert _vertex_words(config) == [
        "--allow-vertex-ai=true",
        "--vertex-ai-port=9090",
        "--vertex-ai-thread-count=2",
        "--vertex-ai-default-model=ranker",
    ]


def test_a_switched_off_endpoint_is_written_off_without_the_default_port():
    # Explicitly off wins over AIP_MODE=PREDICTION in the server's environment.
    assert _vertex_words(TritonConfig(allow_vertex_ai=False)) == ["--allow-vertex-ai=false"]


def test_the_merged_aip_config_becomes_explicit_flags():
    config = merge(None, {"AIP_MODE": "PREDICTION", "AIP_HTTP_PORT": "9090", **ROUTES})
    argv = build_argv(config, **PATHS)
    for word in ("--allow-vertex-ai=true", "--vertex-ai-port=9090", "--allow-http=true", "--allow-grpc=true"):
        assert word in argv
