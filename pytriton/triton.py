"""The `Triton` facade: bind callables, run or serve the real tritonserver, stop cleanly.

Setup flow: `bind` turns the declaration into a model folder (``repository``) and starts one
worker handler per callable (``worker``); `run` sweeps leftovers of dead servers, starts the
tritonserver process (``server``) and returns once every bound model answers ready; `serve`
blocks until SIGINT/SIGTERM or an unrecoverable model error; `stop` undoes everything.

`RemoteTriton` (from ``pytriton.remote``, exported here too) binds callables the same way to a
tritonserver that something else started.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import functools
import logging
import os
import pathlib
import signal
import threading
import time
from typing import Any, Callable, List, NoReturn, Optional, Sequence, Union

from pytriton.binding import (
    InferFunc,
    ModelBindings,
    ModelDeclaration,
    SignalWatch,
    TerminationScope,
    block_until_signal,
)
from pytriton.constants import DEFAULT_TRITON_STARTUP_TIMEOUT_S as STARTUP_TIMEOUT_S
from pytriton.constants import METRICS_PERIOD_ENV
from pytriton.exceptions import (
    PyTritonBadParameterError,
    PyTritonInvalidOperationError,
    PyTritonModelHangError,
    PyTritonModelRestartLimitError,
    PyTritonServerError,
    PyTritonServerStartupError,
)
from pytriton.ipc import protocol
from pytriton.model_config import EnsembleStep, ModelConfig, Tensor
from pytriton.remote import RemoteTriton
from pytriton.server.argv import build_argv
from pytriton.server.checks import enabled_endpoints, probe_port
from pytriton.server.config import TritonConfig
from pytriton.server.config_merge import merge
from pytriton.server.control import GrpcTls, ServerControl, accepts_connections, wait_for
from pytriton.server.distribution import (
    ServerDistribution,
    assemble_backends,
    find_distribution,
    proxy_import_paths,
    server_environment,
)
from pytriton.server.drain import drain_poll
from pytriton.server.hangs import HangWatch
from pytriton.server.lifecycle import (
    DefaultTritonLifecyclePolicy,
    TritonLifecyclePolicy,
    VertextAILifecyclePolicy,
    choose_policy,
)
from pytriton.server.preflight import warn_if_shm_small
from pytriton.server.process import ServerProcess
from pytriton.server.readiness import GATE_MODEL, ReadinessGate
from pytriton.server.security import (
    DEFAULT_PROTECTED_ENDPOINTS,
    TRITON_ACCESS_HEADER,
    VALID_TRITON_ENDPOINTS,
    TritonSecurityConfig,
    check_unguarded_endpoints,
    resolve_access_token,
    restricted_config,
)
from pytriton.server.supervisor import InstanceView, RestartBudget, Supervisor, reap_adopted
from pytriton.server.vertex_ai import check_vertex_ai_models
from pytriton.server.workspace import Workspace, kill_server_processes, sweep_stale
from pytriton.worker.tracing import export_settings
from pytriton.worker.tracing import shutdown as shutdown_tracing

__all__ = [
    "DEFAULT_PROTECTED_ENDPOINTS",
    "TRITON_ACCESS_HEADER",
    "VALID_TRITON_ENDPOINTS",
    "DefaultTritonLifecyclePolicy",
    "RemoteTriton",
    "Triton",
    "TritonConfig",
    "TritonLifecyclePolicy",
    "TritonSecurityConfig",
    "VertextAILifecyclePolicy",
]

logger = logging.getLogger("pytriton.triton")

MODEL_LOAD_TIMEOUT_S = 120.0
_TRITON_DEFAULT_EXIT_TIMEOUT_S = 30


class Triton:
    """A Triton Inference Server serving the Python callables bound to it.

    Args:
        config: server options; fields left unset are read from ``PYTRITON_TRITON_CONFIG_*``
            environment variables, then take their defaults.
        workspace: folder for the model repository, sockets and backends of this server; a
            private temporary folder (removed on stop) when None.
        security_config: which APIs require an access token, and which token; by default the
            administrative APIs (model repository, shared memory, statistics, trace, logging)
            require a token generated for this server (see `get_access_token`).
        triton_lifecycle_policy: when the server starts (see `TritonLifecyclePolicy`); by
            default on entering ``with Triton() as triton:``, so that each `bind` in the block
            loads its model at once.

    Use it as a context manager (``with Triton() as triton: ...``) or call `stop()`.
    """

    def __init__(
        self,
        config: Optional[TritonConfig] = None,
        workspace: Union[str, pathlib.Path, None] = None,
        security_config: Optional[TritonSecurityConfig] = None,
        triton_lifecycle_policy: Optional[TritonLifecyclePolicy] = None,
    ) -> None:
        self._config = merge(config, os.environ)
        self._policy = choose_policy(triton_lifecycle_policy, self._config.allow_vertex_ai)
        security = security_config if security_config is not None else TritonSecurityConfig()
        if not isinstance(security, TritonSecurityConfig):
            raise PyTritonBadParameterError(
                f"security_config={security_config!r} is invalid: expected a TritonSecurityConfig or None"
            )
        self._security = security
        check_unguarded_endpoints(self._config, security)
        self._access_token = resolve_access_token(security)
        self._workspace_path = pathlib.Path(workspace) if workspace is not None else None
        self._workspace: Optional[Workspace] = None
        self._bindings = ModelBindings("Triton", self._on_unrecoverable)
        if self._config.allow_metrics is False:  # no /metrics port: the proxies export nothing
            self._bindings.model_parameters[protocol.PARAM_METRICS] = "0"
        if period := os.environ.get(METRICS_PERIOD_ENV):
            self._bindings.model_parameters[protocol.PARAM_METRICS_PERIOD_S] = period
        self._tracing = export_settings(self._config.trace_config)
        if self._tracing is not None:  # Triton traces with OpenTelemetry: pytriton continues the traces
            self._bindings.tracing = self._tracing
            self._bindings.model_parameters[protocol.PARAM_TRACING] = "1"
        self._process: Optional[ServerProcess] = None
        self._control: Optional[ServerControl] = None
        self._lock = threading.RLock()
        self._wake = threading.Event()
        self._unrecoverable: Optional[str] = None
        self._fatal: Optional[PyTritonServerError] = None
        self._supervisor: Optional[Supervisor] = None
        self._gate: Optional[ReadinessGate] = None  # holds a server started without models not ready
        self._termination = TerminationScope()
        self._hurry = threading.Event()  # a second signal during the drain: stop at once
        self._start_interrupted: Callable[[], bool] = lambda: False  # a signal came while starting
        self._in_serve = False
        self._stopped = False
        self._server_distribution: Optional[ServerDistribution] = None

    # -- context manager -------------------------------------------------------------------
    def __enter__(self) -> Triton:
        """Start the server, unless the lifecycle policy waits for `run()` or `serve()`.

        Inside the block, SIGTERM stops the server and ends the script cleanly wherever it is
        (`TerminationScope`); SIGINT raises ``KeyboardInterrupt`` as usual, which does the same.
        """
        self._termination.enter()
        try:
            if self._policy.launch_triton_on_startup:
                self.run()
        except BaseException:
            self._termination.exit()
            raise
        return self

    def __exit__(self, *exc_info: Any) -> None:
        try:
            self.stop()
        finally:
            self._termination.exit()

    def get_access_token(self) -> Optional[str]:
        """The token that opens this server's restricted APIs (header ``triton-access-token``).

        The `TritonSecurityConfig.access_token` (chosen, or generated when the config was built);
        None when nothing is restricted. Pass it to clients as ``ModelClient(..., access_token=...)``.
        """
        return self._access_token

    # -- binding ---------------------------------------------------------------------------
    def bind(
        self,
        model_name: str,
        infer_func: Union[InferFunc, Sequence[InferFunc]],
        inputs: Sequence[Tensor],
        outputs: Sequence[Tensor],
        model_version: int = 1,
        config: Optional[ModelConfig] = None,
        strict: bool = False,
        trace_config: Optional[List[str]] = None,
    ) -> None:
        """Serve `infer_func` as model `model_name`.

        Args:
            model_name: the name clients use.
            infer_func: a callable taking a list of requests and returning one mapping of output
                name to array per request; or a list of such callables, one model instance each.
            inputs: the input tensors; unnamed ones become ``INPUT_1``, ``INPUT_2``, ...
            outputs: the output tensors; unnamed ones become ``OUTPUT_1``, ...
            model_version: the version served.
            config: batching and batcher options (`ModelConfig()` when None).
            strict: refuse outputs whose dtype or shape differ from the declared ones.
            trace_config: this model's own trace settings, as ``--trace-config`` items:
                ``"level=TIMESTAMPS"`` (or ``TENSORS``, ``OFF``; may repeat), ``"rate=N"`` (one
                request in N), ``"count=N"``, ``"log_frequency=N"``. Traces go to the server's
                trace file, which ``TritonConfig(trace_config=["triton,file=..."])`` names; sent
                to the server once the model is ready.

        Once the server runs (after `run()`, or inside ``with Triton()``), the model is loaded
        at once and this returns when it is ready; a model that fails to load is unbound again
        and the server goes on serving the others.

        Raises:
            PyTritonInvalidOperationError: the name is bound here already, or the running server
                serves a model of that name that another process sent (`RemoteTriton`).
            PyTritonServerError: the running server failed to load the model (its reason).
        """
        with self._lock:
            self._check_can_bind()
            declaration = self._bindings.declare(
                model_name, infer_func, inputs, outputs, model_version, config, strict, trace_config
            )
            if declaration.trace_settings is not None and not self._has_trace_file() and self._tracing is None:
                raise PyTritonBadParameterError(
                    f"trace_config of model '{model_name}' needs the server to write traces to a file, "
                    "Triton(config=TritonConfig(trace_config=['triton,file=/path/trace.json'])), or to trace with "
                    "OpenTelemetry, TritonConfig(trace_config=['mode=opentelemetry', "
                    "'opentelemetry,url=http://collector:4318/v1/traces'])"
                )
            self._add(declaration)

    def bind_ensemble(
        self,
        model_name: str,
        steps: Sequence[EnsembleStep],
        inputs: Optional[Sequence[str]] = None,
        outputs: Optional[Sequence[str]] = None,
        model_version: int = 1,
    ) -> None:
        """Serve a pipeline of models bound here as one model, run step by step inside the server.

        Each `EnsembleStep` names a bound model and maps its tensors to the ensemble's tensors;
        Triton passes each tensor from the step that writes it to the steps that read it, and
        the client makes one call. Bind the step models first.

        Args:
            model_name: the name clients use.
            steps: the steps, in any order (they run as their tensors allow).
            inputs: the ensemble's input tensors; None: those a step reads and no step writes.
            outputs: the tensors it returns; None: those a step writes and no step reads.
            model_version: the version served.

        Raises:
            PyTritonBadParameterError: a step names an unknown model or tensor, a tensor's dtype
                or shape differs between its writer and a reader, the steps form a cycle, or they
                disagree on batching (see `pytriton.repository.ensemble.plan_ensemble`).
            PyTritonInvalidOperationError, PyTritonServerError: as for `bind`.
        """
        with self._lock:
            self._check_can_bind()
            self._add(self._bindings.declare_ensemble(model_name, steps, inputs, outputs, model_version))

    def _check_can_bind(self) -> None:
        self._raise_if_failed()
        if self._stopped:
            raise PyTritonInvalidOperationError("this Triton was stopped; create a new Triton to bind models")

    def _add(self, declaration: ModelDeclaration) -> None:
        """Start a checked model (its handlers, its folder in the repository) and, when the
        server runs, load it at once."""
        model_name = declaration.context.model_name
        if model_name == GATE_MODEL:
            raise PyTritonBadParameterError(f"model name '{model_name}' is pytriton's own (its readiness gate); "
                                            "choose another name")
        workspace = self._ensure_workspace()
        running = self._process is not None and self._control is not None
        if running:
            self._refuse_foreign_model(model_name)
        if self._gate is not None:
            self._gate.hold()  # a bind before it opened: the server stays not ready through this one too
        self._bindings.start(
            declaration,
            repository=workspace.model_repository,
            sockets=workspace.sockets,
            shm_prefix=workspace.shm_prefix,
            import_paths=proxy_import_paths(self._distribution()),
        )
        if running:
            try:
                self._load_bound(model_name)
            finally:
                if self._gate is not None:  # loaded or failed, this bind is over
                    self._gate.open_soon()  # unless another bind follows at once

    def _refuse_foreign_model(self, model_name: str) -> None:
        """A model another process sent to this server (not in its repository) would be replaced."""
        assert self._control is not None
        if self._control.is_model_ready(model_name, None):
            raise PyTritonInvalidOperationError(
                f"model '{model_name}' is already served by this Triton's server, sent by another process "
                "(RemoteTriton); a model name is served by one process at a time: choose another model name"
            )

    def _load_bound(self, model_name: str) -> None:
        """Load a model bound while the server runs; on failure, unbind it and say why.

        Triton's load call blocks until the model is loaded (warm-up included), so it runs in a
        thread while the calling one (the main thread) watches for SIGINT/SIGTERM, as `run()`
        does: a signal stops the server at once instead of waiting for a slow load.
        """
        assert self._control is not None and self._workspace is not None
        control = self._control
        warn_if_shm_small([c for c in self._bindings.contexts() if c.model_name == model_name])
        failure: List[BaseException] = []
        done = threading.Event()

        def load() -> None:
            try:
                control.load_model(model_name, MODEL_LOAD_TIMEOUT_S)
            except BaseException as exc:  # noqa: BLE001 (handed to the binding thread)
                failure.append(exc)
            finally:
                done.set()

        watch_signals = not self._in_serve and threading.current_thread() is threading.main_thread()
        with SignalWatch(done) if watch_signals else contextlib.nullcontext() as signals:
            threading.Thread(target=load, name=f"pytriton-load-{model_name}", daemon=True).start()
            done.wait()
        if signals is not None and signals.first is not None:
            self._stop_for_signal(signals.first, f"loading model '{model_name}'")
        try:
            if failure:
                raise failure[0]
            self._wait_models_ready([model_name], time.monotonic() + MODEL_LOAD_TIMEOUT_S)
        except BaseException:
            self._bindings.discard(model_name, self._workspace.model_repository)
            control.forget_failed_model(model_name, MODEL_LOAD_TIMEOUT_S)
            raise

    def _stop_for_signal(self, signum: int, during: str) -> NoReturn:
        """Stop and clean up, then let the signal take its course; raise if the process lives on."""
        self.stop()
        signal.raise_signal(signum)
        raise PyTritonServerStartupError(
            f"{during} was interrupted by signal {signum}; the server was stopped and cleaned up"
        )

    def _distribution(self) -> ServerDistribution:
        if self._server_distribution is None:
            self._server_distribution = find_distribution()
        return self._server_distribution

    def _ensure_workspace(self) -> Workspace:
        if self._workspace is None:
            sweep_stale()
            self._workspace = Workspace(self._workspace_path)
            atexit.register(self.stop)
        return self._workspace

    # -- lifecycle -------------------------------------------------------------------------
    def run(self) -> None:
        """Start the server in the background; returns once every bound model is ready.

        A SIGINT or SIGTERM that arrives while it starts (from the main thread) stops the start
        and cleans up; then the signal takes its usual course (the previous handler, or the
        default action), and if the process lives on, this raises.

        Raises:
            PyTritonServerStartupError: the server could not start, or a signal stopped the
                start; the message says why.
        """
        if self._in_serve or threading.current_thread() is not threading.main_thread():
            self._start()
            return
        with SignalWatch(threading.Event()) as signals:
            self._start_interrupted = lambda: bool(signals.received)
            try:
                self._start()
            finally:
                self._start_interrupted = lambda: False
        if signals.first is not None:  # the previous handlers are back
            self._stop_for_signal(signals.first, "the start")

    def _start(self) -> None:
        with self._lock:
            self._raise_if_failed()
            if self._stopped:
                raise PyTritonInvalidOperationError("this Triton was stopped; create a new Triton to run again")
            if self._process is not None:
                if self._gate is not None:
                    self._gate.open(wait=True)  # run() or serve() after the binds: ready once they are
                return
            workspace = self._ensure_workspace()
            config = self._config
            config.warn_if_verbose(logger)
            check_vertex_ai_models(config, self._bindings.names())
            self._check_ports_free(config)
            distribution = self._distribution()
            argv = build_argv(
                restricted_config(config, self._security, self._access_token),
                binary=distribution.binary,
                model_repository=workspace.model_repository,
                backend_directory=assemble_backends(distribution, workspace.backends),
                cache_directory=distribution.caches,
                shm_region_prefix=f"{workspace.shm_prefix}-tpb",
            )
            warn_if_shm_small(self._bindings.contexts())
            workspace.hold_lease()  # before the server and its stubs create any segment
            secrets = [self._access_token] if self._access_token else []
            process = ServerProcess(argv, server_environment(distribution), secrets=secrets)
            self._control = ServerControl(
                http_address=config.http_address,
                http_port=config.effective_http_port if config.allow_http is not False else None,
                grpc_address=config.grpc_address,
                grpc_port=config.effective_grpc_port,
                access_token=self._access_token,
                grpc_tls=_grpc_tls(config),
            )
            self._process = process
            process.start()
            deadline = time.monotonic() + STARTUP_TIMEOUT_S
            control = self._control
            started: Callable[[], bool] = lambda: control.is_ready()  # noqa: E731
            if not self._bindings.names():  # started on entering `with`: not ready until models are bound
                self._gate = ReadinessGate(self._control, workspace.sockets / "readiness-gate.open",
                                           proxy_import_paths(distribution))
                self._gate.close(deadline, process.is_running)
                started = self._gate.holding
            try:
                if not wait_for(started, deadline, self._starting(process)):
                    if self._start_interrupted():
                        return  # serve() saw a signal: it stops what was started
                    raise PyTritonServerStartupError(self._startup_failure(process))
                self._wait_models_ready(self._bindings.names(), deadline)
                self._wait_endpoints_listening(config, deadline)
            except BaseException:
                self.stop()
                raise
            self._supervisor = Supervisor(
                process=process,
                control=self._control,
                instances=self._instance_views,
                budget_for=self._restart_budget,
                forget_instance=self._bindings.forget_stub,
                after_reload=lambda _model: workspace.restrict_segments(),
                on_fatal=self._on_fatal,
                server_id=workspace.server_id,
                tidy=workspace.restrict_segments,
                fault_traces=lambda pid: protocol.fault_trace_path(str(workspace.sockets), pid),
                inflight_ledgers=lambda pid: protocol.inflight_ledger_path(str(workspace.sockets), pid),
                hang_check=HangWatch(self._bindings.hung, self._hurry.set, self._on_fatal).check,
            )
            self._supervisor.start()
            logger.info("Triton Inference Server is ready (pid %s)", process.pid)

    def connect(self) -> None:
        """The same as `run()` (the published API's name on its base class)."""
        self.run()

    def is_connected(self) -> bool:
        """True from a completed start (`run()`, or entering ``with``) until `stop()` or a crash."""
        return self._supervisor is not None and self.is_alive()

    def _instance_views(self) -> List[InstanceView]:
        return [InstanceView(*entry) for entry in self._bindings.instances()]

    def _restart_budget(self, model_name: str) -> RestartBudget:
        config = self._bindings.config(model_name)
        return RestartBudget(config.max_restarts, config.restart_window_s)

    def _raise_if_failed(self) -> None:
        """The next call after the server died (or gave a model up) says so, instead of a vaguer error."""
        if self._fatal is None and self._supervisor is not None and not self._stopped:
            self._supervisor.check_server()  # the watcher may not have looked since the death
        if self._fatal is not None:
            raise self._fatal

    def _starting(self, process: ServerProcess) -> Callable[[], bool]:
        """Whether a start may go on waiting: the server runs and no signal asked to stop."""
        return lambda: process.is_running() and not self._start_interrupted()

    def _startup_failure(self, process: ServerProcess) -> str:
        if process.is_running():
            reason = f"it did not become ready within {STARTUP_TIMEOUT_S:.0f} s"
        else:
            reason = f"it exited with code {process.returncode}"
        return f"tritonserver failed to start: {reason}.\n{process.report()}"

    def _has_trace_file(self) -> bool:
        return any("file=" in item for item in (self._config.trace_config or ()))

    def _writes_files_at_exit(self) -> bool:
        """Whether Triton writes a trace file, flushes a log file or exports the OpenTelemetry spans
        it still holds at the end of its own shutdown (which a drain must then let it reach)."""
        return bool(self._config.log_file) or self._has_trace_file() or self._tracing is not None

    def _wait_models_ready(self, names: Sequence[str], deadline: float) -> None:
        """Wait until the models serve, then make their new shared-memory segments private.

        The Python backend creates its regions (0644 whatever the umask) while loading a model,
        so once the models are ready is when they all exist.
        """
        assert self._process is not None and self._control is not None and self._workspace is not None
        control = self._control
        for name in names:
            version = self._bindings.version(name)
            ready = wait_for(functools.partial(control.is_model_ready, name, version), deadline,
                             self._starting(self._process))
            if not ready and self._start_interrupted():
                return
            if not ready:
                raise PyTritonServerError(
                    f"model '{name}' version {version} did not become ready.\n{self._process.report()}"
                )
            settings = self._bindings.trace_settings(name)
            if settings is not None:
                control.set_model_trace(name, settings, MODEL_LOAD_TIMEOUT_S)
        self._workspace.restrict_segments()

    def _wait_endpoints_listening(self, config: TritonConfig, deadline: float) -> None:
        """Return from a start only once every enabled endpoint accepts connections (metrics come last)."""
        assert self._process is not None
        for field, address, port in enabled_endpoints(config):
            listening = wait_for(functools.partial(accepts_connections, address, port), deadline,
                                 self._starting(self._process))
            if not listening and self._start_interrupted():
                return
            if not listening:
                raise PyTritonServerStartupError(
                    f"tritonserver is ready but its {field} {port} does not accept connections.\n"
                    f"{self._process.report()}"
                )

    @staticmethod
    def _check_ports_free(config: TritonConfig) -> None:
        for field, address, port in enabled_endpoints(config):
            error = probe_port(address, port)
            if error == errno.EADDRINUSE:
                raise PyTritonServerStartupError(
                    f"port {port} ({field}) is already in use on {address or 'this host'}; stop what uses it "
                    f"or choose another port with TritonConfig({field}=...)"
                )
            if error is not None:
                raise OSError(error, os.strerror(error), f"{address or '0.0.0.0'}:{port}")

    def serve(self, monitoring_period_s: float = 1.0) -> None:
        """Run the server and block until SIGINT or SIGTERM, or until it stops by itself.

        On the first signal the server drains: it reports not ready at once, refuses new
        requests, and lets the requests and streams in flight finish within its exit timeout
        (``TritonConfig.exit_timeout_secs``). A second signal during the drain stops it at once.
        The previous signal handlers are restored before this returns.

        Raises:
            PyTritonServerCrashedError: tritonserver died while serving (killed, crashed); the
                message names the signal or exit code and ends with the server's last lines.
            PyTritonModelRestartLimitError: a model's instances kept dying and it was given up.
        """
        # Installed before the start: a SIGTERM while the models load (a pod deleted early) stops
        # the start and cleans up, instead of killing the process half-way or, as PID 1, being
        # dropped by the kernel for want of a handler.
        with SignalWatch(self._wake, on_repeat=self._hurry.set) as signals:
            self._in_serve = True
            try:
                self._start_interrupted = lambda: bool(signals.received)
                self._start()
                signum = block_until_signal(self.is_alive, self._wake, monitoring_period_s, signals)
                if signum is not None:
                    logger.info("Signal %d received: draining, then stopping Triton (a second signal stops at once)",
                                signum)
            finally:
                self._in_serve = False
                self.stop()
        if self._fatal is not None:
            raise self._fatal

    def is_alive(self) -> bool:
        """True while the server runs, no model declared itself unrecoverable and none was given up."""
        process = self._process
        return (process is not None and process.is_running() and self._unrecoverable is None
                and self._fatal is None and not self._stopped)

    def _on_fatal(self, error: PyTritonServerError) -> None:
        """From the supervisor: the server died, or a model spent its restart budget (or hung)."""
        self._fatal = error
        self._wake.set()
        if isinstance(error, (PyTritonModelRestartLimitError, PyTritonModelHangError)):
            # Like an unrecoverable error: a server that cannot serve one of its models stops, so
            # that its health endpoints stop answering and an orchestrator restarts the process.
            threading.Thread(target=self.stop, name="pytriton-fatal-stop", daemon=True).start()

    def _on_unrecoverable(self, model_name: str) -> None:
        self._unrecoverable = model_name
        self._wake.set()
        threading.Thread(target=self.stop, name="pytriton-unrecoverable-stop", daemon=True).start()

    def stop(self) -> bool:
        """Stop the server after in-flight requests, then remove every process, socket and segment.

        Returns:
            True when this call stopped a started server; False when it was stopped before or
            never started (the bound callables' handlers are released either way).
        """
        with self._lock:
            if self._stopped:
                return False
            self._stopped = True
            self._wake.set()
            atexit.unregister(self.stop)
            if self._supervisor is not None:
                self._supervisor.stop()  # the server's exit and its stubs' are no news from here on
            if self._gate is not None:
                self._gate.open()  # Triton's shutdown would wait for a model still loading
            if self._process is not None:
                exit_timeout = self._config.exit_timeout_secs
                exit_timeout = exit_timeout if exit_timeout is not None else _TRITON_DEFAULT_EXIT_TIMEOUT_S
                workspace, pid = self._workspace, self._process.pid
                self._process.stop(
                    timeout_s=exit_timeout + 15, poll=drain_poll(
                        exit_timeout, process=self._process, supervisor=self._supervisor, bindings=self._bindings,
                        hurry=self._hurry, writes_files=self._writes_files_at_exit()),
                    after_exit=(lambda: kill_server_processes({workspace.server_id}, exclude=pid))
                    if workspace is not None else None,
                )
                self._bindings.end_streams()
                reap_adopted()
            if self._control is not None:
                self._control.close()
            self._bindings.stop_handlers()
            if self._tracing is not None:
                shutdown_tracing(self._tracing)  # the workers' last spans go to the collector
            if self._workspace is not None:
                self._workspace.cleanup()
            if self._process is not None:
                reap_adopted()  # as PID 1: a stub that ended on its own since the first reap
            logger.debug("Triton stopped")
            return self._process is not None


def _grpc_tls(config: TritonConfig) -> Optional[GrpcTls]:
    """How the library's own calls reach the gRPC endpoint when it uses TLS (None: plain)."""
    if not (config.grpc_use_ssl or config.grpc_use_ssl_mutual):  # --grpc-use-ssl-mutual implies TLS
        return None
    paths = {name: None if value is None else str(value) for name, value in (
        ("server_cert", config.grpc_server_cert), ("server_key", config.grpc_server_key),
        ("root_cert", config.grpc_root_cert))}
    return GrpcTls.for_server(mutual=bool(config.grpc_use_ssl_mutual), **paths)
