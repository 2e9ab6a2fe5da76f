"""Server options through the real tritonserver: each group of `TritonConfig` fields is shown by
what the running server does, not by the argv (``tests/unit/server/test_argv.py`` covers that).

Groups: addresses and ports, thread counts, gRPC keep-alive, gRPC TLS, metrics, logging, exit
timeout, strict readiness, the response cache, tracing; and the same effects when the fields come
from ``PYTRITON_TRITON_CONFIG_*`` environment variables instead of the config.

Servers shared by several tests are module fixtures: ``network`` (addresses, threads, metrics,
cache), ``diagnostics`` (verbose ISO8601 log, keep-alive, trace), ``quiet`` (default log level
with errors off) and ``env_server`` (fields from the environment). Tests that stop their server
or change its models start their own.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import json
import pathlib
import re
import socket
import subprocess
import threading
import time
import urllib.request
from typing import Callable, Dict, Iterator, List, Mapping, Optional, Sequence

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from support import free_ports, server_config
from tritonclient.utils import InferenceServerException

from pytriton.access_token import ACCESS_TOKEN_HEADER
from pytriton.client import ModelClient
from pytriton.client.exceptions import PyTritonClientError
from pytriton.exceptions import PyTritonBadParameterError
from pytriton.model_config import ModelConfig, Tensor
from pytriton.server.config import ENV_PREFIX
from pytriton.triton import Triton, TritonConfig

pytestmark = pytest.mark.functional

LOCAL = "127.0.0.1"
OTHER_LOOPBACK = "127.0.0.2"  # Linux routes all of 127/8 to lo: reachable only if bound to 0.0.0.0
F32 = {"inputs": [Tensor(dtype=np.float32, shape=(-1,))], "outputs": [Tensor(dtype=np.float32, shape=(-1,))]}
CACHE = "local,size=1048576"
KEEPALIVE = {  # TritonConfig field -> (value, row of Triton's verbose keep-alive table); none is Triton's default
    "grpc_keepalive_time": (7000, "keepalive_time_ms"),
    "grpc_keepalive_timeout": (3000, "keepalive_timeout_ms"),
    "grpc_keepalive_permit_without_calls": (True, "keepalive_permit_without_calls"),
    "grpc_http2_max_pings_without_data": (5, "http2_max_pings_without_data"),
    "grpc_http2_min_recv_ping_interval_without_data": (1500, "http2_min_recv_ping_interval_without_data_ms"),
    "grpc_http2_max_ping_strikes": (4, "http2_max_ping_strikes"),
}
ISO8601_ENTRY = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ ([IWEV]) \d+ ", re.M)
DEFAULT_ENTRY = re.compile(r"^([IWEV])\d{4} \d\d:\d\d:\d\d\.\d{6} \d+ ", re.M)
VERBOSE_MARKER = '"HTTP request: '  # logged at verbose level 1 for each HTTP call (the library's readiness polls)
SUCCESS_METRIC = re.compile(r'^nv_inference_request_success\{model="(?P<model>[^"]+)",version="1"\} (?P<count>\S+)$',
                            re.M)


class Identity:
    """Answers each request with its own input; counts its calls; sleeps `delay_s` per call."""

    def __init__(self, delay_s: float = 0.0) -> None:
        self.delay_s = delay_s
        self.calls = 0
        self.started = threading.Event()
        self._lock = threading.Lock()

    def __call__(self, requests):
        with self._lock:
            self.calls += 1
        self.started.set()
        time.sleep(self.delay_s)
        return [{"OUTPUT_1": request["INPUT_1"]} for request in requests]


@dataclasses.dataclass
class Server:
    """A running server, where it listens, its models and the files it writes."""

    triton: Triton
    http_port: int
    grpc_port: int
    metrics_port: int
    models: Dict[str, Identity]
    log_file: Optional[pathlib.Path] = None
    trace_file: Optional[pathlib.Path] = None

    def url(self, protocol: str = "http") -> str:
        return f"{protocol}://{LOCAL}:{self.http_port if protocol == 'http' else self.grpc_port}"


@contextlib.contextmanager
def _serving(
    triton: Triton,
    ports: Sequence[int],
    models: Mapping[str, Identity],
    cached: Sequence[str] = (),
    **files: Optional[pathlib.Path],
) -> Iterator[Server]:
    """Bind `models` (those in `cached` with the response cache on), run, and always stop."""
    try:
        for name, model in models.items():
            triton.bind(name, model, config=ModelConfig(response_cache=name in cached), **F32)
        triton.run()
        yield Server(triton, *ports, models=dict(models), **files)
    finally:
        triton.stop()


def _configured(config: TritonConfig, models: Mapping[str, Identity], cached: Sequence[str] = (),
                trace_file: Optional[pathlib.Path] = None):
    ports = (config.effective_http_port, config.effective_grpc_port, config.effective_metrics_port)
    return _serving(Triton(config=config), ports, models, cached, log_file=config.log_file, trace_file=trace_file)


def _infer(url: str, model: str, value: float) -> float:
    """One request of one sample ``[value, value]``; the identity's answer."""
    with ModelClient(url, model, init_timeout_s=10, inference_timeout_s=20) as client:
        result = client.infer_batch(np.full((1, 2), value, dtype=np.float32))["OUTPUT_1"]
    assert result.tolist() == [[value, value]]
    return float(result[0, 0])


def _refused(port: int, host: str = LOCAL) -> bool:
    with socket.socket() as probe:
        probe.settimeout(2)
        return probe.connect_ex((host, port)) != 0


def _wait(condition: Callable[[], object], timeout_s: float = 10.0, interval_s: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(interval_s)
    return bool(condition())


def _scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://{LOCAL}:{port}/metrics", timeout=5) as response:
        return response.read().decode()


def _successes(port: int, model: str) -> float:
    counts = {m["model"]: float(m["count"]) for m in SUCCESS_METRIC.finditer(_scrape(port))}
    return counts.get(model, 0.0)


def _admin(server: Server) -> httpclient.InferenceServerClient:
    return httpclient.InferenceServerClient(f"{LOCAL}:{server.http_port}")


def _token(server: Server) -> Dict[str, str]:
    return {ACCESS_TOKEN_HEADER: server.triton.get_access_token()}


def _fail_a_load(server: Server) -> None:
    """Ask Triton to load a model the repository lacks: an error Triton logs (before it answers)."""
    client = _admin(server)
    try:
        with pytest.raises(InferenceServerException, match="failed to load 'Missing'"):
            client.load_model("Missing", headers=_token(server))
    finally:
        client.close()  # Triton's HTTP endpoint waits for open connections when it stops


def _ready_after_unloading(server: Server, model: str) -> bool:
    client = _admin(server)
    try:
        assert client.is_server_ready()
        client.unload_model(model, headers=_token(server))
        assert _wait(lambda: not client.is_model_ready(model))
        return client.is_server_ready()
    finally:
        client.close()


def _log_text(path: pathlib.Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""


def _severities(text: str, entry: re.Pattern) -> collections.Counter:
    return collections.Counter(match.group(1) for match in entry.finditer(text))


def _keepalive_table(text: str) -> Dict[str, str]:
    return dict(re.findall(r"^\|\s*(\w+)\s*\|\s*(\S+)\s*\|$", text.partition("GRPC KeepAlive Option")[2], re.M))


def _traced_requests(trace_file: pathlib.Path, model: str) -> int:
    """Traces of `model` in the trace files that record both ends of the request."""
    names: Dict[int, str] = {}
    stamps: Dict[int, set] = collections.defaultdict(set)
    for path in trace_file.parent.glob(trace_file.name + "*"):
        try:
            entries = json.loads(path.read_text())
        except ValueError:  # still being written
            continue
        for entry in entries:
            if "model_name" in entry:
                names[entry["id"]] = entry["model_name"]
            stamps[entry["id"]].update(stamp["name"] for stamp in entry.get("timestamps", ()))
    return sum(1 for trace_id, name in names.items()
               if name == model and {"REQUEST_START", "COMPUTE_START", "REQUEST_END"} <= stamps[trace_id])


def _trace_config(trace_file: pathlib.Path) -> List[str]:
    # log-frequency=1: each trace goes to <file>.<n> as soon as it completes, not only at exit.
    return ["mode=triton", f"triton,file={trace_file}", "rate=1", "level=TIMESTAMPS", "triton,log-frequency=1"]


# --- shared servers ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def network():
    config = server_config(
        http_address=LOCAL,
        grpc_address=LOCAL,
        metrics_address=LOCAL,
        http_thread_count=1,
        model_load_thread_count=1,
        buffer_manager_thread_count=2,
        allow_metrics=True,
        allow_cpu_metrics=True,
        metrics_interval_ms=100,
        cache_config=[CACHE],
    )
    with _configured(config, {"Ident": Identity(), "Cached": Identity()}, cached=["Cached"]) as server:
        yield server


@pytest.fixture(scope="module")
def diagnostics(tmp_path_factory):
    folder = tmp_path_factory.mktemp("diagnostics")
    config = server_config(
        log_file=folder / "server.log",
        log_verbose=1,
        log_format="ISO8601",
        trace_config=_trace_config(folder / "trace.json"),
        **{field: value for field, (value, _) in KEEPALIVE.items()},
    )
    with _configured(config, {"Ident": Identity()}, trace_file=folder / "trace.json") as server:
        yield server


@pytest.fixture(scope="module")
def quiet(tmp_path_factory):
    config = server_config(log_file=tmp_path_factory.mktemp("quiet") / "server.log", log_error=False)
    with _configured(config, {"Ident": Identity()}) as server:
        yield server


@pytest.fixture(scope="module")
def env_server(tmp_path_factory):
    """Fields set only through PYTRITON_TRITON_CONFIG_*; the config names the HTTP and gRPC ports alone."""
    folder = tmp_path_factory.mktemp("from-env")
    http, grpc, metrics = free_ports(3)
    environment = {
        "LOG_FILE": str(folder / "server.log"),
        "LOG_VERBOSE": "1",
        "TRACE_CONFIG": ";".join(_trace_config(folder / "trace.json")),
        "CACHE_CONFIG": CACHE,
        "ALLOW_METRICS": "true",
        "METRICS_PORT": str(metrics),
        "GRPC_KEEPALIVE_TIME": str(KEEPALIVE["grpc_keepalive_time"][0]),
        "STRICT_READINESS": "false",
    }
    # Triton reads the environment when constructed; restoring it at once keeps the variables
    # away from the servers of the other tests in this module.
    with pytest.MonkeyPatch.context() as patch:
        for name, value in environment.items():
            patch.setenv(ENV_PREFIX + name, value)
        triton = Triton(config=TritonConfig(http_port=http, grpc_port=grpc))
    models = {"Ident": Identity(), "Cached": Identity(), "Spare": Identity()}
    with _serving(triton, (http, grpc, metrics), models, cached=["Cached"], log_file=folder / "server.log",
                  trace_file=folder / "trace.json") as server:
        yield server


# --- 1. addresses and ports --------------------------------------------------------------------


def test_addresses_and_ports_are_where_clients_reach_the_server_and_nowhere_else(network):
    for protocol in ("http", "grpc"):
        assert _infer(network.url(protocol), "Ident", 1.0) == 1.0
    assert "nv_inference_request_success" in _scrape(network.metrics_port)
    # Bound to 127.0.0.1, not 0.0.0.0: another loopback address of this host finds nothing.
    for port in (network.http_port, network.grpc_port, network.metrics_port):
        assert _refused(port, OTHER_LOOPBACK), port


def test_allow_http_false_closes_the_http_port_while_grpc_and_metrics_serve():
    config = server_config(allow_http=False, allow_cpu_metrics=False)
    with _configured(config, {"Ident": Identity()}) as server:
        assert _refused(server.http_port)
        assert _infer(server.url("grpc"), "Ident", 2.0) == 2.0
        assert _wait(lambda: _successes(server.metrics_port, "Ident") == 1)
        assert "nv_cpu_" not in _scrape(server.metrics_port)  # allow_cpu_metrics=False


def test_allow_grpc_false_and_allow_metrics_false_close_their_ports_while_http_serves():
    config = server_config(allow_grpc=False, allow_metrics=False)
    with _configured(config, {"Ident": Identity()}) as server:
        assert _refused(server.grpc_port)
        assert _refused(server.metrics_port)
        assert _infer(server.url("http"), "Ident", 3.0) == 3.0


# --- 2. threads ---------------------------------------------------------------------------------


def test_one_http_thread_and_set_loader_and_buffer_threads_serve_concurrent_requests_correctly(network):
    answers: Dict[float, float] = {}
    failures: List[BaseException] = []

    def client(index: int) -> None:
        protocol = "http" if index % 4 else "grpc"  # mostly HTTP: its single thread is the point
        try:
            with ModelClient(network.url(protocol), "Ident", init_timeout_s=10, inference_timeout_s=20) as model:
                for step in range(5):
                    value = index * 100.0 + step
                    answers[value] = float(model.infer_batch(np.full((1, 3), value, np.float32))["OUTPUT_1"][0, 0])
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            failures.append(exc)

    threads = [threading.Thread(target=client, args=(index,)) for index in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not failures
    assert len(answers) == 40
    assert all(answer == value for value, answer in answers.items())


# --- 3. gRPC keep-alive --------------------------------------------------------------------------


def test_grpc_keepalive_options_serve_grpc_and_show_in_the_verbose_log(diagnostics, quiet):
    assert _infer(diagnostics.url("grpc"), "Ident", 4.0) == 4.0
    table = _keepalive_table(_log_text(diagnostics.log_file))
    expected = {row: str(int(value)) for value, row in KEEPALIVE.values()}  # True is printed as 1
    assert {row: table.get(row) for row in expected} == expected
    # Triton prints the table at verbose level only: the default-level log has none.
    assert "GRPC KeepAlive Option" not in _log_text(quiet.log_file)


# --- 4. gRPC TLS ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def certificates(tmp_path_factory) -> Dict[str, pathlib.Path]:
    """A CA, a server certificate for localhost/127.0.0.1 and a client certificate, signed by it."""
    folder = tmp_path_factory.mktemp("tls")
    (folder / "san.cnf").write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    new_key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=folder, check=True, capture_output=True, timeout=30)

    openssl("req", "-x509", *new_key, "-keyout", "ca.key", "-out", "ca.crt", "-days", "1", "-subj", "/CN=test CA")
    for name, extra in (("server", ["-extfile", "san.cnf"]), ("client", [])):
        openssl("req", *new_key, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}")
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
                "-out", f"{name}.crt", "-days", "1", *extra)
    return {name: folder / name for name in ("ca.crt", "server.crt", "server.key", "client.crt", "client.key")}


def _grpc_infer(server: Server, **credentials) -> List[List[float]]:
    """One gRPC inference on ``localhost`` (the name in the server certificate)."""
    client = grpcclient.InferenceServerClient(f"localhost:{server.grpc_port}", **credentials)
    try:
        tensor = grpcclient.InferInput("INPUT_1", [1, 2], "FP32")
        tensor.set_data_from_numpy(np.full((1, 2), 5.0, np.float32))
        return client.infer("Ident", [tensor], client_timeout=5).as_numpy("OUTPUT_1").tolist()
    finally:
        client.close()


def _tls_config(certificates: Mapping[str, pathlib.Path], **fields) -> TritonConfig:
    return server_config(grpc_use_ssl=True, grpc_server_cert=certificates["server.crt"],
                         grpc_server_key=certificates["server.key"], grpc_root_cert=certificates["ca.crt"], **fields)


def test_grpc_use_ssl_serves_clients_that_trust_the_ca_and_refuses_plain_ones(certificates):
    with _configured(_tls_config(certificates), {"Ident": Identity()}) as server:
        assert _grpc_infer(server, ssl=True, root_certificates=str(certificates["ca.crt"])) == [[5.0, 5.0]]
        with pytest.raises(InferenceServerException):
            _grpc_infer(server)


def test_grpc_use_ssl_mutual_requires_a_client_certificate(certificates):
    with _configured(_tls_config(certificates, grpc_use_ssl_mutual=True), {"Ident": Identity()}) as server:
        trusted = {"ssl": True, "root_certificates": str(certificates["ca.crt"])}
        identified = {"private_key": str(certificates["client.key"]),
                      "certificate_chain": str(certificates["client.crt"])}
        assert _grpc_infer(server, **trusted, **identified) == [[5.0, 5.0]]
        with pytest.raises(InferenceServerException):
            _grpc_infer(server, **trusted)  # TLS, but no certificate to show
        with pytest.raises(InferenceServerException):
            _grpc_infer(server)


@pytest.mark.parametrize("mutual", [False, True])
def test_a_tls_only_grpc_server_with_http_off_starts_and_serves(certificates, mutual):
    """With HTTP off the library's own readiness and load calls go over gRPC, with TLS too."""
    config = _tls_config(certificates, allow_http=False, grpc_use_ssl_mutual=mutual or None)
    with _configured(config, {"Ident": Identity()}) as server:
        credentials = {"ssl": True, "root_certificates": str(certificates["ca.crt"])}
        if mutual:
            credentials.update(private_key=str(certificates["client.key"]),
                               certificate_chain=str(certificates["client.crt"]))
        assert _grpc_infer(server, **credentials) == [[5.0, 5.0]]


# --- 5. metrics ------------------------------------------------------------------------------------


@pytest.mark.parametrize("source", ["config", "env"])
def test_metrics_port_serves_the_success_count_of_the_model(source, request):
    server = request.getfixturevalue({"config": "network", "env": "env_server"}[source])
    before = _successes(server.metrics_port, "Ident")
    for value in (6.0, 7.0, 8.0):
        _infer(server.url("http"), "Ident", value)
    assert _wait(lambda: _successes(server.metrics_port, "Ident") == before + 3)


def test_cpu_metrics_are_served_and_refreshed_every_metrics_interval_ms(network):
    # Triton refreshes the CPU gauges once per interval: at its default, scrapes 30 ms apart see
    # about one new utilisation value a second (4 values in 3 s); at 100 ms, 7 come well within 3 s.
    values: List[str] = []

    def changed_often() -> bool:
        found = re.search(r"^nv_cpu_utilization (\S+)$", _scrape(network.metrics_port), re.M)
        assert found, "no nv_cpu_utilization gauge"
        if not values or values[-1] != found.group(1):
            values.append(found.group(1))
        return len(values) >= 7

    assert _wait(changed_often, timeout_s=3, interval_s=0.03), values
    assert "nv_cpu_memory_used_bytes" in _scrape(network.metrics_port)


# --- 6. logging -------------------------------------------------------------------------------------


def test_log_verbose_adds_verbose_lines_and_iso8601_changes_the_timestamps(diagnostics, quiet):
    verbose, default = _log_text(diagnostics.log_file), _log_text(quiet.log_file)
    assert VERBOSE_MARKER in verbose
    assert VERBOSE_MARKER not in default
    assert _severities(verbose, ISO8601_ENTRY)["I"] > 10
    assert not DEFAULT_ENTRY.search(verbose)
    assert _severities(default, DEFAULT_ENTRY)["I"] > 10
    assert not ISO8601_ENTRY.search(default)


def test_log_info_and_log_warning_false_keep_only_errors_and_log_error_false_drops_them(quiet):
    error = "failed to poll model 'Missing'"
    config = server_config(log_file=quiet.log_file.parent / "errors-only.log", log_info=False, log_warning=False)
    with _configured(config, {"Ident": Identity()}) as errors_only:
        _fail_a_load(errors_only)
        # Written before Triton answered the load: no wait needed, here or on `quiet` below.
        assert error in _log_text(errors_only.log_file)
        assert set(_severities(_log_text(errors_only.log_file), DEFAULT_ENTRY)) == {"E"}
    _fail_a_load(quiet)  # the same error, on the server with log_error=False
    assert error not in _log_text(quiet.log_file)
    severities = _severities(_log_text(quiet.log_file), DEFAULT_ENTRY)
    assert "E" not in severities
    assert severities["I"] > 10


@pytest.mark.parametrize("source", ["config", "env"])
def test_log_file_and_log_verbose_from_config_or_env_write_the_verbose_log(source, request):
    server = request.getfixturevalue({"config": "diagnostics", "env": "env_server"}[source])
    assert _wait(lambda: VERBOSE_MARKER in _log_text(server.log_file))
    table = _keepalive_table(_log_text(server.log_file))
    assert table.get("keepalive_time_ms") == str(KEEPALIVE["grpc_keepalive_time"][0])  # from the env, too


# --- 7. exit timeout ---------------------------------------------------------------------------------


def _stop_during_a_request(server: Server, slow: Identity) -> dict:
    """Stop the server while `slow` answers a request; what the client got."""
    outcome: dict = {}

    def request() -> None:
        try:
            outcome["answer"] = _infer(server.url("http"), "Slow", 9.0)
        except PyTritonClientError as exc:
            outcome["error"] = exc

    client = threading.Thread(target=request)
    client.start()
    assert slow.started.wait(10)
    server.triton.stop()
    client.join(30)
    return outcome


def test_exit_timeout_secs_lets_an_in_flight_request_finish_before_the_server_exits():
    slow = Identity(delay_s=2.0)
    with _configured(server_config(exit_timeout_secs=20), {"Slow": slow}) as server:
        outcome = _stop_during_a_request(server, slow)
    assert outcome.get("answer") == 9.0, outcome


@pytest.mark.parametrize("source", ["config", "env"])
def test_a_short_exit_timeout_cuts_an_in_flight_request(source, tmp_path, monkeypatch):
    slow = Identity(delay_s=4.0)
    http, grpc, metrics = free_ports(3)
    chosen = {"exit_timeout_secs": 1} if source == "config" else {}
    if source == "env":
        monkeypatch.setenv(ENV_PREFIX + "EXIT_TIMEOUT_SECS", "1")
    config = TritonConfig(http_port=http, grpc_port=grpc, metrics_port=metrics, log_file=tmp_path / "server.log",
                          **chosen)
    with _configured(config, {"Slow": slow}) as server:
        outcome = _stop_during_a_request(server, slow)
    assert "error" in outcome, outcome  # with Triton's default (30 s) the answer would have come
    assert "Exit timeout expired. Exiting immediately." in _log_text(tmp_path / "server.log")


# --- 8. strict readiness -------------------------------------------------------------------------------


@pytest.mark.parametrize("strict", [True, False])
def test_strict_readiness_decides_whether_an_unloaded_model_makes_the_server_unready(strict):
    with _configured(server_config(strict_readiness=strict), {"Ident": Identity(), "Spare": Identity()}) as server:
        assert _ready_after_unloading(server, "Spare") is not strict


def test_strict_readiness_false_from_the_environment(env_server):
    # Triton's own default is strict: ready would turn false here without the variable.
    assert _ready_after_unloading(env_server, "Spare") is True


# --- 9. response cache ---------------------------------------------------------------------------------


@pytest.mark.parametrize("source", ["config", "env"])
def test_cache_config_answers_an_identical_request_without_calling_the_model(source, request):
    server = request.getfixturevalue({"config": "network", "env": "env_server"}[source])
    cached = server.models["Cached"]
    start = cached.calls
    calls = []
    for value in (10.0, 10.0, 10.5):
        assert _infer(server.url("http"), "Cached", value) == value
        calls.append(cached.calls - start)
    assert calls == [1, 1, 2]


# --- 10. trace -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("source", ["config", "env"])
def test_trace_config_writes_a_trace_of_each_request_to_the_trace_file(source, request):
    server = request.getfixturevalue({"config": "diagnostics", "env": "env_server"}[source])
    assert server.trace_file is not None
    before = _traced_requests(server.trace_file, "Ident")
    _infer(server.url("grpc"), "Ident", 11.0)
    _infer(server.url("http"), "Ident", 12.0)
    # >=: a trace of an earlier test's request may still have been on its way to the file.
    assert _wait(lambda: _traced_requests(server.trace_file, "Ident") >= before + 2)


def test_bind_trace_config_traces_that_model_alone(tmp_path):
    # The server writes traces to a file but traces nothing by itself (level OFF); one model
    # asks for its own traces through bind(..., trace_config=...), as published code does.
    trace_file = tmp_path / "trace.json"
    config = server_config(trace_config=[f"triton,file={trace_file}", "triton,log-frequency=1"])
    triton = Triton(config=config)
    try:
        triton.bind("Traced", Identity(), trace_config=["level=TIMESTAMPS", "rate=1"], **F32)
        triton.bind("Quiet", Identity(), **F32)
        triton.run()
        url = f"http://{LOCAL}:{config.effective_http_port}"
        triton.bind("Late", Identity(), trace_config=["level=TIMESTAMPS", "rate=1", "log-frequency=1"], **F32)
        for model in ("Traced", "Quiet", "Late"):
            _infer(url, model, 3.0)
        assert _wait(lambda: _traced_requests(trace_file, "Traced") >= 1 and _traced_requests(trace_file, "Late") >= 1)
        assert _traced_requests(trace_file, "Quiet") == 0
    finally:
        triton.stop()


def test_bind_trace_config_is_checked_at_bind():
    with Triton(config=server_config()) as triton:
        with pytest.raises(PyTritonBadParameterError, match=r"needs the server to write traces to a file"):
            triton.bind("NoFile", Identity(), trace_config=["level=TIMESTAMPS"], **F32)
        for items, message in ((["level=LOUD"], r"'level=LOUD' has a bad value; level must be one of OFF"),
                               (["rate=0"], r"rate must be an integer >= 1"),
                               (["triton,file=/tmp/x"], r"the trace file and mode are the server's"),
                               ("level=TIMESTAMPS", r"must be a list of")):
            with pytest.raises(PyTritonBadParameterError, match=message) as info:
                triton.bind("Bad", Identity(), trace_config=items, **F32)
            assert "model 'Bad'" in str(info.value)


def test_run_returns_only_once_the_metrics_endpoint_accepts_scrapes():
    """Models load before the endpoints open, and the metrics endpoint opens about 40 ms after HTTP
    answers ready: a start that waited for readiness alone let this first scrape be refused (once in CI)."""
    with _configured(server_config(), {"Ident": Identity()}) as server:
        assert "nv_inference_request_success" in _scrape(server.metrics_port)
