"""Google Vertex AI's ``AIP_*`` environment -> the `TritonConfig` it implies.

tritonserver reads Vertex AI's variables itself: ``AIP_MODE=PREDICTION`` turns its Vertex AI
endpoint on and its HTTP and gRPC endpoints off by default, ``AIP_HTTP_PORT`` moves the Vertex AI
port, and ``AIP_PREDICT_ROUTE`` / ``AIP_HEALTH_ROUTE`` are the two routes it serves (it refuses to
start the endpoint without them). ``AIP_STORAGE_URI`` would be its model repository, but only
when no ``--model-repository`` is given, and the library always gives one.

Left hidden in the server's environment, these would make the library wait for an HTTP endpoint
Triton never opened, or miss a port clash. `resolve_vertex_ai` writes their effect into the
merged config instead (`pytriton.server.config.merge.merge` calls it last, so the explicit config and
the ``PYTRITON_TRITON_CONFIG_*`` variables win), and refuses, before anything starts, a Vertex AI
endpoint that Triton could not open.

Pure: a config and an environment mapping in, a config out.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any, Dict, Mapping, Sequence, Tuple

from pytriton.exceptions import PyTritonBadParameterError
from pytriton.server.config.options import TritonConfig

LOGGER = logging.getLogger(__name__)


MODE_ENV = "AIP_MODE"
"""Vertex AI sets it to `PREDICTION_MODE` in the containers that serve predictions."""
PREDICTION_MODE = "PREDICTION"
PORT_ENV = "AIP_HTTP_PORT"
"""The port Vertex AI sends requests to."""
PREDICT_ROUTE_ENV = "AIP_PREDICT_ROUTE"
"""Path of the predict route: a KServe v2 inference request body, answered by the default model."""
HEALTH_ROUTE_ENV = "AIP_HEALTH_ROUTE"
"""Path of the health route: 200 when the server is ready."""
REDIRECT_HEADER = "X-Vertex-Ai-Triton-Redirect"
"""A request to the predict route with this header reaches the Triton API path it names instead."""


def resolve_vertex_ai(config: TritonConfig, environ: Mapping[str, str]) -> TritonConfig:
    """`config` with the Vertex AI settings the environment implies, checked.

    Only fields still None change: ``AIP_MODE=PREDICTION`` sets `allow_vertex_ai=True` and keeps
    `allow_http` and `allow_grpc` on (Triton would turn them off, and the library needs one of them
    to see the server ready); ``AIP_HTTP_PORT`` becomes `vertex_ai_port` when the endpoint is on.

    Args:
        config: The config merged from the explicit fields and ``PYTRITON_TRITON_CONFIG_*``.
        environ: The environment the server will inherit.

    Returns:
        The config the server will run with, with every Vertex AI effect visible.

    Raises:
        PyTritonBadParameterError: The endpoint is on but a route variable is missing, or
            ``AIP_HTTP_PORT`` is not a port, or the Vertex AI port is another endpoint's port.
    """
    changes: Dict[str, Any] = {}
    if environ.get(MODE_ENV, "").strip() == PREDICTION_MODE:
        for name in ("allow_vertex_ai", "allow_http", "allow_grpc"):
            if getattr(config, name) is None:
                changes[name] = True
    enabled = changes.get("allow_vertex_ai", config.allow_vertex_ai)
    if not enabled:
        return dataclasses.replace(config, **changes) if changes else config
    if config.vertex_ai_port is None and environ.get(PORT_ENV, "").strip():
        changes["vertex_ai_port"] = _port_from_env(environ[PORT_ENV])
    resolved = dataclasses.replace(config, **changes)
    _check_routes(environ)
    _check_port_is_its_own(resolved)
    LOGGER.warning(
        "The Vertex AI endpoint (port %s) listens on every interface and checks no access token: requests to its "
        "predict route with header %s reach the model-repository, statistics, shared-memory and metrics APIs too. "
        "Let only Vertex AI reach that port.",
        resolved.effective_vertex_ai_port,
        REDIRECT_HEADER,
    )
    return resolved


def check_vertex_ai_models(config: TritonConfig, model_names: Sequence[str]) -> None:
    """Refuse, before the server starts, a Vertex AI endpoint whose predict route has no model to run.

    Triton picks the model once, when it opens the endpoint after loading the models: the one
    named by `vertex_ai_default_model`, or the only model there is. Otherwise it refuses to open
    the endpoint and exits; this says so before anything starts.

    Args:
        config: The merged config.
        model_names: The names of the models the server will load.

    Raises:
        PyTritonBadParameterError: The endpoint is on and the default model is not among
            `model_names`, or none is named and there is not exactly one model.
    """
    if not config.allow_vertex_ai:
        return
    names = sorted(model_names)
    chosen = config.vertex_ai_default_model
    if chosen is None and len(names) != 1:
        raise PyTritonBadParameterError(
            f"TritonConfig.allow_vertex_ai=True with {len(names)} bound models ({', '.join(names) or 'none'}) needs "
            "TritonConfig.vertex_ai_default_model: the Vertex AI predict route runs one model, and Triton picks it "
            "by itself only when there is exactly one"
        )
    if chosen is not None and chosen not in names:
        raise PyTritonBadParameterError(
            f"TritonConfig.vertex_ai_default_model={chosen!r} is invalid: expected one of the bound models "
            f"({', '.join(names) or 'none'})"
        )


def vertex_ai_routes(environ: Mapping[str, str]) -> Tuple[str, str]:
    """The predict and health routes the server will serve, from ``AIP_PREDICT_ROUTE`` / ``AIP_HEALTH_ROUTE``.

    Raises:
        PyTritonBadParameterError: One of them is unset or empty.
    """
    _check_routes(environ)
    return environ[PREDICT_ROUTE_ENV].strip(), environ[HEALTH_ROUTE_ENV].strip()


def _port_from_env(raw: str) -> int:
    try:
        port = int(raw.strip())
    except ValueError:
        port = 0
    if not 1 <= port <= 65535:
        raise PyTritonBadParameterError(
            f"Environment variable {PORT_ENV}={raw!r} is invalid for TritonConfig.vertex_ai_port: expected a port "
            "number in 1..65535"
        )
    return port


def _check_routes(environ: Mapping[str, str]) -> None:
    missing = [name for name in (PREDICT_ROUTE_ENV, HEALTH_ROUTE_ENV) if not environ.get(name, "").strip()]
    if missing:
        raise PyTritonBadParameterError(
            f"TritonConfig.allow_vertex_ai=True needs the environment variable{'s' if len(missing) > 1 else ''} "
            f"{' and '.join(missing)}: tritonserver serves the Vertex AI routes named there and refuses to start "
            "without them. Vertex AI "
            f"sets them in its containers; elsewhere set them yourself, e.g. {PREDICT_ROUTE_ENV}=/predict "
            f"{HEALTH_ROUTE_ENV}=/health"
        )


def _check_port_is_its_own(config: TritonConfig) -> None:
    # The Vertex AI endpoint binds every interface, so it clashes with any endpoint on its port
    # whatever that endpoint's address; tritonserver would only fail after loading the models.
    vertex = config.effective_vertex_ai_port
    for name, allowed, port in (
        ("http_port", config.allow_http, config.effective_http_port),
        ("grpc_port", config.allow_grpc, config.effective_grpc_port),
        ("metrics_port", config.allow_metrics, config.effective_metrics_port),
    ):
        if allowed is not False and port == vertex:
            raise PyTritonBadParameterError(
                f"TritonConfig.vertex_ai_port={vertex!r} is invalid: TritonConfig.{name} is {port} too; the "
                f"Vertex AI endpoint needs a port of its own (set vertex_ai_port, or {PORT_ENV}, to another port)"
            )
