"""Launching tritonserver for a `Triton` and waiting until what it serves answers.

`Triton._start` decides *when* (locks, the readiness gate); this module says *how*: what the
proxies are told of the server (`configure_proxies`), the ports checked before the process
starts, the process and the client that watches it (`launch`), the supervisor that heals it
(`start_supervisor`), the load of a model bound while it runs (`load_watching_signals`), and
the waits a start or a bind runs afterwards (`wait_models_ready`, `wait_endpoints_listening`).
A wait stops once the server dies or a signal asks the start to stop (`interrupted`): a death
raises, an interruption returns False.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import pathlib
import threading
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from pytriton.binding import ModelBindings, SignalWatch
from pytriton.constants import DEFAULT_TRITON_STARTUP_TIMEOUT_S as STARTUP_TIMEOUT_S
from pytriton.environment import METRICS_PERIOD_S
from pytriton.exceptions import (
    PyTritonBadParameterError,
    PyTritonInvalidOperationError,
    PyTritonServerError,
    PyTritonServerStartupError,
)
from pytriton.ipc import protocol
from pytriton.model_config import ModelConfig
from pytriton.server.argv import build_argv
from pytriton.server.client_sweep import ClientRegionSweep
from pytriton.server.config import TritonConfig
from pytriton.server.control import GrpcTls, ServerControl, accepts_connections, wait_for
from pytriton.server.distribution import ServerDistribution, assemble_backends, server_environment
from pytriton.server.hangs import HangWatch
from pytriton.server.ports import enabled_endpoints, listening_ports, probe_port
from pytriton.server.process import ServerProcess
from pytriton.server.security import TritonSecurityConfig, restricted_config
from pytriton.server.supervisor import InstanceView, RestartBudget, Supervisor
from pytriton.server.workspace import Workspace
from pytriton.worker.tracing import TraceExport, export_settings

MODEL_LOAD_TIMEOUT_S = 120.0
"""How long loading one model (warm-up included) may take, in a start and in a later bind."""


def configure_proxies(bindings: ModelBindings, config: TritonConfig,
                      environ: Mapping[str, str]) -> Optional[TraceExport]:
    """Tell the proxies of `bindings`' models what this server offers (through their model
    parameters): no metrics without a metrics port, the metrics period from the environment,
    and OpenTelemetry tracing, which pytriton continues when Triton traces with it.

    Returns:
        Where the workers' spans go (None: Triton does not trace with OpenTelemetry).
    """
    if config.allow_metrics is False:
        bindings.model_parameters[protocol.PARAM_METRICS] = "0"
    if period := environ.get(METRICS_PERIOD_S):
        bindings.model_parameters[protocol.PARAM_METRICS_PERIOD_S] = period
    tracing = export_settings(config.trace_config)
    if tracing is not None:
        bindings.tracing = tracing
        bindings.model_parameters[protocol.PARAM_TRACING] = "1"
    return tracing


def open_workspace(path: Optional[pathlib.Path], bindings: ModelBindings) -> Workspace:
    """The server's workspace (`path`, or a private folder), its stopping flag named to the models
    bound from here on (`pytriton.ipc.stopping`: a stop refuses their new requests)."""
    workspace = Workspace(path)
    bindings.model_parameters[protocol.PARAM_STOPPING] = str(workspace.stopping_flag)
    return workspace


def check_ports_free(config: TritonConfig) -> None:
    """Refuse a start whose ports something else holds, before tritonserver says it less clearly.

    Raises:
        PyTritonServerStartupError: a port is in use; names it, its field and the fix.
        OSError: the port cannot be probed for another reason (a bad address).
    """
    for field, address, port in listening_ports(config):
        error = probe_port(address, port)
        if error == errno.EADDRINUSE:
            raise PyTritonServerStartupError(
                f"port {port} ({field}) is already in use on {address or 'this host'}; stop what uses it "
                f"or choose another port with TritonConfig({field}=...)"
            )
        if error is not None:
            raise OSError(error, os.strerror(error), f"{address or '0.0.0.0'}:{port}")


def launch(
    config: TritonConfig,
    security: TritonSecurityConfig,
    access_token: Optional[str],
    workspace: Workspace,
    distribution: ServerDistribution,
) -> Tuple[ServerProcess, ServerControl]:
    """Start tritonserver on `workspace`'s repository; return it and the client that watches it.

    The process runs once this returns; nothing is ready yet.
    """
    argv = build_argv(
        restricted_config(config, security, access_token),
        binary=distribution.binary,
        model_repository=workspace.model_repository,
        backend_directory=assemble_backends(distribution, workspace.backends),
        cache_directory=distribution.caches,
        shm_region_prefix=f"{workspace.shm_prefix}-tpb",
    )
    workspace.hold_lease()  # before the server and its stubs create any segment
    secrets = [access_token] if access_token else []
    process = ServerProcess(argv, server_environment(distribution), secrets=secrets)
    control = ServerControl(
        http_address=config.http_address,
        http_port=config.effective_http_port if config.allow_http is not False else None,
        grpc_address=config.grpc_address,
        grpc_port=config.effective_grpc_port,
        access_token=access_token,
        grpc_tls=grpc_tls(config),
    )
    process.start()
    return process, control


def grpc_tls(config: TritonConfig) -> Optional[GrpcTls]:
    """How the library's own calls reach the gRPC endpoint when it uses TLS (None: plain)."""
    if not (config.grpc_use_ssl or config.grpc_use_ssl_mutual):  # --grpc-use-ssl-mutual implies TLS
        return None
    paths = {name: None if value is None else str(value) for name, value in (
        ("server_cert", config.grpc_server_cert), ("server_key", config.grpc_server_key),
        ("root_cert", config.grpc_root_cert))}
    return GrpcTls.for_server(mutual=bool(config.grpc_use_ssl_mutual), **paths)


def start_supervisor(process: ServerProcess, control: ServerControl, workspace: Workspace, bindings: ModelBindings,
                     *, on_fatal: Callable[[PyTritonServerError], None], hurry: threading.Event) -> Supervisor:
    """Watch a started server and heal its bound models (see `Supervisor`); returns it running."""
    supervisor = Supervisor(
        process=process,
        control=control,
        instances=lambda: [InstanceView(*entry) for entry in bindings.instances()],
        budget_for=lambda name: _restart_budget(bindings.config(name)),
        forget_instance=bindings.forget_stub,
        after_reload=lambda _model: workspace.restrict_segments(),
        on_fatal=on_fatal,
        server_id=workspace.server_id,
        tidy=_tidy(workspace, ClientRegionSweep(control)),
        fault_traces=lambda pid: protocol.fault_trace_path(str(workspace.sockets), pid),
        inflight_ledgers=lambda pid: protocol.inflight_ledger_path(str(workspace.sockets), pid),
        hang_check=HangWatch(bindings.hung, hurry.set, on_fatal).check,
    )
    supervisor.start()
    return supervisor


def _tidy(workspace: Workspace, sweep: ClientRegionSweep) -> Callable[[], object]:
    """The supervisor's housekeeping: the server's own regions made private, dead clients' regions cleared."""
    return lambda: (workspace.restrict_segments(), sweep())


def _restart_budget(config: ModelConfig) -> RestartBudget:
    return RestartBudget(config.max_restarts, config.restart_window_s)


def writes_trace_file(config: TritonConfig) -> bool:
    """Whether tritonserver writes traces to a file (a ``file=`` trace setting)."""
    return any("file=" in item for item in (config.trace_config or ()))


def check_traces_go_somewhere(model_name: str, config: TritonConfig, tracing: Optional[TraceExport]) -> None:
    """Refuse a model's own trace settings when the server would trace to nowhere.

    Args:
        model_name: the model, for the message.
        config: the server's options.
        tracing: where the server's OpenTelemetry spans go (`configure_proxies`), None for nowhere.

    Raises:
        PyTritonBadParameterError: `config` neither writes a trace file nor traces with OpenTelemetry.
    """
    if writes_trace_file(config) or tracing is not None:
        return
    raise PyTritonBadParameterError(
        f"trace_config of model '{model_name}' needs the server to write traces to a file, "
        "Triton(config=TritonConfig(trace_config=['triton,file=/path/trace.json'])), or to trace with "
        "OpenTelemetry, TritonConfig(trace_config=['mode=opentelemetry', "
        "'opentelemetry,url=http://collector:4318/v1/traces'])"
    )


def writes_files_at_exit(config: TritonConfig, tracing: Optional[TraceExport]) -> bool:
    """Whether Triton writes a trace file, flushes a log file or exports the OpenTelemetry spans
    it still holds (`tracing`, see `configure_proxies`) at the end of its own shutdown, which a
    drain must then let it reach."""
    return bool(config.log_file) or writes_trace_file(config) or tracing is not None


def startup_failure(process: ServerProcess) -> str:
    """Why a start that did not become ready failed, with the server's last lines."""
    if process.is_running():
        reason = f"it did not become ready within {STARTUP_TIMEOUT_S:.0f} s"
    else:
        reason = f"it exited with code {process.returncode}"
    return f"tritonserver failed to start: {reason}.\n{process.report()}"


def wait_models_ready(
    control: ServerControl,
    process: ServerProcess,
    models: Sequence[Tuple[str, int, Optional[Dict[str, Any]]]],
    deadline: float,
    interrupted: Callable[[], bool],
) -> bool:
    """Wait until each of `models` (name, version, trace settings) serves, then send its trace settings.

    Returns:
        True once all serve; False when `interrupted` turned true first.

    Raises:
        PyTritonServerError: a model did not become ready by `deadline`, or the server died.
    """
    for name, version, trace_settings in models:
        ready = wait_for(functools.partial(control.is_model_ready, name, version), deadline,
                         still_starting(process, interrupted))
        if not ready and interrupted():
            return False
        if not ready:
            raise PyTritonServerError(f"model '{name}' version {version} did not become ready.\n{process.report()}")
        if trace_settings is not None:
            control.set_model_trace(name, trace_settings, MODEL_LOAD_TIMEOUT_S)
    return True


def wait_endpoints_listening(
    config: TritonConfig, process: ServerProcess, deadline: float, interrupted: Callable[[], bool]
) -> bool:
    """Wait until every enabled endpoint accepts connections (Triton opens metrics last).

    Returns:
        True once all listen; False when `interrupted` turned true first.

    Raises:
        PyTritonServerStartupError: an endpoint did not listen by `deadline`, or the server died.
    """
    for field, address, port in enabled_endpoints(config):
        listening = wait_for(functools.partial(accepts_connections, address, port), deadline,
                             still_starting(process, interrupted))
        if not listening and interrupted():
            return False
        if not listening:
            raise PyTritonServerStartupError(
                f"tritonserver is ready but its {field} {port} does not accept connections.\n{process.report()}"
            )
    return True


def still_starting(process: ServerProcess, interrupted: Callable[[], bool]) -> Callable[[], bool]:
    """Whether a start may go on waiting: the server runs and no signal asked to stop."""
    return lambda: process.is_running() and not interrupted()


def refuse_foreign_model(control: ServerControl, model_name: str) -> None:
    """Refuse to bind a name the running server already serves for another process (`RemoteTriton`).

    Raises:
        PyTritonInvalidOperationError: the server serves `model_name`, sent by another process.
    """
    if control.is_model_ready(model_name, None):
        raise PyTritonInvalidOperationError(
            f"model '{model_name}' is already served by this Triton's server, sent by another process "
            "(RemoteTriton); a model name is served by one process at a time: choose another model name"
        )


def load_watching_signals(
    control: ServerControl, model_name: str, watch_signals: bool
) -> Tuple[Optional[int], Optional[BaseException]]:
    """Load `model_name`; with `watch_signals` (on the main thread), a SIGINT or SIGTERM ends the wait.

    Triton's load call blocks until the model is loaded (warm-up included), so it runs on a
    thread of its own while this one watches for signals.

    Returns:
        The signal that came during the load (the caller stops the server) or None, and the
        load's error (the server failed to load the model, its reason) or None.
    """
    done = threading.Event()
    with SignalWatch(done) if watch_signals else contextlib.nullcontext() as signals:
        failure = _load_in_thread(control, model_name, done)
        done.wait()
    signum = signals.first if signals is not None else None
    return signum, (failure[0] if failure else None)


def _load_in_thread(control: ServerControl, model_name: str, done: threading.Event) -> List[BaseException]:
    failure: List[BaseException] = []

    def load() -> None:
        try:
            control.load_model(model_name, MODEL_LOAD_TIMEOUT_S)
        except BaseException as exc:  # noqa: BLE001 (handed to the binding thread)
            failure.append(exc)
        finally:
            done.set()

    threading.Thread(target=load, name=f"pytriton-load-{model_name}", daemon=True).start()
    return failure

