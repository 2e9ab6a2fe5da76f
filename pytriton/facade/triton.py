"""`Triton`: bind callables, run or serve the real tritonserver this process starts, stop cleanly.

Published as ``pytriton.triton.Triton``. The setup flow (`bind` -> model folder and worker ->
`run` -> tritonserver ready), step by step with the module of each, is in docs/architecture.md.
"""

from __future__ import annotations

import atexit
import logging
import os
import pathlib
import signal
import threading
import time
from typing import Any, Callable, NoReturn, Optional, Sequence, Union

from pytriton.constants import DEFAULT_TRITON_STARTUP_TIMEOUT_S as STARTUP_TIMEOUT_S
from pytriton.exceptions import (
    PyTritonBadParameterError,
    PyTritonInvalidOperationError,
    PyTritonModelHangError,
    PyTritonModelRestartLimitError,
    PyTritonServerError,
    PyTritonServerStartupError,
)
from pytriton.facade.base import TritonBase
from pytriton.facade.binding import ModelBindings, SignalWatch, TerminationScope, block_until_signal
from pytriton.facade.bound import ModelDeclaration
from pytriton.facade.drain import stop_draining
from pytriton.facade.launch import (
    MODEL_LOAD_TIMEOUT_S,
    check_ports_free,
    check_traces_go_somewhere,
    configure_proxies,
    launch,
    open_workspace,
    start_supervisor,
    startup_failure,
    still_starting,
    wait_endpoints_listening,
    wait_models_ready,
)
from pytriton.facade.versions import check_can_add, load_bound, unbind
from pytriton.openai import check_extra, spawn_front
from pytriton.openai.process import FrontGivenUpError
from pytriton.server.announce import announce_draining, announce_serving
from pytriton.server.config import TritonConfig
from pytriton.server.config.merge import merge
from pytriton.server.control import ServerControl, wait_for
from pytriton.server.distribution import (
    NATIVE_BACKEND,
    ServerDistribution,
    find_distribution,
    proxy_import_paths,
    serving_backend,
)
from pytriton.server.lifecycle import TritonLifecyclePolicy, choose_policy
from pytriton.server.preflight import warn_if_shm_small
from pytriton.server.process import ServerProcess
from pytriton.server.readiness import RESERVED_MODELS, ReadinessGate, startup_config
from pytriton.server.security import TritonSecurityConfig, resolve_access_token, server_security
from pytriton.server.supervisor import Supervisor, reap_adopted
from pytriton.server.vertex_ai import check_vertex_ai_models
from pytriton.server.workspace import Workspace, sweep_stale
from pytriton.worker.tracing import shutdown as shutdown_tracing

__all__ = ["Triton"]

logger = logging.getLogger("pytriton.triton")


class Triton(TritonBase):
    """A Triton Inference Server serving the Python callables bound to it (OpenAI API: docs/openai.md).

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

    Use it as a context manager (``with Triton() as triton: ...``) or call `stop()`. What it
    shares with `RemoteTriton` (`bind`, `serve`, `stop`, ...) is documented on `TritonBase`.
    """

    _kind = "Triton"

    def __init__(
        self,
        config: Optional[TritonConfig] = None,
        workspace: Union[str, pathlib.Path, None] = None,
        security_config: Optional[TritonSecurityConfig] = None,
        triton_lifecycle_policy: Optional[TritonLifecyclePolicy] = None,
    ) -> None:
        self._config = merge(config, os.environ)
        self._policy = choose_policy(triton_lifecycle_policy, self._config.allow_vertex_ai)
        self._security = server_security(self._config, security_config)
        self._access_token = resolve_access_token(self._security)
        self._workspace_path = pathlib.Path(workspace) if workspace is not None else None
        self._workspace: Optional[Workspace] = None
        self._bindings = ModelBindings(self._kind, self._on_unrecoverable)
        self._tracing = configure_proxies(self._bindings, self._config, os.environ)
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
        self._in_serve = self._stopped = False
        self._server_distribution: Optional[ServerDistribution] = None
        self._front: Any = None  # the OpenAI-compatible API's process, once started (pytriton.openai.process)
        check_extra(self._config)

    # -- context manager (TritonBase.__enter__, __exit__) ------------------------------------
    def _enter(self) -> None:
        self._termination.enter()
        try:
            if self._policy.launch_triton_on_startup:
                self.run()
        except BaseException:
            self._termination.exit()
            raise

    def _exit(self) -> None:
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

    # -- binding (TritonBase.bind, bind_ensemble, unbind) -----------------------------------
    def _bind(self, declaration: ModelDeclaration) -> None:
        if declaration.trace_settings is not None:
            check_traces_go_somewhere(declaration.context.model_name, self._config, self._tracing)
        self._add(declaration)

    def _bind_ensemble(self, declaration: ModelDeclaration) -> None:
        self._add(declaration)

    def _unbind(self, model_name: str, model_version: Optional[int]) -> None:
        unbind(self._bindings, self._control if self._process is not None else None, model_name, model_version,
               self._ensure_workspace().model_repository)

    def _add(self, declaration: ModelDeclaration) -> None:
        """Start a checked model (its handlers, its folder in the repository); load it if the server runs."""
        model_name = declaration.context.model_name
        if model_name in RESERVED_MODELS:
            raise PyTritonBadParameterError(f"model name '{model_name}' is pytriton's own (it holds the server's "
                                            "readiness); choose another name")
        workspace = self._ensure_workspace()
        running = self._process is not None and self._control is not None
        check_can_add(self._bindings, model_name, running, self._control)
        if self._gate is not None:
            self._gate.hold()  # a bind before it opened: the server stays not ready through this one too
        self._bindings.start(declaration, repository=workspace.model_repository, sockets=workspace.sockets,
                             shm_prefix=workspace.shm_prefix, import_paths=proxy_import_paths(self._distribution()))
        if running:
            try:
                self._load_bound(model_name, declaration.context.model_version)
            finally:
                if self._gate is not None:  # loaded or failed, this bind is over
                    self._gate.open_soon()  # unless another bind follows at once

    def _load_bound(self, model_name: str, version: int) -> None:
        """Load a model version bound while the server runs; on failure, unbind it and say why. The
        main thread watches for SIGINT and SIGTERM meanwhile, as `run()` does: a signal stops the server."""
        assert self._control is not None and self._workspace is not None
        warn_if_shm_small([c for c in self._bindings.contexts() if c.model_name == model_name])
        workspace = self._workspace
        load_bound(self._bindings, self._control, model_name, version, workspace.model_repository,
                   watch_signals=not self._in_serve and threading.current_thread() is threading.main_thread(),
                   on_signal=lambda signum: self._stop_for_signal(signum, f"loading model '{model_name}'"),
                   wait_ready=lambda: self._wait_models_ready([model_name], time.monotonic() + MODEL_LOAD_TIMEOUT_S),
                   start=lambda declaration: self._bindings.start(
                       declaration, repository=workspace.model_repository, sockets=workspace.sockets,
                       shm_prefix=workspace.shm_prefix, import_paths=proxy_import_paths(self._distribution())))

    def _stop_for_signal(self, signum: int, during: str) -> NoReturn:
        """Stop and clean up, then let the signal take its course; raise if the process lives on."""
        self.stop()
        signal.raise_signal(signum)
        raise PyTritonServerStartupError(f"{during} was interrupted by signal {signum}; the server was stopped "
                                         "and cleaned up")

    def _distribution(self) -> ServerDistribution:
        """The Triton installation, found once; the backend the models are written for, with it."""
        if self._server_distribution is None:
            self._bindings.backend = serving_backend(distribution := find_distribution(), self._config.model_backend)
            self._server_distribution = distribution
        return self._server_distribution

    def _ensure_workspace(self) -> Workspace:
        if self._workspace is None:
            sweep_stale()
            self._workspace = open_workspace(self._workspace_path, self._bindings)
            atexit.register(self.stop)
        return self._workspace

    # -- lifecycle (TritonBase.run, connect, is_connected, serve, is_alive, stop) ------------
    def _run(self) -> None:
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
            # A start that fails at any point (a port taken, the server's exit, a model that does not
            # load) removes what it made, the folder its binds wrote included, at once rather than at
            # the interpreter's exit; the Triton is stopped, as after any failed start.
            try:
                (config := self._config).warn_if_verbose(logger)
                check_vertex_ai_models(config, self._bindings.names())
                check_ports_free(config)
                distribution = self._distribution()
                warn_if_shm_small(self._bindings.contexts())
                gated = not self._bindings.names()  # started on entering `with`: not ready until models are bound
                config, closed_folder = startup_config(config, workspace.model_repository) if gated else (config, None)
                process, control = launch(config, self._security, self._access_token, workspace, distribution)
                self._process, self._control = process, control
                # Its imports overlap the server's start; it listens once the models are ready.
                self._front = spawn_front(config, self._security, self._access_token, self._bindings, self._on_fatal)
                deadline = time.monotonic() + STARTUP_TIMEOUT_S
                started: Callable[[], bool] = lambda: control.is_ready()  # noqa: E731
                if gated:
                    self._gate = ReadinessGate(control, workspace.sockets / "readiness-gate.open",
                                               proxy_import_paths(distribution), self._bindings.backend, closed_folder)
                    started = self._gate.close(deadline, process.is_running)
                if not wait_for(started, deadline, still_starting(process, self._start_interrupted)):
                    if self._start_interrupted():
                        return  # serve() saw a signal: it stops what was started
                    raise PyTritonServerStartupError(startup_failure(process))
                if self._wait_models_ready(self._bindings.names(), deadline):
                    wait_endpoints_listening(config, process, deadline, self._start_interrupted)
                    if self._front is not None:
                        self._front.open()
            except BaseException:
                self.stop()
                raise
            self._supervisor = start_supervisor(process, control, workspace, self._bindings,
                                                on_fatal=self._on_fatal, hurry=self._hurry)
            logger.info("Triton Inference Server is ready (pid %s)", process.pid)

    def _connected(self) -> bool:
        return self._supervisor is not None and self.is_alive()

    def _raise_if_failed(self) -> None:
        """The next call after the server died (or gave a model up) says so, instead of a vaguer error."""
        if self._fatal is None and self._supervisor is not None and not self._stopped:
            self._supervisor.check_server()  # the watcher may not have looked since the death
        if self._fatal is not None:
            raise self._fatal

    def _wait_models_ready(self, names: Sequence[str], deadline: float) -> bool:
        """Wait until the models serve (False: a signal came first), then make their new segments
        private (the Python backend creates its regions 0644 while it loads a model)."""
        assert self._process is not None and self._control is not None and self._workspace is not None
        models = [(name, self._bindings.version(name), self._bindings.trace_settings(name)) for name in names]
        if not wait_models_ready(self._control, self._process, models, deadline, self._start_interrupted):
            return False
        self._workspace.restrict_segments()
        return True

    def _serve(self, monitoring_period_s: float) -> None:
        # Installed before the start: a SIGTERM while the models load (a pod deleted early) stops
        # the start and cleans up, instead of killing the process half-way or, as PID 1, being
        # dropped by the kernel for want of a handler.
        with SignalWatch(self._wake, on_repeat=self._hurry.set) as signals:
            self._in_serve = True
            try:
                self._start_interrupted = lambda: bool(signals.received)
                self._start()
                if not signals.received:  # the line says what serves where (and the client's hint points at it)
                    announce_serving(self._config, [(n, self._bindings.version(n)) for n in self._bindings.names()],
                                     openai_key=self._security.openai_api_key is not None,
                                     notes=self._bindings.notes())
                if (signum := block_until_signal(self.is_alive, self._wake, monitoring_period_s, signals)) is not None:
                    announce_draining(signum, self._config)
            finally:
                self._in_serve = False
                self.stop()
        if self._fatal is not None:
            raise self._fatal

    def _alive(self) -> bool:
        process = self._process
        return (process is not None and process.is_running() and self._unrecoverable is None
                and self._fatal is None and not self._stopped)

    def _on_fatal(self, error: PyTritonServerError) -> None:
        """From the supervisor: the server died, or a model spent its restart budget (or hung)."""
        self._fatal = error
        self._wake.set()
        if isinstance(error, (PyTritonModelRestartLimitError, PyTritonModelHangError, FrontGivenUpError)):
            # Like an unrecoverable error: a server that cannot serve one of its models stops, so
            # that its health endpoints stop answering and an orchestrator restarts the process.
            threading.Thread(target=self.stop, name="pytriton-fatal-stop", daemon=True).start()

    def _stop(self) -> bool:
        with self._lock:
            if self._stopped:
                return False
            self._stopped = True
            self._wake.set()
            if self._supervisor is not None:
                self._supervisor.stop()  # the server's exit and its stubs' are no news from here on
            if self._gate is not None:
                self._gate.release()  # Triton's shutdown would wait for a gate still loading
            if self._front is not None:
                self._front.begin_stop()  # new OpenAI requests: 503; those in flight drain with Triton's
            if self._process is not None:
                distribution = self._server_distribution
                native = distribution is not None and distribution.native_backend is not None
                stop_draining(self._process, self._config, self._tracing, control=self._control, hurry=self._hurry,
                              supervisor=self._supervisor, bindings=self._bindings, workspace=self._workspace,
                              refusing_backend=NATIVE_BACKEND if native else "python")
            if self._control is not None:
                self._control.close()
            if self._front is not None:
                self._front.close()
            # A stop at once (a second signal, a hung callable) leaves the callables still running behind.
            self._bindings.stop_handlers(0.0 if self._hurry.is_set() else 5.0)
            if self._tracing is not None:
                shutdown_tracing(self._tracing)  # the workers' last spans go to the collector
            if self._workspace is not None:
                self._workspace.cleanup()
            if self._process is not None:
                reap_adopted()  # as PID 1: a stub that ended on its own since the first reap
            # Registered until now: a script that exits while another thread stops the server (the
            # daemon thread an unrecoverable error starts) waits here, at exit, for that stop to end,
            # instead of leaving what it had not removed yet (the lease, the folder) to the next start.
            atexit.unregister(self.stop)
            logger.debug("Triton stopped")
            return self._process is not None

