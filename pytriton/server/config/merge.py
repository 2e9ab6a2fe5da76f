"""Where a server's options come from, merged into the one `TritonConfig` the server runs with.

The flow is one-way: `pytriton.server.config.options` declares the fields and reads their text
(`pytriton.server.config.reading`); this module merges the config given to `Triton` with the
`PYTRITON_TRITON_CONFIG_*` environment (the code wins, then the environment, then Triton's
default), then lets the platform's own variables fill what is left (Google Vertex AI's ``AIP_*``,
`pytriton.server.vertex_ai`) and checks the combination (a SageMaker endpoint needs a port of its
own; ``triton_on_localhost`` moves Triton's HTTP and gRPC addresses to 127.0.0.1).
`pytriton.server.argv` then turns the result into the command line.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import logging
import os
from typing import Mapping, Optional

from pytriton.exceptions import PyTritonBadParameterError
from pytriton.server.config.options import TritonConfig
from pytriton.server.config.reading import ENV_PREFIX
from pytriton.server.vertex_ai import resolve_vertex_ai

LOGGER = logging.getLogger("pytriton.server.config")


def merge(explicit: Optional[TritonConfig], environ: Optional[Mapping[str, str]] = None) -> TritonConfig:
    """The config the server runs with: explicit fields, then environment variables, then defaults.

    A field counts as explicitly set when it is not None in `explicit`, so an environment
    variable can still fill every field the code left open. Vertex AI's `AIP_*` variables come
    last (`pytriton.server.vertex_ai.resolve_vertex_ai`).

    Args:
        explicit: The config given to `Triton(config=...)`, or None.
        environ: The environment to read; `os.environ` when None.

    Returns:
        The merged config; fields set nowhere stay None (Triton's default).

    Raises:
        PyTritonBadParameterError: An environment variable is invalid, the merged fields
            contradict each other, or the Vertex AI endpoint is on but could not start.
    """
    environ = os.environ if environ is None else environ
    merged = TritonConfig.from_env(environ)
    if explicit is not None:
        # Fields may have been assigned since the config was built: check them as a constructor would.
        explicit = dataclasses.replace(explicit)
        overrides = {
            field.name: getattr(explicit, field.name)
            for field in dataclasses.fields(explicit)
            if getattr(explicit, field.name) is not None
        }
        try:
            merged = dataclasses.replace(merged, **overrides)
        except PyTritonBadParameterError as exc:
            raise PyTritonBadParameterError(
                f"{exc.message} (after merging the config given to Triton with {ENV_PREFIX}* environment variables)"
            ) from exc
    resolved = resolve_vertex_ai(merged, environ)
    _check_sagemaker(resolved)
    return _triton_on_localhost(resolved)


def _triton_on_localhost(config: TritonConfig) -> TritonConfig:
    """With ``triton_on_localhost``: Triton's HTTP and gRPC addresses 127.0.0.1, once the setting
    is found to make sense (a front to be the public door, no address or endpoint that says otherwise)."""
    if not config.triton_on_localhost:
        return config
    setting = "TritonConfig.triton_on_localhost=True"
    if config.openai_port is None:
        raise PyTritonBadParameterError(
            f"{setting} keeps Triton's ports on localhost behind the OpenAI-compatible API, but openai_port is not "
            "set; set openai_port, or leave triton_on_localhost unset and give http_address and grpc_address "
            "'127.0.0.1' to keep every port on this machine")
    for field in ("http_address", "grpc_address"):
        value = getattr(config, field)
        if value is not None and not is_loopback(value):
            raise PyTritonBadParameterError(
                f"{setting} keeps Triton's HTTP and gRPC ports on 127.0.0.1, but {field}={value!r} asks for another "
                f"address; leave {field} unset (the OpenAI-compatible API listens on every interface)")
    for field, name in (("allow_vertex_ai", "Vertex AI"), ("allow_sagemaker", "SageMaker")):
        if getattr(config, field):
            raise PyTritonBadParameterError(
                f"{setting} keeps the models behind the OpenAI-compatible API, but {field}=True opens the {name} "
                "endpoint, which serves them on every interface without a key; turn one of the two off")
    return dataclasses.replace(config, http_address=config.http_address or "127.0.0.1",
                               grpc_address=config.grpc_address or "127.0.0.1")


def is_loopback(address: str) -> bool:
    """Whether `address` is reachable from this machine only (127.0.0.0/8, ::1, localhost)."""
    try:
        return ipaddress.ip_address(address.strip("[]")).is_loopback
    except ValueError:
        return address == "localhost"


def _check_sagemaker(config: TritonConfig) -> None:
    """Refuse an enabled SageMaker endpoint on the port of another enabled endpoint, and say
    who can reach it.

    tritonserver would otherwise fail to open it only after loading every model. Its default
    port, 8080, is also the Vertex AI endpoint's.
    """
    if not config.allow_sagemaker:
        return
    port = config.effective_sagemaker_port
    for name, allowed, other in (
        ("http_port", config.allow_http is not False, config.effective_http_port),
        ("grpc_port", config.allow_grpc is not False, config.effective_grpc_port),
        ("metrics_port", config.allow_metrics is not False, config.effective_metrics_port),
        ("vertex_ai_port", bool(config.allow_vertex_ai), config.effective_vertex_ai_port),
    ):
        if allowed and other == port:
            raise PyTritonBadParameterError(
                f"TritonConfig.sagemaker_port={port!r} is invalid: TritonConfig.{name} is {other} too; the SageMaker "
                "endpoint needs a port of its own (set sagemaker_port to another port)"
            )
    LOGGER.warning(
        "The SageMaker endpoint (port %s) listens on every interface and checks no access token. Let only SageMaker "
        "reach that port.",
        port,
    )
