"""Server options -> one validated `TritonConfig`.

Flow, one way: this module declares the fields and checks them; `pytriton.server.config.reading`
reads their values from text (the environment, mappings); `pytriton.server.config.merge.merge`
merges the `TritonConfig` given to `Triton(config=...)` with the `PYTRITON_TRITON_CONFIG_*`
environment and the platform's variables; then `pytriton.server.argv.build_argv` turns the
result into the tritonserver command line.

Precedence (contract page "Deploying models"): a field set explicitly in the config given to
`Triton` wins, then the environment variable, then the default. A field left at `None` means
"Triton's own default": no flag is passed for it. The one exception is the ports, which the
library always passes (8000, 8001, 8002 unless set) so that clients know where to connect.

Environment variables, one per field: `PYTRITON_TRITON_CONFIG_<FIELD NAME IN UPPER CASE>`.
Their text is read by the field kinds of `pytriton.server.config.fields`:

- integers and floats are parsed as numbers, paths taken as given;
- booleans accept `true/1/yes/on` and `false/0/no/off`, case-insensitive;
- list fields (`backend_config`, `cache_config`, `trace_config`, `metrics_config`,
  `http_restricted_api`, `grpc_restricted_protocol`) are split on `;`, because their items
  contain commas
  (`PYTRITON_TRITON_CONFIG_BACKEND_CONFIG="python,shm-default-byte-size=1048576;python,shm-growth-byte-size=1048576"`);
- a list field also takes one item per indexed variable, `<NAME>_0`, `<NAME>_1`, … (the
  published PyTriton's form; an item may then hold a `;`). Items come in index order, after
  those of the plain variable when both are set;
- `cuda_memory_pool_byte_size` is an integer (GPU 0) or `;`-separated `<device>:<bytes>` pairs;
- an empty value counts as unset, so `VAR= python app.py` clears an inherited variable;
- `PYTRITON_TRITON_CONFIG_LOG_VERBOSITY` is an alias of `..._LOG_VERBOSE`; when both are set,
  `LOG_VERBOSE` (the field's own name) wins and a warning says so if they differ;
- any other `PYTRITON_TRITON_CONFIG_*` variable is reported with a warning, since it is most
  likely a typo that would otherwise be silently ignored.

Last, `merge` (in `pytriton.server.config.merge`) writes what Google Vertex AI's own `AIP_*`
variables will make tritonserver do into the config (`pytriton.server.vertex_ai`); they fill
only fields no other source set. It then checks that an enabled SageMaker endpoint has a port of
its own.

`TritonConfig.to_dict` and `TritonConfig.from_dict` turn a config into plain data and back (for
config files); `from_dict` reads text values by the same rules as the environment.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import pathlib
import re
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple, Union

from pytriton.constants import DEFAULT_GRPC_PORT, DEFAULT_HTTP_PORT, DEFAULT_METRICS_PORT
from pytriton.exceptions import PyTritonBadParameterError
from pytriton.server.config.fields import bad, plain
from pytriton.server.config.reading import ENV_PREFIX, config_from_dict, config_from_env, field_kinds

LOGGER = logging.getLogger("pytriton.server.config")

__all__ = [
    "DEFAULT_GRPC_PORT",
    "DEFAULT_HTTP_PORT",
    "DEFAULT_METRICS_PORT",
    "DEFAULT_SAGEMAKER_PORT",
    "ENV_PREFIX",
    "TritonConfig",
    "verbose_logging_warning",
]

DEFAULT_SAGEMAKER_PORT = 8080
"""tritonserver's SageMaker port when `sagemaker_port` is unset (``tritonserver --help``)."""

DEFAULT_VERTEX_AI_PORT = 8080
"""tritonserver's Vertex AI port when `vertex_ai_port` is unset and ``AIP_HTTP_PORT`` too."""

DEFAULT_EXIT_TIMEOUT_S = 30
"""Triton's own exit timeout when ``TritonConfig.exit_timeout_secs`` leaves it unset."""

_PORT_FIELDS = ("http_port", "grpc_port", "metrics_port", "vertex_ai_port", "sagemaker_port", "openai_port")
_NON_NEGATIVE_FIELDS = (
    "log_verbose",
    "exit_timeout_secs",
    "grpc_infer_allocation_pool_size",
    "grpc_keepalive_time",
    "grpc_keepalive_timeout",
    "grpc_http2_max_pings_without_data",
    "grpc_http2_min_recv_ping_interval_without_data",
    "grpc_http2_max_ping_strikes",
    "buffer_manager_thread_count",  # Triton's own default is 0
    "pinned_memory_pool_byte_size",
)
_POSITIVE_FIELDS = (
    "http_thread_count",  # zero threads would accept connections and never answer them
    "model_load_thread_count",
    "metrics_interval_ms",
    "response_cache_byte_size",  # a zero-byte cache can hold nothing; leave the field unset instead
    "vertex_ai_thread_count",
    "sagemaker_thread_count",
)
_CHOICES: Mapping[str, Tuple[str, ...]] = {
    # Triton compares these exactly, so the check does too.
    "log_format": ("default", "ISO8601"),
    "grpc_infer_response_compression_level": ("none", "low", "medium", "high"),
    "rate_limit": ("execution_count", "off"),
    "model_backend": ("pytriton", "python"),
}
# The shape tritonserver expects of each item of the list fields (see `tritonserver --help`).
_ITEM_SHAPES: Mapping[str, Tuple[re.Pattern[str], str]] = {
    "backend_config": (re.compile(r"^[^,=]+,[^,=]+=.*$"), "'<backend>,<setting>=<value>'"),
    "cache_config": (re.compile(r"^[^,=]+,[^,=]+=.*$"), "'<cache>,<setting>=<value>'"),
    "trace_config": (re.compile(r"^([^,=]+,)?[^,=]+=.*$"), "'[<mode>,]<setting>=<value>'"),
    "metrics_config": (re.compile(r"^[^,=]+=.*$"), "'<setting>=<value>'"),
    "http_restricted_api": (re.compile(r"^[^:=]+:[^=]+=.*$"), "'<api>[,<api>...]:<header>=<value>'"),
    "grpc_restricted_protocol": (re.compile(r"^[^:=]+:[^=]+=.*$"), "'<api>[,<api>...]:<header>=<value>'"),
}
_LOCAL_CACHE_SIZE = re.compile(r"^local,size=")
_PORT_RANGE = re.compile(r"^\s*([0-9]+)\s*-\s*([0-9]+)\s*$")


@dataclasses.dataclass(repr=False)
class TritonConfig:
    """Options of the tritonserver process; every field left at `None` keeps Triton's default.

    Fields may be assigned after construction, as in the published PyTriton; `Triton(config=...)`
    checks the config again then, so a bad assigned value gets an error naming the field.

    The fields mirror tritonserver 2.51 command-line options of the same name (`http_port` ->
    `--http-port`), so Triton's own documentation describes them. Fields the library itself
    must control (model control mode, backend directory, the Python backend's shared-memory
    prefix) are not options here.

    Attributes:
        id: Identifier of this server, reported in server metadata.
        model_repository: Folder the library writes the bound models into; a temporary folder
            when unset.
        log_verbose: Verbose logging level; 0 disables verbose logs.
        log_info: Enable info-level logging.
        log_warning: Enable warning-level logging.
        log_error: Enable error-level logging.
        log_format: `"default"` or `"ISO8601"`.
        log_file: File the server writes its log to instead of its standard output.
        exit_on_error: Exit the server when it fails to initialise (e.g. a model fails to load).
        strict_readiness: Report ready only when every model is ready.
        exit_timeout_secs: Seconds a stop waits for in-flight requests before the server exits.
        http_address: Address the HTTP endpoint binds to.
        http_port: HTTP port; 8000 when unset.
        http_header_forward_pattern: Regular expression of HTTP headers forwarded as request
            parameters.
        http_thread_count: Threads handling HTTP requests.
        http_restricted_api: Items `"<api>[,<api>...]:<header>=<value>"`; each restricts those
            HTTP APIs to requests carrying the header. One string is one item.
        allow_http: Serve HTTP.
        grpc_address: Address the gRPC endpoint binds to.
        grpc_port: gRPC port; 8001 when unset.
        grpc_header_forward_pattern: Regular expression of gRPC headers forwarded as request
            parameters.
        grpc_infer_allocation_pool_size: Request/response objects kept for reuse.
        grpc_use_ssl: Use SSL for gRPC.
        grpc_use_ssl_mutual: Use mutual SSL authentication for gRPC.
        grpc_server_cert: PEM server certificate file.
        grpc_server_key: PEM server key file.
        grpc_root_cert: PEM root certificate file.
        grpc_infer_response_compression_level: `"none"`, `"low"`, `"medium"` or `"high"`.
        grpc_keepalive_time: Milliseconds between keepalive pings.
        grpc_keepalive_timeout: Milliseconds to wait for a keepalive ping acknowledgement.
        grpc_keepalive_permit_without_calls: Allow keepalive pings without calls in flight.
        grpc_http2_max_pings_without_data: Pings sent without data; 0 means no limit.
        grpc_http2_min_recv_ping_interval_without_data: Minimum milliseconds between received
            pings without data.
        grpc_http2_max_ping_strikes: Bad pings tolerated; 0 means any number.
        grpc_restricted_protocol: Items `"<api>[,<api>...]:<header>=<value>"` for gRPC; clients
            send the header prefixed with `triton-grpc-protocol-`. One string is one item.
        allow_grpc: Serve gRPC.
        allow_metrics: Serve Prometheus metrics.
        allow_gpu_metrics: Collect GPU metrics.
        allow_cpu_metrics: Collect CPU metrics.
        metrics_address: Address the metrics endpoint binds to.
        metrics_port: Metrics port; 8002 when unset.
        metrics_interval_ms: Milliseconds between metric collections.
        metrics_config: Items `"<setting>=<value>"` passed as `--metrics-config` (e.g.
            `"summary_latencies=true"` adds latency summaries to the metrics).
        model_load_thread_count: Threads loading models concurrently.
        buffer_manager_thread_count: Threads copying tensor contents.
        pinned_memory_pool_byte_size: Bytes of pinned host memory.
        cuda_memory_pool_byte_size: Bytes of CUDA memory: an integer for GPU 0, or a mapping
            `{device_id: bytes}`.
        response_cache_byte_size: Bytes of the local response cache (passed as
            `--cache-config local,size=N`); models opt in with `ModelConfig(response_cache=True)`.
        cache_config: Items `"<cache>,<setting>=<value>"` passed as `--cache-config`.
        cache_directory: Folder holding the response-cache implementations; the library's
            bundled folder when unset.
        trace_config: Items `"[<mode>,]<setting>=<value>"` passed as `--trace-config`.
        rate_limit: `"execution_count"` or `"off"`.
        backend_config: Items `"<backend>,<setting>=<value>"` passed as `--backend-config`.
        allow_vertex_ai: Serve Google Vertex AI's prediction protocol on its own port (see
            docs/vertex_ai.md). Unset: on when the environment has `AIP_MODE=PREDICTION`, as in a
            Vertex AI serving container. The endpoint binds every interface and does not check
            the access token (`TritonSecurityConfig`).
        vertex_ai_port: Port of the Vertex AI endpoint; `AIP_HTTP_PORT`, else 8080, when unset.
        vertex_ai_thread_count: Threads handling Vertex AI requests (Triton's default: 8).
        vertex_ai_default_model: The model the predict route runs. Unset, the server must serve
            exactly one model, and that one answers.
        allow_sagemaker: Serve Amazon SageMaker's protocol (`/ping`, `/invocations`) on its own
            port. Like Vertex AI's, the endpoint binds every interface, whatever `http_address`
            says, and does not check the access token (`TritonSecurityConfig`).
        sagemaker_port: Port of the SageMaker endpoint; 8080 when unset. It must differ from
            every other endpoint's port.
        sagemaker_safe_port_range: `"<low>-<high>"`: the ports allowed to the endpoints other
            than SageMaker's while it is on; tritonserver refuses to start with one outside.
        sagemaker_thread_count: Threads handling SageMaker requests (Triton's default: 8).
        model_backend: pytriton's own setting, not a tritonserver option: the Triton backend
            that serves the bound models. `"pytriton"` (the default wherever the package was
            built with a C compiler): pytriton's own backend, which hands each batch from
            tritonserver straight to your process. `"python"`: a proxy model in Triton's Python
            backend, one stub process per instance in between (the published PyTriton's way;
            it needs a Python-backend stub for this Python, see docs/installation.md).
        drain_serving_s: pytriton's own setting: how long a stop keeps answering new requests
            (readiness already false) before it refuses them as retryable (HTTP 503, gRPC
            UNAVAILABLE) and ends once the requests it accepted are answered. 0 when unset: for
            an orchestrator that takes the server out of its endpoints before the signal (the
            chart's preStop); a few seconds for one that stops routing only once it sees
            readiness false (docs/reliability.md, "Stopping under load").
        openai_port: pytriton's own setting: the port of the OpenAI-compatible API
            (docs/openai.md), served by a process the serving process starts and stops beside
            Triton's endpoints, on Triton's `http_address`; off when unset. Needs the ``openai``
            extra (``pip install 'aiohttp>=3.9'``).
        triton_on_localhost: pytriton's own setting, for a server whose public door is the
            OpenAI-compatible API (`openai_port`, with its API key): Triton's own HTTP and gRPC
            ports listen on 127.0.0.1 only (their `http_address` and `grpc_address` left unset
            or loopback), so that nothing outside the machine reaches the models without the
            key, and the OpenAI-compatible API listens on every interface. Off when unset.

    Either HTTP or gRPC must stay allowed: the library loads the models and watches the server
    through one of them, so `allow_http=False` with `allow_grpc=False` is refused here.
    """

    id: Optional[str] = None
    model_repository: Optional[pathlib.Path] = None
    log_verbose: Optional[int] = None
    log_info: Optional[bool] = None
    log_warning: Optional[bool] = None
    log_error: Optional[bool] = None
    log_format: Optional[str] = None
    log_file: Optional[pathlib.Path] = None
    exit_on_error: Optional[bool] = None
    strict_readiness: Optional[bool] = None
    exit_timeout_secs: Optional[int] = None
    http_address: Optional[str] = None
    http_port: Optional[int] = None
    http_header_forward_pattern: Optional[str] = None
    http_thread_count: Optional[int] = None
    http_restricted_api: Optional[Union[str, Sequence[str]]] = None
    allow_http: Optional[bool] = None
    grpc_address: Optional[str] = None
    grpc_port: Optional[int] = None
    grpc_header_forward_pattern: Optional[str] = None
    grpc_infer_allocation_pool_size: Optional[int] = None
    grpc_use_ssl: Optional[bool] = None
    grpc_use_ssl_mutual: Optional[bool] = None
    grpc_server_cert: Optional[pathlib.Path] = None
    grpc_server_key: Optional[pathlib.Path] = None
    grpc_root_cert: Optional[pathlib.Path] = None
    grpc_infer_response_compression_level: Optional[str] = None
    grpc_keepalive_time: Optional[int] = None
    grpc_keepalive_timeout: Optional[int] = None
    grpc_keepalive_permit_without_calls: Optional[bool] = None
    grpc_http2_max_pings_without_data: Optional[int] = None
    grpc_http2_min_recv_ping_interval_without_data: Optional[int] = None
    grpc_http2_max_ping_strikes: Optional[int] = None
    grpc_restricted_protocol: Optional[Union[str, Sequence[str]]] = None
    allow_grpc: Optional[bool] = None
    allow_metrics: Optional[bool] = None
    allow_gpu_metrics: Optional[bool] = None
    allow_cpu_metrics: Optional[bool] = None
    metrics_address: Optional[str] = None
    metrics_port: Optional[int] = None
    metrics_interval_ms: Optional[float] = None
    metrics_config: Optional[Sequence[str]] = None
    model_load_thread_count: Optional[int] = None
    buffer_manager_thread_count: Optional[int] = None
    pinned_memory_pool_byte_size: Optional[int] = None
    cuda_memory_pool_byte_size: Optional[Union[int, Mapping[int, int]]] = None
    response_cache_byte_size: Optional[int] = None
    cache_config: Optional[Sequence[str]] = None
    cache_directory: Optional[pathlib.Path] = None
    trace_config: Optional[Sequence[str]] = None
    rate_limit: Optional[str] = None
    backend_config: Optional[Sequence[str]] = None
    allow_vertex_ai: Optional[bool] = None
    vertex_ai_port: Optional[int] = None
    vertex_ai_thread_count: Optional[int] = None
    vertex_ai_default_model: Optional[str] = None
    allow_sagemaker: Optional[bool] = None
    sagemaker_port: Optional[int] = None
    sagemaker_safe_port_range: Optional[str] = None
    sagemaker_thread_count: Optional[int] = None
    model_backend: Optional[str] = None
    drain_serving_s: Optional[float] = None
    openai_port: Optional[int] = None
    triton_on_localhost: Optional[bool] = None

    def __post_init__(self) -> None:
        """Check every set field, and normalise paths and lists so equal configs compare equal."""
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if value is None:
                continue
            normalised = field_kinds(type(self))[field.name].check(field.name, value)
            if normalised is not value:
                object.__setattr__(self, field.name, normalised)
        self._check_ranges()

    def _check_ranges(self) -> None:
        for name in _PORT_FIELDS:
            value = getattr(self, name)
            if value is not None and not 1 <= value <= 65535:
                raise bad(name, value, "a port number in 1..65535 (Triton needs a fixed port to listen on)")
        for name in _NON_NEGATIVE_FIELDS:
            value = getattr(self, name)
            if value is not None and value < 0:
                raise bad(name, value, "an integer >= 0")
        for name in _POSITIVE_FIELDS:
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise bad(name, value, "a number > 0")
        if self.openai_port is not None and self.openai_port in (
                self.effective_http_port, self.effective_grpc_port, self.effective_metrics_port):
            raise bad("openai_port", self.openai_port, "a port of its own, not Triton's HTTP, gRPC or metrics port")
        if self.drain_serving_s is not None and self.drain_serving_s < 0:
            raise bad("drain_serving_s", self.drain_serving_s, "a number of seconds >= 0")
        for name, choices in _CHOICES.items():
            value = getattr(self, name)
            if value is not None and value not in choices:
                raise bad(name, value, "one of " + ", ".join(repr(choice) for choice in choices))
        for name, (shape, described) in _ITEM_SHAPES.items():
            for item in getattr(self, name) or ():
                if not shape.match(item):
                    raise bad(name, item, f"a list of items shaped {described}")
        pools = self.cuda_memory_pool_byte_size
        if isinstance(pools, Mapping):
            for device, size in pools.items():
                if device < 0 or size < 0:
                    raise bad("cuda_memory_pool_byte_size", pools, "a mapping of device ids >= 0 to byte sizes >= 0")
        elif pools is not None and pools < 0:
            raise bad("cuda_memory_pool_byte_size", pools, "a byte size >= 0 (for GPU 0)")
        if self.allow_http is False and self.allow_grpc is False:
            raise PyTritonBadParameterError(
                "TritonConfig.allow_http=False with allow_grpc=False is invalid: the library loads the models and "
                "watches the server through HTTP or gRPC, so at least one of them must stay allowed"
            )
        if self.sagemaker_safe_port_range is not None:
            _check_port_range(self.sagemaker_safe_port_range)
        if self.grpc_use_ssl_mutual and self.grpc_use_ssl is False:
            raise PyTritonBadParameterError(
                "TritonConfig.grpc_use_ssl_mutual=True with grpc_use_ssl=False is invalid: mutual SSL authentication "
                "needs SSL; set grpc_use_ssl=True or leave it unset"
            )
        model = self.vertex_ai_default_model
        if model is not None and (not model or model != model.strip() or "/" in model):
            # Triton reads an empty name as "none given"; a slash can never name a model folder.
            raise bad("vertex_ai_default_model", model, "the name of a bound model (not empty, no '/' or edge spaces)")
        if self.response_cache_byte_size is not None:
            clashing = [item for item in self.cache_config or () if _LOCAL_CACHE_SIZE.match(item)]
            if clashing:
                raise PyTritonBadParameterError(
                    f"TritonConfig.response_cache_byte_size={self.response_cache_byte_size!r} and "
                    f"TritonConfig.cache_config item {clashing[0]!r} both set the local cache size; set only one"
                )

    def __repr__(self) -> str:
        # Only the set fields: fifty `None`s would hide the few options that matter in a log line.
        values = ((field.name, getattr(self, field.name)) for field in dataclasses.fields(self))
        return f"{type(self).__name__}({', '.join(f'{name}={value!r}' for name, value in values if value is not None)})"

    def warn_if_verbose(self, log: logging.Logger) -> None:
        """Log `verbose_logging_warning`'s WARNING on `log` when `log_verbose` > 0.

        Called once as the server starts, so that a verbose level left on from debugging (or
        inherited through ``PYTRITON_TRITON_CONFIG_LOG_VERBOSE``) is noticed in production logs.
        """
        message = verbose_logging_warning(self.log_verbose)
        if message is not None:
            log.warning("%s", message)

    @property
    def effective_http_port(self) -> int:
        """The HTTP port the server listens on: `http_port`, or 8000."""
        return DEFAULT_HTTP_PORT if self.http_port is None else self.http_port

    @property
    def effective_grpc_port(self) -> int:
        """The gRPC port the server listens on: `grpc_port`, or 8001."""
        return DEFAULT_GRPC_PORT if self.grpc_port is None else self.grpc_port

    @property
    def effective_metrics_port(self) -> int:
        """The metrics port the server listens on: `metrics_port`, or 8002."""
        return DEFAULT_METRICS_PORT if self.metrics_port is None else self.metrics_port

    @property
    def effective_vertex_ai_port(self) -> int:
        """The Vertex AI port when the endpoint is on: `vertex_ai_port`, or 8080.

        `merge` copies `AIP_HTTP_PORT` into `vertex_ai_port`, so for a merged config this is
        the port tritonserver listens on.
        """
        return DEFAULT_VERTEX_AI_PORT if self.vertex_ai_port is None else self.vertex_ai_port

    @property
    def effective_sagemaker_port(self) -> int:
        """The SageMaker port when that endpoint is on: `sagemaker_port`, or 8080."""
        return DEFAULT_SAGEMAKER_PORT if self.sagemaker_port is None else self.sagemaker_port

    def to_dict(self) -> Dict[str, Any]:
        """Every field, by name, as plain data: lists for list fields, dicts for mappings.

        Unset fields are included as None. `from_dict` reads the result back into an equal config,
        so a config can be kept in a file and edited there.
        """
        return {field.name: plain(getattr(self, field.name)) for field in dataclasses.fields(self)}

    @classmethod
    def from_dict(cls, config: Mapping[str, Any]) -> TritonConfig:
        """A config from field name -> value, such as `to_dict` gives or a config file holds.

        Values of the field's own type are taken as they are; text (a config file read as
        strings) is read by the environment's rules (``"8000"`` for a port, ``"false"`` for a
        flag, ``;`` between list items). None leaves a field unset.

        Args:
            config: Field name -> value.

        Returns:
            The config.

        Raises:
            PyTritonBadParameterError: A value is invalid; the message names its key.

        Warns:
            UserWarning: For every key that names no field; the key is ignored.
        """
        read: TritonConfig = config_from_dict(cls, config)
        return read

    @classmethod
    def from_env(cls, environ: Optional[Mapping[str, str]] = None) -> TritonConfig:
        """Read the fields set through `PYTRITON_TRITON_CONFIG_*` environment variables.

        Lets a deployment tune the server (log verbosity, ports, …) without touching code; the
        rules for each type are in this module's docstring.

        Args:
            environ: The environment to read; `os.environ` when None.

        Returns:
            A config with the fields found in the environment set and every other field None.

        Raises:
            PyTritonBadParameterError: A variable's value cannot be read as its field's type or
                is out of range; the message names the variable and its value.

        Warns:
            UserWarning: For every `PYTRITON_TRITON_CONFIG_*` variable that names no field.
        """
        read: TritonConfig = config_from_env(cls, os.environ if environ is None else environ)
        return read


def exit_timeout_s(config: TritonConfig) -> float:
    """How long a stop waits for the requests in flight: the server's exit timeout."""
    return config.exit_timeout_secs if config.exit_timeout_secs is not None else DEFAULT_EXIT_TIMEOUT_S


def verbose_logging_warning(log_verbose: Optional[int]) -> Optional[str]:
    """The start-up warning for a verbose log level, or None when verbose logging is off (0 or unset).

    Verbose tritonserver logs cost time on every request, and they can carry what requests
    hold (names, shapes, parameters, sometimes data), which may be private.
    """
    if log_verbose is None or log_verbose <= 0:
        return None
    return (
        f"tritonserver runs with log_verbose={log_verbose}: verbose logging slows the server down and may write "
        "request data to the log; set TritonConfig.log_verbose (or PYTRITON_TRITON_CONFIG_LOG_VERBOSE) to 0 "
        "outside debugging"
    )


def _check_port_range(text: str) -> None:
    """`sagemaker_safe_port_range` must be ``"<low>-<high>"`` with ports low <= high."""
    match = _PORT_RANGE.match(text)
    if match is None or not 1 <= int(match.group(1)) <= int(match.group(2)) <= 65535:
        raise bad("sagemaker_safe_port_range", text, "'<low>-<high>' with ports 1 <= low <= high <= 65535")
