"""Library-wide constants, under the names the published PyTriton exports from ``pytriton.constants``.

This is the one place these values are defined: the server config, the clients' URL parsing and
the facade's start-up wait read them from here. The module imports only the standard library
and the registry of environment variables (`pytriton.environment`, which imports nothing more),
so the client side may use it without pulling in the server side.
"""

from __future__ import annotations

import os
import pathlib
from typing import Mapping

from pytriton import environment

DEFAULT_HTTP_PORT = 8000
"""tritonserver's HTTP port when `TritonConfig.http_port` is unset, and a client URL's without a port."""

DEFAULT_GRPC_PORT = 8001
"""tritonserver's gRPC port when `TritonConfig.grpc_port` is unset, and a ``grpc://`` URL's without a port."""

DEFAULT_METRICS_PORT = 8002
"""tritonserver's Prometheus metrics port when `TritonConfig.metrics_port` is unset."""

TRITON_LOCAL_IP = "127.0.0.1"
"""Where the library reaches a server that listens on every interface (``0.0.0.0``) of this host."""

TRITON_CONTEXT_FIELD_NAME = "triton_context"
"""Keyword argument under which `@triton_context` passes the model's `TritonContext` to a callable."""

TRITON_PYTHON_BACKEND_INTERPRETER_DIRNAME = "python_backend_interpreter"
"""Kept for code that imports it; this library runs the Python backend stub of the running
interpreter's version and creates no folder of that name."""

DEFAULT_TRITON_STARTUP_TIMEOUT_S = 120
"""Seconds `Triton` waits for its tritonserver to answer ready before it reports a failed start."""

CREATE_TRITON_CLIENT_TIMEOUT_S = 10
"""Kept for code that imports it: the published library's limit on creating its internal client.
This library's internal calls take their own per-call timeouts."""


def pytriton_home(environ: Mapping[str, str] = os.environ) -> pathlib.Path:
    """``$PYTRITON_HOME``, else ``$XDG_CACHE_HOME/pytriton``, else ``~/.cache/pytriton``, absolute.

    ``~`` and ``$VARIABLES`` inside the values are expanded, so a value written for a shell works.
    """
    configured = environ.get(environment.HOME)
    if not configured:
        cache_home = environ.get("XDG_CACHE_HOME") or os.path.join("~", ".cache")
        configured = os.path.join(cache_home, "pytriton")
    return pathlib.Path(os.path.expanduser(os.path.expandvars(configured))).resolve()


PYTRITON_HOME = pytriton_home()
"""Per-user folder for the library's files that outlive a process; read once, at import.

Nothing in this library writes there today: it is exported because published PyTriton code
reads it (e.g. to find or clear a cache)."""

METRICS_PERIOD_ENV = environment.METRICS_PERIOD_S
"""Environment variable: how often (seconds, default 1) each model's proxy brings the worker's
metrics to Triton's ``/metrics`` port (`pytriton.proxy.metrics`)."""
