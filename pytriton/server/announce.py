"""What ``serve()`` says to the person who ran the script: what is served where, and the stop.

A serving script otherwise says nothing: its user cannot tell whether it serves, on which
ports, under which model names (a client that misspells one is pointed here, see
``pytriton.client.readiness.unknown_model_message``), or whether Ctrl+C was heard while the
requests in flight finish. One line at the start (`RemoteTriton.serve()` says its own: it serves
through a server it did not start) and one at the first signal, on the
``pytriton.serve`` logger, which `pytriton.notices` makes visible on stderr without any logging
set up (and silent by ``logging.getLogger("pytriton.serve").setLevel(logging.WARNING)``).

The lines are pure functions of the configuration, so they are unit-tested without a server.
"""

from __future__ import annotations

import signal
from typing import Mapping, Optional, Sequence, Tuple

from pytriton.notices import notice_logger
from pytriton.server.config import TritonConfig, exit_timeout_s
from pytriton.server.config.merge import is_loopback
from pytriton.server.control import parse_server_url
from pytriton.server.ports import openai_endpoint

SERVING_PREFIX = "serving "
"""How the start line begins (after ``pytriton: ``); the client's unknown-model hint quotes it."""

_ANY_ADDRESS = ("0.0.0.0", "::", "[::]")

notices = notice_logger("pytriton.serve")


def _host(address: Optional[str]) -> str:
    """The host a client on this machine uses for an endpoint bound to `address`."""
    if not address or address in _ANY_ADDRESS:
        return "localhost"
    return f"[{address}]" if ":" in address and not address.startswith("[") else address


def endpoint_urls(config: TritonConfig) -> Tuple[Optional[str], Optional[str], Optional[str]]:
    """The HTTP, gRPC and metrics URLs a server with `config` answers on (None: that one is off)."""
    http = (f"http://{_host(config.http_address)}:{config.effective_http_port}"
            if config.allow_http is not False else None)
    grpc = (f"grpc://{_host(config.grpc_address)}:{config.effective_grpc_port}"
            if config.allow_grpc is not False else None)
    metrics = (f"http://{_host(config.metrics_address)}:{config.effective_metrics_port}/metrics"
               if config.allow_metrics is not False else None)
    return http, grpc, metrics


def openai_part(config: TritonConfig, api_key: bool) -> str:
    """What the start line says of the OpenAI-compatible API ("" when it is off): its URL, and
    whether it asks for a key, and if it does while Triton's own ports, which ask for none,
    listen beyond this machine, that they serve the same models without it."""
    endpoint = openai_endpoint(config)
    if endpoint is None:
        return ""
    _, address, port = endpoint
    part = f"; OpenAI-compatible API on http://{_host(address)}:{port}/v1"
    if not api_key:
        return part + " (no API key)"
    public = [name for name, allowed, where in (("http", config.allow_http, config.http_address),
                                                 ("grpc", config.allow_grpc, config.grpc_address))
              if allowed is not False and not is_loopback(where or "0.0.0.0")]
    if not public:
        return part + " (API key required)"
    return (part + f" (API key required; Triton's {' and '.join(public)} ports serve the same models without it: "
            "TritonConfig(triton_on_localhost=True) keeps them on this machine)")


def _named(models: Sequence[Tuple[str, int]], notes: Optional[Mapping[str, str]]) -> str:
    """Each model with its version and what `notes` say of it (a multiplexed model's variants)."""
    notes = notes or {}
    return ", ".join(f"{name} (version {version}" + (f"; {notes[name]}" if notes.get(name) else "") + ")"
                     for name, version in models) or "no model yet"


def serving_line(config: TritonConfig, models: Sequence[Tuple[str, int]], openai_key: bool = False,
                 notes: Optional[Mapping[str, str]] = None) -> str:
    """The start line: each model (name and version), the endpoints, and how to stop.

    Example: ``serving Scale (version 1) on http://localhost:8000 and grpc://localhost:8001;
    metrics on http://localhost:8002/metrics; Ctrl+C or SIGTERM stops``. With
    ``openai_port``, the OpenAI-compatible API's URL follows (`openai_part`; `openai_key`: an
    API key is set). `notes` adds words to a model's parentheses: a multiplexed model says so
    (``Adapters (version 1; multiplexed by request parameter 'variant', 8 per instance)``).
    """
    named = _named(models, notes)
    http, grpc, metrics = endpoint_urls(config)
    line = SERVING_PREFIX + named + " on " + " and ".join(url for url in (http, grpc) if url)
    line += openai_part(config, openai_key)
    if metrics:
        line += f"; metrics on {metrics}"
    return line + "; Ctrl+C or SIGTERM stops"


def remote_serving_line(url: str, models: Sequence[Tuple[str, int]], notes: Optional[Mapping[str, str]] = None) -> str:
    """The start line of `RemoteTriton.serve()`: each model, the server it is served through, how to stop.

    A `RemoteTriton` knows only the URL it was given, so the line names that server (its scheme
    and port filled in as the facade reads them) and says that a stop leaves the server running.
    Example: ``serving Scale (version 1) through the tritonserver at http://localhost:8000;
    Ctrl+C or SIGTERM unloads them (the server runs on)``. `notes`: as for `serving_line`.
    """
    named = _named(models, notes)
    scheme, host, port = parse_server_url(url)
    host = f"[{host}]" if ":" in host else host
    return (f"{SERVING_PREFIX}{named} through the tritonserver at {scheme}://{host}:{port}; Ctrl+C or SIGTERM "
            "unloads them (the server runs on)")


def draining_line(signum: int, config: TritonConfig) -> str:
    """The line at the first signal: the stop has begun, how long it may take, how to hurry it."""
    try:
        name = signal.Signals(signum).name
    except ValueError:
        name = f"signal {signum}"
    return (f"{name} received: draining (not ready any more; the requests in flight finish, for up to "
            f"{exit_timeout_s(config)} s), then stopping; a second Ctrl+C or SIGTERM stops at once")


def announce_serving(config: TritonConfig, models: Sequence[Tuple[str, int]], openai_key: bool = False,
                     notes: Optional[Mapping[str, str]] = None) -> None:
    """Say `serving_line` on the ``pytriton.serve`` logger."""
    notices.info("%s", serving_line(config, models, openai_key, notes))


def announce_remote_serving(url: str, models: Sequence[Tuple[str, int]],
                            notes: Optional[Mapping[str, str]] = None) -> None:
    """Say `remote_serving_line` on the ``pytriton.serve`` logger."""
    notices.info("%s", remote_serving_line(url, models, notes))


def announce_draining(signum: int, config: TritonConfig) -> None:
    """Say `draining_line` on the ``pytriton.serve`` logger."""
    notices.info("%s", draining_line(signum, config))
