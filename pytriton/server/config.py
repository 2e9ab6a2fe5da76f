"""Server options -> one validated `TritonConfig`.

Flow: the `TritonConfig` given to `Triton(config=...)` and the `PYTRITON_TRITON_CONFIG_*`
environment variables are merged here (`merge`), then `pytriton.server.argv.build_argv`
turns the result into the tritonserver command line.

Precedence (contract page "Deploying models"): a field set explicitly in the config given to
`Triton` wins, then the environment variable, then the default. A field left at `None` means
"Triton's own default": no flag is passed for it. The one exception is the ports, which the
library always passes (8000, 8001, 8002 unless set) so that clients know where to connect.

Environment variables, one per field: `PYTRITON_TRITON_CONFIG_<FIELD NAME IN UPPER CASE>`.
Their text is read by the field kinds of `pytriton.server.config_fields`:

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

Last, `merge` writes what Google Vertex AI's own `AIP_*` variables will make tritonserver do into
the config (`pytriton.server.vertex_ai`); they fill only fields no other source set. It then
checks that an enabled SageMaker endpoint has a port of its own.

`TritonConfig.to_dict` and `TritonConfig.from_dict` turn a config into plain data and back (for
config files); `from_dict` reads text values by the same rules as the environment.
"""

from __future__ import annotations

import dataclasses
import difflib
import logging
import os
import pathlib
import re
import typing
import warnings
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from pytriton.constants import DEFAULT_GRPC_PORT, DEFAULT_HTTP_PORT, DEFAULT_METRICS_PORT
from pytriton.exceptions import PyTritonBadParameterError
from pytriton.server.config_fields import Kind, bad, kind_of, plain
from pytriton.server.vertex_ai import DEFAULT_VERTEX_AI_PORT, resolve_vertex_ai

LOGGER = logging.getLogger(__name__)

ENV_PREFIX = "PYTRITON_TRITON_CONFIG_"
"""Every environment variable read by `TritonConfig.from_env` starts with this prefix."""

__all__ = [
    "DEFAULT_GRPC_PORT",
    "DEFAULT_HTTP_PORT",
    "DEFAULT_METRICS_PORT",
    "DEFAULT_SAGEMAKER_PORT",
    "ENV_PREFIX",
    "TritonConfig",
    "merge",
    "verbose_logging_warning",
]

DEFAULT_SAGEMAKER_PORT = 8080
"""tritonserver's SageMaker port when `sagemaker_port` is unset (``tritonserver --help``)."""

_ENV_ALIASES: Mapping[str, str] = {"LOG_VERBOSITY": "log_verbose"}
"""Extra environment names (after the prefix) -> field. The field's own name wins over an alias."""

_INDEXED_VARIABLE = re.compile(r"^(?P<field>.+)_(?P<index>[0-9]+)$")
"""`<FIELD>_<n>`: one item of a list field (after the prefix)."""

_PORT_FIELDS = ("http_port", "grpc_port", "metrics_port", "vertex_ai_port", "sagemaker_port")
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

    def __post_init__(self) -> None:
        """Check every set field, and normalise paths and lists so equal configs compare equal."""
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if value is None:
                continue
            normalised = _FIELD_KINDS[field.name].check(field.name, value)
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
        names = [field.name for field in dataclasses.fields(cls)]
        values: Dict[str, Any] = {}
        for key, value in config.items():
            if key not in names:
                what = f"Key {key!r} given to TritonConfig.from_dict names no TritonConfig field"
                _warn_ignored(what, str(key), names)
                continue
            if value is None:
                continue
            values[key] = _from_text(key, value, f"TritonConfig.from_dict key {key!r}")
        return cls(**values)

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
        environ = os.environ if environ is None else environ
        by_env_name = {field.name.upper(): field.name for field in dataclasses.fields(cls)}
        values: Dict[str, Any] = {}
        sources: Dict[str, Tuple[str, str]] = {}
        indexed: Dict[str, List[Tuple[int, str, str]]] = {}  # field -> (index, variable, item)
        # Sorted so that warnings come out in a stable order.
        for variable in sorted(environ):
            if not variable.startswith(ENV_PREFIX):
                continue
            raw = environ[variable]
            suffix = variable[len(ENV_PREFIX) :]
            name = by_env_name.get(suffix) or _ENV_ALIASES.get(suffix)
            if name is None:
                item_of = _list_field_of_indexed(suffix, by_env_name)
                if item_of is None:
                    _warn_ignored(f"Environment variable {variable} names no TritonConfig field", suffix,
                                  list(by_env_name) + list(_ENV_ALIASES), prefix=ENV_PREFIX)
                elif raw.strip():
                    indexed.setdefault(item_of[0], []).append((item_of[1], variable, raw.strip()))
                continue
            if raw.strip() == "":
                continue
            value = _parse_env_value(variable, raw, name)
            if name in sources:
                # Only an alias and its field can meet here; the field's own name wins.
                values[name], sources[name] = _resolve_alias(name, (value, variable, raw), values[name], sources[name])
                continue
            values[name] = value
            sources[name] = (variable, raw)
        for name, items in indexed.items():
            # Each indexed variable is one whole item (it may hold a ';'), checked on its own.
            for _, variable, item in items:
                _checked(name, (item,), f"Environment variable {variable}={item!r}")
            values[name] = tuple(values.get(name, ())) + tuple(item for _, _, item in sorted(items))
        try:
            return cls(**values)
        except PyTritonBadParameterError as exc:
            raise PyTritonBadParameterError(f"{exc.message} (set by {ENV_PREFIX}* environment variables)") from exc


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
    return resolved


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


def _check_port_range(text: str) -> None:
    """`sagemaker_safe_port_range` must be ``"<low>-<high>"`` with ports low <= high."""
    match = _PORT_RANGE.match(text)
    if match is None or not 1 <= int(match.group(1)) <= int(match.group(2)) <= 65535:
        raise bad("sagemaker_safe_port_range", text, "'<low>-<high>' with ports 1 <= low <= high <= 65535")


# --- reading values from text -------------------------------------------------------------------


_FIELD_KINDS: Mapping[str, Kind] = {
    name: kind_of(annotation) for name, annotation in typing.get_type_hints(TritonConfig).items()
}


def _checked(name: str, value: Any, source: str) -> Any:
    """`value` for field `name` after the field's own checks; an error names `source`."""
    try:
        TritonConfig(**{name: value})  # range checks of this field alone, so the error names the source
    except PyTritonBadParameterError as exc:
        raise PyTritonBadParameterError(f"{source} is invalid for TritonConfig.{name}: {exc.message}") from exc
    return value


def _parsed(name: str, text: str, source: str) -> Any:
    """`text` read as a value of field `name` and checked; an error names `source`."""
    try:
        value = _FIELD_KINDS[name].parse(text)
    except ValueError as exc:
        raise PyTritonBadParameterError(f"{source} is invalid for TritonConfig.{name}: {exc}") from exc
    return _checked(name, value, source)


def _parse_env_value(variable: str, raw: str, name: str) -> Any:
    """Parse one variable for field `name`, naming the variable and its value in any error."""
    return _parsed(name, raw, f"Environment variable {variable}={raw!r}")


def _from_text(name: str, value: Any, source: str) -> Any:
    """A `from_dict` value: taken as it is when the field accepts it, else read as text."""
    if not isinstance(value, str):
        return value  # the dataclass checks it and names the field
    try:
        return _FIELD_KINDS[name].check(name, value)  # a string field, a path, one restriction item
    except PyTritonBadParameterError:
        return _parsed(name, value, f"{source}={value!r}")


def _list_field_of_indexed(suffix: str, by_env_name: Mapping[str, str]) -> Optional[Tuple[str, int]]:
    """``(field, index)`` when `suffix` is ``<LIST FIELD>_<n>``, else None."""
    match = _INDEXED_VARIABLE.match(suffix)
    if match is None:
        return None
    name = by_env_name.get(match.group("field"))
    if name is None or not _FIELD_KINDS[name].is_list:
        return None
    return name, int(match.group("index"))


def _resolve_alias(
    name: str, new: Tuple[Any, str, str], old_value: Any, old_source: Tuple[str, str]
) -> Tuple[Any, Tuple[str, str]]:
    """Pick between a field's own variable and its alias: the field's own name wins."""
    new_value, new_variable, new_raw = new
    canonical = ENV_PREFIX + name.upper()
    if new_variable == canonical:
        winner, loser = (new_value, (new_variable, new_raw)), (old_value, old_source)
    else:
        winner, loser = (old_value, old_source), (new_value, (new_variable, new_raw))
    if winner[0] != loser[0]:
        message = (
            f"Both {winner[1][0]}={winner[1][1]!r} and {loser[1][0]}={loser[1][1]!r} are set; "
            f"using {winner[1][0]} for TritonConfig.{name}"
        )
        LOGGER.warning("%s", message)
        warnings.warn(message, UserWarning, stacklevel=3)
    return winner


def _warn_ignored(what: str, given: str, known: Sequence[str], prefix: str = "") -> None:
    """Warn (and log) that `given` names nothing, most likely a typo; suggest the closest name."""
    close = difflib.get_close_matches(given, known, n=1)
    hint = f"; did you mean {prefix}{close[0]}?" if close else ""
    message = f"{what} and is ignored{hint}"
    LOGGER.warning("%s", message)
    warnings.warn(message, UserWarning, stacklevel=3)  # points at the caller of from_env / from_dict
