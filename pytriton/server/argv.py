"""Server options -> tritonserver command line.

A pure function of a merged `TritonConfig` and the paths the server layer prepared; it starts
nothing and reads nothing, so every option's spelling is unit-tested without the binary.

Every flag is written as one `--name=value` word: the argv goes to `subprocess` without a
shell, and one word per option keeps values such as `*` or `local,size=N` intact.
"""

from __future__ import annotations

import pathlib
from typing import Any, List, Mapping, Sequence

from pytriton.exceptions import PyTritonBadParameterError
from pytriton.server.config import TritonConfig

SHM_PREFIX_SETTING = "shm-region-prefix-name"
"""Python-backend setting that names this server's shared-memory segments."""

OPTION_FLAGS: Mapping[str, str] = {
    # TritonConfig field -> tritonserver 2.51 flag; each flag checked against `tritonserver --help`.
    "id": "--id",
    "log_verbose": "--log-verbose",
    "log_info": "--log-info",
    "log_warning": "--log-warning",
    "log_error": "--log-error",
    "log_format": "--log-format",
    "log_file": "--log-file",
    "exit_on_error": "--exit-on-error",
    "strict_readiness": "--strict-readiness",
    "exit_timeout_secs": "--exit-timeout-secs",
    "http_address": "--http-address",
    "http_port": "--http-port",
    "http_header_forward_pattern": "--http-header-forward-pattern",
    "http_thread_count": "--http-thread-count",
    "http_restricted_api": "--http-restricted-api",
    "allow_http": "--allow-http",
    "grpc_address": "--grpc-address",
    "grpc_port": "--grpc-port",
    "grpc_header_forward_pattern": "--grpc-header-forward-pattern",
    "grpc_infer_allocation_pool_size": "--grpc-infer-allocation-pool-size",
    "grpc_use_ssl": "--grpc-use-ssl",
    "grpc_use_ssl_mutual": "--grpc-use-ssl-mutual",  # written only when True, see _option_words
    "grpc_server_cert": "--grpc-server-cert",
    "grpc_server_key": "--grpc-server-key",
    "grpc_root_cert": "--grpc-root-cert",
    "grpc_infer_response_compression_level": "--grpc-infer-response-compression-level",
    "grpc_keepalive_time": "--grpc-keepalive-time",
    "grpc_keepalive_timeout": "--grpc-keepalive-timeout",
    "grpc_keepalive_permit_without_calls": "--grpc-keepalive-permit-without-calls",
    "grpc_http2_max_pings_without_data": "--grpc-http2-max-pings-without-data",
    "grpc_http2_min_recv_ping_interval_without_data": "--grpc-http2-min-recv-ping-interval-without-data",
    "grpc_http2_max_ping_strikes": "--grpc-http2-max-ping-strikes",
    "grpc_restricted_protocol": "--grpc-restricted-protocol",
    "allow_grpc": "--allow-grpc",
    "allow_metrics": "--allow-metrics",
    "allow_gpu_metrics": "--allow-gpu-metrics",
    "allow_cpu_metrics": "--allow-cpu-metrics",
    "metrics_address": "--metrics-address",
    "metrics_port": "--metrics-port",
    "metrics_interval_ms": "--metrics-interval-ms",
    "metrics_config": "--metrics-config",
    "model_load_thread_count": "--model-load-thread-count",
    "buffer_manager_thread_count": "--buffer-manager-thread-count",
    "pinned_memory_pool_byte_size": "--pinned-memory-pool-byte-size",
    "cuda_memory_pool_byte_size": "--cuda-memory-pool-byte-size",  # <device>:<bytes>, once per device
    "response_cache_byte_size": "--cache-config",  # local,size=N; the old --response-cache-byte-size is deprecated
    "cache_config": "--cache-config",
    "trace_config": "--trace-config",
    "rate_limit": "--rate-limit",
    "backend_config": "--backend-config",
    "allow_vertex_ai": "--allow-vertex-ai",
    "vertex_ai_port": "--vertex-ai-port",  # written whenever the endpoint is on, like the other ports
    "vertex_ai_thread_count": "--vertex-ai-thread-count",
    "vertex_ai_default_model": "--vertex-ai-default-model",
    "allow_sagemaker": "--allow-sagemaker",
    "sagemaker_port": "--sagemaker-port",  # written whenever the endpoint is on, like the other ports
    "sagemaker_safe_port_range": "--sagemaker-safe-port-range",
    "sagemaker_thread_count": "--sagemaker-thread-count",
}
"""Every `TritonConfig` field that becomes a flag, and that flag."""

LIBRARY_FLAGS = (
    "--model-repository",
    "--model-control-mode",
    "--load-model",
    "--disable-auto-complete-config",
    "--backend-directory",
    "--cache-directory",
    "--backend-config",
)
"""Flags the library always writes, whatever the config says."""

FIELDS_FROM_KEYWORDS = frozenset({"model_repository", "cache_directory"})
"""Fields that reach the argv through a keyword argument of `build_argv`, not `OPTION_FLAGS`."""

PYTRITON_SETTINGS = frozenset({"model_backend", "drain_serving_s", "openai_port", "triton_on_localhost"})
"""Fields that are pytriton's own settings: no tritonserver flag, never in the argv."""


def build_argv(
    config: TritonConfig,
    *,
    binary: pathlib.Path,
    model_repository: pathlib.Path,
    backend_directory: pathlib.Path,
    cache_directory: pathlib.Path,
    shm_region_prefix: str,
    extra_backend_config: Sequence[str] = (),
) -> List[str]:
    """The full tritonserver command line for a merged config.

    The library always asks for explicit model control with `--load-model=*`, so every model
    written to the repository loads at start-up and nothing else is polled. The ports are
    always written (8000/8001/8002 when unset), and the Vertex AI and SageMaker ports (8080)
    whenever that endpoint is on, so the argv says where clients must connect. Every other field is written
    only when set; None keeps Triton's default. Environment-dependent defaults (Vertex AI's
    ``AIP_*`` variables) are resolved before, by `pytriton.server.config.merge.merge`.

    Args:
        config: The merged options (see `pytriton.server.config.merge.merge`).
        binary: The tritonserver executable; the first word of the argv.
        model_repository: The repository the models were written to. It is the one the server
            layer chose (`config.model_repository` or a temporary folder), so the config's own
            field is not read here.
        backend_directory: Folder holding `python/libtriton_python.so` and its stub.
        cache_directory: The library's bundled response-cache folder; `config.cache_directory`,
            when set, replaces it because the user pointed Triton at their own caches.
        shm_region_prefix: This server's prefix of Python-backend shared-memory segments, so two
            servers on one host never share segments.
        extra_backend_config: More `"<backend>,<setting>=<value>"` items the library needs
            (e.g. Python backend shared-memory sizes); written before the user's items.

    Returns:
        The argv, binary first, ready for `subprocess.Popen` without a shell.

    Raises:
        PyTritonBadParameterError: The prefix is empty or contains characters a segment name
            cannot hold, or `config.backend_config` tries to change the prefix.
    """
    if not shm_region_prefix or any(char in shm_region_prefix for char in "/,= \t\n"):
        raise PyTritonBadParameterError(
            f"shm_region_prefix={shm_region_prefix!r} is invalid: expected a non-empty name without '/', ',', '=' "
            "or whitespace"
        )
    for item in config.backend_config or ():
        backend, _, setting = item.partition(",")
        if backend.strip() == "python" and setting.partition("=")[0].strip() == SHM_PREFIX_SETTING:
            raise PyTritonBadParameterError(
                f"TritonConfig.backend_config item {item!r} is not allowed: the library sets "
                f"python,{SHM_PREFIX_SETTING} itself so each server's shared memory stays its own"
            )

    argv = [
        str(binary),
        f"--model-repository={model_repository}",
        "--model-control-mode=explicit",
        "--load-model=*",  # '*' must be the only --load-model
        # Our config.pbtxt is complete. With auto-complete on, the Python backend starts one extra
        # stub per model load only to ask it for config changes: 1.3-1.6 s of a 1.6-1.9 s load.
        "--disable-auto-complete-config",
        f"--backend-directory={backend_directory}",
        f"--cache-directory={config.cache_directory or cache_directory}",
        f"--backend-config=python,{SHM_PREFIX_SETTING}={shm_region_prefix}",
    ]
    argv.extend(f"--backend-config={item}" for item in extra_backend_config)
    # Ports are written even when unset, so the command line alone says where to connect.
    effective = {
        "http_port": config.effective_http_port,
        "grpc_port": config.effective_grpc_port,
        "metrics_port": config.effective_metrics_port,
    }
    if config.allow_vertex_ai:
        effective["vertex_ai_port"] = config.effective_vertex_ai_port
    if config.allow_sagemaker:
        effective["sagemaker_port"] = config.effective_sagemaker_port
    for name, flag in OPTION_FLAGS.items():
        value = effective.get(name, getattr(config, name))
        if value is not None:
            argv.extend(_option_words(name, flag, value))
    return argv


def _option_words(name: str, flag: str, value: Any) -> List[str]:
    """The argv words of one set field; lists and per-device sizes repeat their flag."""
    if name == "response_cache_byte_size":
        return [f"{flag}=local,size={value}"]
    if name == "cuda_memory_pool_byte_size":
        pools = value if isinstance(value, Mapping) else {0: value}
        return [f"{flag}={device}:{size}" for device, size in sorted(pools.items())]
    if name == "grpc_use_ssl_mutual" and value is False:
        # Triton 2.51 turns SSL on whenever this flag appears, even as `=false` (the gRPC endpoint
        # then fails to start, reported as "Socket ... already in use"). Off is its default anyway.
        return []
    if isinstance(value, bool):  # before int: bool is an int subclass
        return [f"{flag}={'true' if value else 'false'}"]
    if isinstance(value, tuple):
        return [f"{flag}={item}" for item in value]
    return [f"{flag}={value}"]
