"""`TritonBase`: the binding surface `Triton` and `RemoteTriton` share, each public method written once.

The two facades bind callables alike and serve them through different servers: `Triton`
(``pytriton.facade.triton``) starts its own tritonserver, `RemoteTriton`
(``pytriton.facade.remote``) loads its models into one that something else started. So the
public methods (their signatures, their docstrings, the checks every `bind` makes first) are
here, and each facade fills in only the private steps where the two differ (`_bind`, `_run`,
`_serve`, `_stop`, ...). `bind_chat` and `bind_embeddings` come from `OpenAIBindings` and go
through `bind`. The published PyTriton's base class of both had the same name, and
``pytriton.triton`` exports it as that one did.
"""

from __future__ import annotations

import abc
import threading
from typing import Any, ClassVar, List, Optional, Sequence, TypeVar, Union

from pytriton.exceptions import PyTritonInvalidOperationError
from pytriton.facade.binding import ModelBindings
from pytriton.facade.bound import InferFunc, ModelDeclaration
from pytriton.facade.versions import check_unbind
from pytriton.model_config import EnsembleStep, ModelConfig, Tensor
from pytriton.openai.binding import OpenAIBindings

__all__ = ["TritonBase"]

_Facade = TypeVar("_Facade", bound="TritonBase")


class TritonBase(OpenAIBindings, abc.ABC):
    """What `Triton` and `RemoteTriton` share: bind callables, serve them, unbind them, stop.

    Use one of the two (``pytriton.triton.Triton``, ``pytriton.remote.RemoteTriton``), as a
    context manager or calling `stop()`. Where a method works differently on each, its
    docstring says how.
    """

    _kind: ClassVar[str]
    """The facade's name, as its error messages say it."""
    _bindings: ModelBindings
    _lock: threading.RLock
    _wake: threading.Event
    _stopped: bool
    _unrecoverable: Optional[str]

    # -- context manager -------------------------------------------------------------------
    def __enter__(self: _Facade) -> _Facade:
        """Start serving (see `run`): each later `bind` loads its model at once.

        A `Triton` starts its server, unless its lifecycle policy waits for `run()` or
        `serve()`; inside the block, SIGTERM stops the server and ends the script cleanly
        wherever it is (``pytriton.facade.binding.TerminationScope``); SIGINT raises
        ``KeyboardInterrupt`` as usual, which does the same. A `RemoteTriton` connects.
        """
        self._enter()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        """Stop (see `stop`)."""
        self._exit()

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

        Once serving (a `Triton` after `run()`, or inside ``with Triton()``; a `RemoteTriton`
        once connected), the model is loaded at once and this returns when it is ready; a model
        that fails to load is unbound again and the server goes on serving the others. A new
        version of a bound name loads beside the one serving, which serves on (a swap: see
        `unbind`). A `RemoteTriton` writes the model's folder at once: into the shared
        workspace, whose server is then asked whether it sees it, or into a private folder.

        Raises:
            PyTritonInvalidOperationError: the version is bound here already (or another one, with
                other tensors or config, or the server does not run yet), or the server serves a
                model of that name for another process (a `RemoteTriton`'s; to a `RemoteTriton`,
                also one that is not pytriton's).
            PyTritonServerError: the server failed to load the model (its reason); for a
                `RemoteTriton` also: the server is unreachable, refuses the repository calls (a
                missing access token), or does not serve the shared workspace's ``models`` folder.
        """
        with self._lock:
            self._check_can_bind()
            self._bind(self._bindings.declare(
                model_name, infer_func, inputs, outputs, model_version, config, strict, trace_config
            ))

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
        the client makes one call. Bind the step models first. A `RemoteTriton` serves one only
        with the workspace it shares with the server: tritonserver cannot load an ensemble whose
        steps were sent through its repository API.

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
            PyTritonInvalidOperationError, PyTritonServerError: as for `bind`; and a
                `RemoteTriton` without a shared workspace.
        """
        with self._lock:
            self._check_can_bind()
            self._bind_ensemble(self._bindings.declare_ensemble(model_name, steps, inputs, outputs, model_version))

    def unbind(self, model_name: str, model_version: Optional[int] = None) -> None:
        """Stop serving model `model_name` (every version, or only `model_version`); it may be bound again.

        The server unloads it after its requests in flight (see ``pytriton.facade.versions``);
        then its instances end and its files (in a `RemoteTriton`'s shared workspace too) and
        shared memory go. The server and its other models serve on. Unbinding version 1 once
        `bind` loaded version 2 swaps a model without refusing a request: those naming no
        version reach the highest.

        Raises:
            PyTritonInvalidOperationError: not bound here, a step of an ensemble bound here, or stopped.
            PyTritonServerError: the server refused to unload it.
        """
        with self._lock:
            self._check_can_bind()
            check_unbind(self._bindings, self._kind, model_name, model_version)
            self._unbind(model_name, model_version)

    def _check_can_bind(self) -> None:
        self._raise_if_failed()
        if self._stopped:
            raise PyTritonInvalidOperationError(
                f"this {self._kind} was stopped; create a new {self._kind} to bind models"
            )

    # -- lifecycle -------------------------------------------------------------------------
    def run(self) -> None:
        """Start serving; returns once every bound model is ready. Later `bind` calls load their model at once.

        A `Triton` starts its server in the background. A SIGINT or SIGTERM that arrives while
        it starts (from the main thread) stops the start and cleans up; then the signal takes
        its usual course (the previous handler, or the default action), and if the process
        lives on, this raises. A `RemoteTriton` waits for the server at its URL, then loads
        every bound model; calling it again does nothing.

        Raises:
            PyTritonServerStartupError: a `Triton`'s server could not start, or a signal stopped
                the start; the message says why.
            PyTritonServerError: a `RemoteTriton`'s server is unreachable, or a model failed to
                load (with the server's reason); what this process created is then removed, as
                by `stop()`.
        """
        self._run()

    def connect(self) -> None:
        """The same as `run()` (the published API's name on its base class)."""
        self.run()

    def is_connected(self) -> bool:
        """True from a completed start (`run()`, `connect()`, or entering ``with``) until `stop()`.

        A `Triton` is no longer connected once its server crashed, either.
        """
        return self._connected()

    def serve(self, monitoring_period_s: float = 1.0) -> None:
        """Serve until SIGINT or SIGTERM, or until serving stops by itself; then stop.

        Once the models are ready, it says which, where, in one line on stderr
        (`pytriton.server.announce`). `monitoring_period_s` is how often, in seconds, it checks
        that serving goes on (`is_alive`).

        A `Triton` runs its server. On the first signal the server drains: it reports not
        ready at once, refuses new requests, and lets the requests and streams in flight finish
        within its exit timeout (``TritonConfig.exit_timeout_secs``). A second signal during the
        drain stops it at once. The previous signal handlers are restored before this returns.

        A `RemoteTriton` loads its models, and returns when a signal arrives, when a bound model
        is no longer ready on the server (the server stopped, restarted or unloaded it), or when
        a callable raised `PyTritonUnrecoverableError`; then stops (see `stop`), leaving the
        server running.

        Raises:
            PyTritonServerCrashedError: a `Triton`'s tritonserver died while serving (killed,
                crashed); the message names the signal or exit code and ends with the server's
                last lines.
            PyTritonModelRestartLimitError: a model's instances kept dying and it was given up.
        """
        self._serve(monitoring_period_s)

    def is_alive(self) -> bool:
        """True while serving.

        For a `Triton`: while its server runs, no model declared itself unrecoverable and none
        was given up. For a `RemoteTriton`: while the server at the URL is live and every model
        this process loaded is ready; before `connect()`, whether the server at the URL is live,
        as the published `RemoteTriton` says, so that a caller can wait for the server before
        connecting.
        """
        return self._alive()

    def _on_unrecoverable(self, model_name: str) -> None:
        """From the bindings: a callable raised `PyTritonUnrecoverableError`; stop (not on its thread)."""
        self._unrecoverable = model_name
        self._wake.set()
        threading.Thread(target=self.stop, name="pytriton-unrecoverable-stop", daemon=True).start()

    def stop(self) -> bool:
        """Stop serving, then remove every process, socket, folder and segment this one created.

        A `Triton` stops its server after in-flight requests. A `RemoteTriton` unloads its
        models and never stops the server, which keeps the models of other processes; requests
        in flight on its models finish first (for at most 60 s,
        ``pytriton.facade.remote.UNLOAD_TIMEOUT_S``); open streams are cut short.

        Returns:
            True when this call stopped a started `Triton` or a connected `RemoteTriton`; False
            when it was stopped before or never started (the bound callables' handlers are
            released either way).
        """
        return self._stop()

    # -- what each facade does its own way -------------------------------------------------
    @abc.abstractmethod
    def _enter(self) -> None:
        """Start serving as ``with`` does."""

    def _exit(self) -> None:
        self.stop()

    def _raise_if_failed(self) -> None:
        """Raise what made the facade stop serving by itself, before an operation that needs it."""

    @abc.abstractmethod
    def _bind(self, declaration: ModelDeclaration) -> None:
        """Serve a checked model declaration; load it at once when serving."""

    @abc.abstractmethod
    def _bind_ensemble(self, declaration: ModelDeclaration) -> None:
        """Serve a checked ensemble declaration; load it at once when serving."""

    @abc.abstractmethod
    def _unbind(self, model_name: str, model_version: Optional[int]) -> None:
        """Unload and remove a model bound here (checked by `unbind`)."""

    @abc.abstractmethod
    def _run(self) -> None: ...

    @abc.abstractmethod
    def _connected(self) -> bool: ...

    @abc.abstractmethod
    def _serve(self, monitoring_period_s: float) -> None: ...

    @abc.abstractmethod
    def _alive(self) -> bool: ...

    @abc.abstractmethod
    def _stop(self) -> bool: ...
