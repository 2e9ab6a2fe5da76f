"""The server's options: one validated `TritonConfig`, read from code, text and the environment.

Flow, one way: `pytriton.server.config.options` declares the fields (`TritonConfig`) and checks
their ranges; `pytriton.server.config.fields` says how each kind of field is checked and read
from text; `pytriton.server.config.reading` reads the values of the `PYTRITON_TRITON_CONFIG_*`
variables and of mappings; `pytriton.server.config.merge` merges the code's config with the
environment and Vertex AI's variables into the one config a server runs with. Then
`pytriton.server.argv` turns it into the tritonserver command line.

The names below are `pytriton.server.config.options`'s, for the modules that only need a config.
"""

from pytriton.server.config.options import (
    DEFAULT_EXIT_TIMEOUT_S,
    DEFAULT_GRPC_PORT,
    DEFAULT_HTTP_PORT,
    DEFAULT_METRICS_PORT,
    DEFAULT_SAGEMAKER_PORT,
    DEFAULT_VERTEX_AI_PORT,
    ENV_PREFIX,
    TritonConfig,
    exit_timeout_s,
    verbose_logging_warning,
)

__all__ = [
    "DEFAULT_EXIT_TIMEOUT_S",
    "DEFAULT_GRPC_PORT",
    "DEFAULT_HTTP_PORT",
    "DEFAULT_METRICS_PORT",
    "DEFAULT_SAGEMAKER_PORT",
    "DEFAULT_VERTEX_AI_PORT",
    "ENV_PREFIX",
    "TritonConfig",
    "exit_timeout_s",
    "verbose_logging_warning",
]
