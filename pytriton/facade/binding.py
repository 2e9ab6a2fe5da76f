"""Shared by both facades: a bound callable -> worker handlers and a model folder.

`Triton` (which starts its own tritonserver) and `RemoteTriton` (which binds to a tritonserver
something else started) serve callables the same way. `ModelBindings.declare` checks what the
user passed and describes the model, starting nothing; `ModelBindings.start` starts one worker
handler per model instance on an ipc socket and writes the model folder whose configuration tells
the proxy where they listen. The facades differ only in where the folder and the sockets live,
and in who loads the model into which server.

`block_until_signal` is the loop of both facades' ``serve()``.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import pathlib
import signal
import threading
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import zmq

from pytriton.decorating.multiplexing import multiplex_parameter, multiplexing_of
from pytriton.decorating.shaping import whole_batch
from pytriton.environment import BATCH_HOLD_US as HOLD_ENV
from pytriton.environment import PROXY_SPIN_US as SPIN_ENV
from pytriton.exceptions import PyTritonBadParameterError, PyTritonInvalidOperationError, PyTritonModelConfigError
from pytriton.facade.bound import BoundModel, BoundModels, InferFunc, ModelDeclaration
from pytriton.ipc import protocol
from pytriton.metrics import Registry
from pytriton.model_config import ModelConfig, SequenceBatcher, Tensor
from pytriton.model_config.common import rechecked
from pytriton.model_config.ensemble import EnsembleStep
from pytriton.model_config.tensor import resolve_tensor_names
from pytriton.repository.ensemble import ensemble_config_proto, plan_ensemble, step_model
from pytriton.repository.pbtxt import to_pbtxt
from pytriton.repository.served import served_config_text
from pytriton.repository.versions import refusal, served_difference, with_versions
from pytriton.repository.warmup import local_warmups, plan_warmups
from pytriton.repository.writer import remove_model, remove_version, write_ensemble, write_model, write_version
from pytriton.server.model_trace import model_trace_settings
from pytriton.server.workspace import remove_segments
from pytriton.worker.blocking import stamps_folder
from pytriton.worker.context import TritonContext
from pytriton.worker.continuous import continuous_capacity
from pytriton.worker.handler import InstanceHandler, check_callables
from pytriton.worker.instance import Instance, InstanceSpec
from pytriton.worker.placement import instance_entries, is_async_entry, plain_callables
from pytriton.worker.process_instance import ProcessInstance, check_forkable
from pytriton.worker.tracing import TraceExport
from pytriton.worker.warmup import run_local_warmups

logger = logging.getLogger("pytriton.triton")

_ZMQ_TERM_S = 2.0
"""How long `ModelBindings.stop_handlers` waits for the handlers' ZeroMQ context to end."""

DISPATCHERS_PER_WORKER = 6
"""Triton instances beyond the workers, per worker, of a routed multiplexed model (``backend/route.c``):
each holds a batch while it waits, so that a worker that frees chooses among up to this many
batches the one whose variants it holds (simulated on the bench's Zipf trace, batches of 2:
hit rate 0.49 choosing among 2, 0.59 among 8). Measured in the bench's multiplexing case (3 rounds
each, idle machine): hit rate 0.49-0.51 with 3 per worker, 0.56-0.60 with 6 and 0.58-0.60 with 8 (the ideal
LRU of both instances' 16 variants: 0.58-0.60); 6 is the fewest that reached it."""

_SOCKET_PATH_MAX = 107
"""The longest Unix socket path Linux takes (``sun_path`` holds 108 bytes with the NUL)."""


def check_socket_paths(model_name: str, model_version: int, endpoint: str, instances: int) -> None:
    """Refuse a version whose handlers' socket paths would not fit a Unix socket address.

    The version's digits are part of each path (`protocol.version_endpoint`); the workspace
    keeps its sockets folder short enough for any version up to seven digits.

    Raises:
        PyTritonBadParameterError: naming the model, the version and the longest path.
    """
    longest = protocol.metrics_socket_path(protocol.instance_data_socket(endpoint, instances - 1))
    if len(longest) > _SOCKET_PATH_MAX:
        raise PyTritonBadParameterError(
            f"model '{model_name}' version {model_version}: its worker socket path {longest!r} is "
            f"{len(longest)} characters, over the {_SOCKET_PATH_MAX} a Unix socket takes; choose a smaller "
            "model_version or a shorter workspace path")


def microseconds_from(variable: str) -> Optional[str]:
    """A duration in microseconds from the environment variable `variable`, as its text, or None
    where it is unset or not a number >= 0 (then the backend's default holds, with a warning:
    the C side would read such a value as 0)."""
    value = os.environ.get(variable)
    if not value:
        return None
    try:
        number = float(value)
    except ValueError:
        number = -1.0
    if not 0 <= number < float("inf"):
        logger.warning("%s=%r is not a number of microseconds >= 0; the default applies", variable, value)
        return None
    return value


class ModelBindings:
    """The models one facade serves, with their worker handlers and their ZeroMQ context.

    Args:
        owner: how error messages name the facade (``"Triton"``, ``"RemoteTriton"``).
        on_unrecoverable: called with the model name after its callable raised
            `PyTritonUnrecoverableError`.
    """

    def __init__(self, owner: str, on_unrecoverable: Callable[[str], None]) -> None:
        self._owner = owner
        self._on_unrecoverable = on_unrecoverable
        self.models = BoundModels()
        """The bound model versions (a name may have several while one replaces another)."""
        self._shm_prefix = ""
        self._zmq: Optional[zmq.Context[zmq.Socket[bytes]]] = None
        self.model_parameters: Dict[str, str] = {}
        self.backend = "python"
        """The Triton backend the models are written for: ``python`` (the proxy in Triton's Python
        backend) or ``pytriton`` (pytriton's own; see `pytriton.server.distribution.serving_backend`)."""
        """Parameters every model's proxy gets from the server's configuration (metrics off, tracing)."""
        self.tracing: Optional[TraceExport] = None
        """Where the workers export their spans when the server traces with OpenTelemetry (else None)."""

    def __contains__(self, model_name: object) -> bool:
        return model_name in self.models

    def names(self) -> List[str]:
        """The bound model names, in binding order."""
        return self.models.names()

    def version(self, model_name: str) -> int:
        """The highest bound version of `model_name`: the one requests naming no version reach."""
        return self.models.get(model_name).version

    def notes(self) -> Dict[str, str]:
        """A few words per model for the start line: what a multiplexed model's `bind` was told."""
        found = {}
        for name in self.names():
            funcs = plain_callables(self.models.get(name).declaration.infer_funcs)
            multiplexing = multiplexing_of(funcs[0]) if funcs else None
            if multiplexing is not None:
                found[name] = multiplexing.describe()
        return found

    def contexts(self) -> List[TritonContext]:
        """What each bound model version declared (name, tensors, config), in binding order."""
        return [model.declaration.context for model in self.models.all()]

    def trace_settings(self, model_name: str) -> Optional[Dict[str, Any]]:
        """The trace settings `bind` gave model `model_name` (its highest version), or None."""
        return self.models.get(model_name).declaration.trace_settings

    def config(self, model_name: str) -> ModelConfig:
        config: ModelConfig = self.models.get(model_name).declaration.context.config
        return config

    def instances(self) -> List[Tuple[str, int, int, Optional[int]]]:
        """``(model, version, Triton instance, stub pid)`` of every Triton instance (one per
        handler, of the same number); the pid is None until its stub's proxy greeted."""
        return [(model.name, model.version, index, handler.proxy_pid)
                for model in self.models.all() for index, handler in enumerate(model.handlers)]

    def registry(self, model_name: str) -> Optional[Registry]:
        """The metric registry of model `model_name`'s first instance; None for a model not bound here or
        served from a worker process (whose registry lives there)."""
        handlers = self.models.get(model_name).handlers if model_name in self.models else []
        return getattr(handlers[0], "registry", None) if handlers else None

    def forget_stub(self, model_name: str, version: int, instance: int) -> List[str]:
        """Remove the input segments a dead stub of `instance` left, so its successor can create them."""
        if version not in self.models.versions(model_name):
            return []
        prefix = self.models.get(model_name, version).shm_prefix
        return remove_segments(protocol.segment_name(prefix, instance, "in", 0)[:-1])

    def declare(
        self,
        model_name: str,
        infer_func: Union[InferFunc, Sequence[InferFunc]],
        inputs: Sequence[Tensor],
        outputs: Sequence[Tensor],
        model_version: int,
        config: Optional[ModelConfig],
        strict: bool,
        trace_config: Optional[Sequence[str]] = None,
    ) -> ModelDeclaration:
        """Check the arguments of a `bind` call (see `Triton.bind`); starts and writes nothing.

        Raises:
            PyTritonBadParameterError: an argument has the wrong kind or value.
            PyTritonInvalidOperationError: this version of `model_name` is already bound here.
            PyTritonModelConfigError: a generator callable on a model that is not decoupled.
        """
        self._check_new_name(model_name, model_version)
        config = config if config is not None else ModelConfig()
        if not isinstance(config, ModelConfig):
            raise PyTritonBadParameterError(f"config of model '{model_name}' must be a "
                                            f"pytriton.model_config.ModelConfig, got {config!r}")
        try:
            config = rechecked(config)  # fields may have been assigned since it was built
        except PyTritonBadParameterError as exc:
            raise PyTritonBadParameterError(f"config of model '{model_name}': {exc.message}") from exc
        if config.process_instances:
            check_forkable(model_name)
        infer_funcs: List[InferFunc] = instance_entries(model_name, infer_func, config)
        context = TritonContext(
            model_name=model_name,
            model_version=model_version,
            inputs=resolve_tensor_names(inputs, "INPUT"),
            outputs=resolve_tensor_names(outputs, "OUTPUT"),
            config=config,
            outputs_unnamed=bool(outputs) and all(getattr(t, "name", None) is None for t in outputs),
        )
        check_callables(model_name, plain_callables(infer_funcs), config.decoupled, context.input_names)
        continuous_capacity(model_name, infer_funcs, config)
        multiplex_parameter(model_name, plain_callables(infer_funcs))
        trace_settings = model_trace_settings(model_name, trace_config)
        return ModelDeclaration(context, infer_funcs, strict, [is_async_entry(f) for f in infer_funcs],
                                trace_settings, warmups=plan_warmups(model_name, context.inputs, config))

    def _check_new_name(self, model_name: str, model_version: int, ensemble: bool = False) -> None:
        if not isinstance(model_name, str) or not model_name:
            raise PyTritonBadParameterError(f"model_name={model_name!r} is invalid: expected a non-empty string")
        if not isinstance(model_version, int) or isinstance(model_version, bool) or model_version < 1:
            raise PyTritonBadParameterError(f"model_version={model_version!r} of model '{model_name}' is invalid: "
                                            "expected an int >= 1")
        if model_version in self.models.versions(model_name):
            raise PyTritonInvalidOperationError(
                f"model '{model_name}' version {model_version} is already bound to this {self._owner}; unbind it "
                f"first ({self._owner}.unbind), or bind another version")
        if model_name in self.models and (ensemble or self.models.get(model_name).declaration.ensemble is not None):
            raise PyTritonInvalidOperationError(
                f"model '{model_name}' is already bound to this {self._owner}, and an ensemble serves one version "
                f"only: unbind it first ({self._owner}.unbind), or choose another name")

    def declare_ensemble(
        self,
        model_name: str,
        steps: Sequence[EnsembleStep],
        inputs: Optional[Sequence[str]],
        outputs: Optional[Sequence[str]],
        model_version: int,
    ) -> ModelDeclaration:
        """Check a `bind_ensemble` call against the models bound here; starts and writes nothing.

        Raises:
            PyTritonBadParameterError: a bad name or version, or a step that does not fit
                (`pytriton.repository.ensemble.plan_ensemble`).
            PyTritonInvalidOperationError: `model_name` is already bound here.
        """
        self._check_new_name(model_name, model_version, ensemble=True)
        models = {
            name: step_model(bound.version, bound.declaration.context.inputs, bound.declaration.context.outputs,
                             bound.declaration.context.config)
            for name, bound in ((name, self.models.get(name)) for name in self.models.names())
        }
        plan = plan_ensemble(model_name, steps, models, inputs, outputs)
        size = plan.max_batch_size
        config = ModelConfig(batching=size > 0, max_batch_size=max(size, 1), decoupled=plan.decoupled)
        context = TritonContext(model_name, model_version, plan.inputs, plan.outputs, config)
        return ModelDeclaration(context, [], False, [], ensemble=plan)

    def start_ensemble(self, declaration: ModelDeclaration, repository: pathlib.Path) -> BoundModel:
        """Write an ensemble's folder into `repository` and count it among the bound models."""
        assert declaration.ensemble is not None
        context = declaration.context
        write_ensemble(repository, context.model_name, context.model_version,
                       to_pbtxt(ensemble_config_proto(declaration.ensemble)))
        bound = BoundModel(declaration, handlers=[])
        self.models.add(bound)
        return bound

    def start(
        self,
        declaration: ModelDeclaration,
        *,
        repository: pathlib.Path,
        sockets: pathlib.Path,
        shm_prefix: str,
        import_paths: Sequence[str],
    ) -> BoundModel:
        """Start the model's worker handlers and write its folder into `repository`.

        Args:
            declaration: from `declare`.
            repository: the model repository the server loads from.
            sockets: folder of the handlers' ipc sockets (the server must reach it).
            shm_prefix: prefix of every shared-memory segment of the facade.
            import_paths: folders the generated model.py puts on the stub's ``sys.path``.

        A name's first version gets the folder (`pytriton.facade.bound`); another version,
        which must have the same served configuration (else `PyTritonInvalidOperationError`),
        only its version folder: `pytriton.facade.versions` loads it. On failure, the handlers started
        so far are stopped and the model is not bound. An ensemble has only its folder.
        """
        if declaration.ensemble is not None:
            return self.start_ensemble(declaration, repository)
        context = declaration.context
        if self.tracing is not None:  # the handlers continue the requests' traces
            context = dataclasses.replace(context, tracing=self.tracing)
        model_name, model_version, config = context.model_name, context.model_version, context.config
        name_endpoint = protocol.name_endpoint(sockets, model_name)
        endpoint = protocol.version_endpoint(name_endpoint, model_version)
        check_socket_paths(model_name, model_version, endpoint, len(declaration.infer_funcs))
        model_shm_prefix = protocol.model_shm_prefix(shm_prefix, model_name, model_version)
        self._shm_prefix = shm_prefix  # the facade's, named in every served configuration
        relayed = any(declaration.asynchronous) or config.decoupled
        config_text = self._config_text(declaration, name_endpoint, shm_prefix, self.backend)
        served = self.models.versions(model_name)
        if served and (difference := served_difference(self.models.get(model_name).config_text, config_text)):
            raise PyTritonInvalidOperationError(refusal(model_name, served[-1], model_version, difference))
        if self._zmq is None:
            self._zmq = zmq.Context()
        # Warm-ups Triton cannot send run here, before the handlers (and any fork) start (or after a
        # setup, in its process); a joining version's all run so, so that a version failing them is
        # refused before Triton loads it.
        warmups = tuple(local_warmups(model_name, context.inputs, config)) if served else declaration.warmups.local
        run_local_warmups(context, plain_callables(declaration.infer_funcs), warmups)
        bound = BoundModel(declaration, [], model_shm_prefix, endpoint, config_text, name_endpoint)
        self.models.add(bound)  # registered first, so stop_handlers() finds whatever started
        try:
            for index, func in enumerate(declaration.infer_funcs):
                spec = InstanceSpec(context=context, infer_func=func, instance=index, shm_prefix=model_shm_prefix,
                                    endpoint=protocol.instance_endpoint(endpoint, index), strict=declaration.strict,
                                    asynchronous=declaration.asynchronous[index], pipelined=not relayed,
                                    whole=whole_batch(func), warmups=warmups, whole_of=whole_batch)
                handler: Instance = (  # a ProcessInstance's child makes its own ZeroMQ context
                    ProcessInstance(spec, on_unrecoverable=self._on_unrecoverable) if config.process_instances
                    else InstanceHandler(spec, zmq_context=self._zmq, on_unrecoverable=self._on_unrecoverable))
                bound.handlers.append(handler)
                handler.launch()  # worker processes run their setups side by side
            for handler in bound.handlers:
                handler.start()
            if served:  # the folder and its warm-up files stay as they are: the served versions' files
                write_version(repository, model_name, model_version, import_paths)
            else:
                write_model(repository, model_name, model_version, with_versions(config_text, [model_version]),
                            import_paths, declaration.warmups.files)
        except BaseException:
            for handler in bound.handlers:
                handler.stop()
            self.models.pop(model_name, model_version)
            raise
        logger.debug("Bound model '%s' version %d with %d instance(s)", model_name, model_version,
                     len(bound.handlers))
        return bound

    def _config_text(self, declaration: ModelDeclaration, endpoint: str, shm_prefix: str, backend: str) -> str:
        """The served config.pbtxt text of a declaration, without a version policy.

        Raises:
            PyTritonModelConfigError: a continuous-batching model on a server without pytriton's backend.
        """
        context = declaration.context
        streams = continuous_capacity(context.model_name, declaration.infer_funcs, context.config)
        multiplex = multiplex_parameter(context.model_name, plain_callables(declaration.infer_funcs))
        config = context.config
        # pytriton's backend routes a multiplexed model's batches (backend/route.c) where they do not
        # overlap on an instance and no sequence must stay on one; its batches wait for the
        # instance that holds their variants on Triton instances of their own (DISPATCHERS_PER_WORKER).
        routed = (multiplex and backend != "python" and len(declaration.infer_funcs) > 1 and not config.devices
                  and not config.decoupled and not any(declaration.asynchronous)
                  and not isinstance(config.batcher, SequenceBatcher))
        dispatchers = DISPATCHERS_PER_WORKER * len(declaration.infer_funcs) if routed else 0
        if multiplex and backend == "python" and len(declaration.infer_funcs) > 1:
            logger.warning(
                "model '%s': @multiplexed with %d instances on the proxy path (Triton's Python backend): Triton "
                "chooses the instance of each batch, so a request may go to an instance that does not hold its "
                "variant and load it there; pytriton's own backend sends it to the instance that holds it",
                context.model_name, len(declaration.infer_funcs))
        if streams and backend == "python":
            raise PyTritonModelConfigError(
                f"model '{context.model_name}': a @continuous step function needs pytriton's own Triton backend, "
                "which lets streams join and leave a running batch; this server serves through Triton's Python "
                "backend (the proxy path: TritonConfig(model_backend='python'), or a server without pytriton's "
                "backend). Serve it on pytriton's backend, or bind a generator instead")
        return served_config_text(
            context.model_name, context.inputs, context.outputs, context.config, len(declaration.infer_funcs),
            coroutines=any(declaration.asynchronous), endpoint=endpoint, shm_prefix=shm_prefix, backend=backend,
            warmups=declaration.warmups.entries, dispatchers=dispatchers,
            parameters={**({protocol.PARAM_STAMPS: "1"} if stamps_folder() else {}),
                        **({protocol.PARAM_SPIN_US: spin} if (spin := microseconds_from(SPIN_ENV)) else {}),
                        **({protocol.PARAM_HOLD_US: hold} if (hold := microseconds_from(HOLD_ENV)) else {}),
                        **({protocol.PARAM_CONTINUOUS: str(streams)} if streams else {}),
                        **({protocol.PARAM_MULTIPLEX: multiplex} if multiplex else {}),
                        **self.model_parameters},
        )

    def rewrite_for(self, model_name: str, backend: str, repository: pathlib.Path) -> None:
        """Write model `model_name`'s config.pbtxt again, for `backend` (a server without
        pytriton's backend gets the proxy's); its workers serve on unchanged."""
        for version in self.models.versions(model_name):
            bound = self.models.get(model_name, version)
            bound.config_text = self._config_text(bound.declaration, bound.name_endpoint, self._shm_prefix, backend)
        self.write_config(model_name, repository)

    def write_config(self, model_name: str, repository: pathlib.Path, versions: Optional[Sequence[int]] = None) -> None:
        """Write the config.pbtxt of `model_name` that serves `versions` (None: every bound version)."""
        text = with_versions(self.models.get(model_name).config_text, versions or self.models.versions(model_name))
        (repository / model_name / "config.pbtxt").write_text(text)

    def discard(self, model_name: str, repository: pathlib.Path, version: Optional[int] = None) -> None:
        """Undo `start` for a model whose load failed, or unbind it: stop its handlers, forget it,
        remove its folder from `repository` and its segments. With `version`, only that version
        goes (its version folder and segments); the others keep the folder."""
        others = [v for v in self.models.versions(model_name) if v != version] if version is not None else []
        if others:
            remove_version(repository, model_name, version or 0)
        else:
            remove_model(repository, model_name)
        for model in self.models.pop(model_name, version):
            for handler in model.handlers:
                if not handler.stop():
                    logger.warning("a handler of model '%s' still runs its inference callable; leaving it behind",
                                   model_name)
            if model.shm_prefix:
                remove_segments(f"{model.shm_prefix}-")

    def idle(self) -> bool:
        """Whether no handler serves a batch (no callable running, no stream open)."""
        return all(handler.idle() for model in self.models.all() for handler in model.handlers)

    def hung(self, now: float) -> List[Tuple[str, int, Instance, float, float]]:
        """``(model, instance number, instance, seconds busy, hang_timeout_s)`` of every instance
        whose oldest batch has run past its model's ``ModelConfig.hang_timeout_s``, at `now`."""
        found = []
        for model in self.models.all():
            name = model.name
            limit = getattr(model.declaration.context.config, "hang_timeout_s", None)
            if limit is None:
                continue
            for index, handler in enumerate(model.handlers):
                busy = handler.busy_for(now)
                if busy > limit:
                    found.append((name, index, handler, busy, limit))
        return found

    def longest_queue_delay_s(self) -> float:
        """The longest time a model's batcher may hold a request while an instance is free
        (``max_queue_delay_microseconds``): past it, a queued request reaches a worker."""
        delays = [getattr(model.declaration.context.config.batcher, "max_queue_delay_microseconds", 0) or 0
                  for model in self.models.all()]
        return max(delays, default=0) / 1e6

    def keeps_sequences(self) -> bool:
        """Whether some model serves sequences: a stop does not refuse their later requests, so
        it cannot end as soon as the workers are idle."""
        return any(isinstance(model.declaration.context.config.batcher, SequenceBatcher)
                   for model in self.models.all())

    def refused_at_stop(self) -> List[str]:
        """The names a stop reloads as refusing models (`pytriton.ipc.stopping`): every bound name
        but those with sequences (the later requests of a sequence begun are answered) and the
        ensembles (each step of theirs refuses)."""
        names = []
        for name in self.names():
            declaration = self.models.get(name).declaration
            if declaration.ensemble is None and not isinstance(declaration.context.config.batcher, SequenceBatcher):
                names.append(name)
        return names

    def relays(self) -> bool:
        """Whether some model's proxies relay (decoupled models, async callables): their answers
        travel after Triton's `execute` returned, so Triton's count of requests in flight misses them."""
        return any(model.declaration.context.config.decoupled or any(model.declaration.asynchronous)
                   for model in self.models.all())

    def end_streams(self) -> None:
        """Cut open streams short, so the server can unload decoupled models without waiting for them."""
        for model in self.models.all():
            for handler in model.handlers:
                handler.end_streams()

    def stop_handlers(self, timeout_s: float = 5.0) -> None:
        """Stop every handler, each given `timeout_s` to finish its callable (0: a stop at once,
        the callables still running left behind), then the ZeroMQ context unless a callable still runs.

        The context's end is waited for at most `_ZMQ_TERM_S`: a handler whose construction a
        signal cut short (SIGTERM inside `start`, `TerminationScope`) can leave a socket that no
        one closes, and terminating a context waits for every socket (seen: 1 stop in 30 under
        SIGTERM during a `bind` hung there for good). Such a context is left to the process's end.
        """
        stuck = [h for model in self.models.all() for h in model.handlers if not h.stop(timeout_s)]
        if self._zmq is not None and not stuck:
            ending = threading.Thread(target=self._zmq.destroy, kwargs={"linger": 0}, name="pytriton-zmq-term",
                                      daemon=True)
            ending.start()
            ending.join(_ZMQ_TERM_S)
            if ending.is_alive():
                logger.debug("the worker handlers' ZeroMQ context did not end within %.0f s; left behind", _ZMQ_TERM_S)
        elif stuck:
            logger.warning("%d handler(s) still run an inference callable; leaving them behind", len(stuck))
        self._zmq = None


class SignalWatch:
    """Records SIGINT and SIGTERM while it is entered (from the main thread only).

    The handlers only record the signal and set `wake`; the previous handlers come back on exit.
    Held across a whole ``serve()``, stop included, so that a second signal during the drain is
    seen (`repeated`) instead of reaching Python's default handlers half-way through a cleanup.
    """

    def __init__(self, wake: threading.Event, on_repeat: Optional[Callable[[], None]] = None) -> None:
        self._wake = wake
        self._on_repeat = on_repeat
        self.received: List[int] = []
        self._previous: Dict[int, Any] = {}

    def _record(self, signum: int, _frame: Any) -> None:
        self.received.append(signum)
        self._wake.set()
        if len(self.received) > 1 and self._on_repeat is not None:
            self._on_repeat()

    @property
    def first(self) -> Optional[int]:
        return self.received[0] if self.received else None

    def __enter__(self) -> SignalWatch:
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGINT, signal.SIGTERM):
                self._previous[signum] = signal.signal(signum, self._record)
        return self

    def __exit__(self, *exc_info: Any) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()


class TerminationScope:
    """Inside ``with Triton()``, SIGTERM ends the script the way Ctrl+C does: an exception from the
    line the script was running, so the ``with`` block stops the server and cleans up.

    Python's default for SIGTERM kills the process at once, leaving the server, its stubs and their
    shared memory behind (and a script running as PID 1 ignores the signal altogether). So, from
    the main thread and where the script has not set a SIGTERM handler of its own, a handler
    raises ``SystemExit(143)`` (128 + 15: the exit status of a process ended by SIGTERM) wherever
    the script is: between two `bind` calls, in its own code before `serve()`. During pytriton's
    own waits (`run()`, a `bind`'s load, `serve()`), `SignalWatch` takes the signal instead and
    stops cleanly from there. SIGINT keeps Python's behaviour: ``KeyboardInterrupt``.
    """

    EXIT_STATUS = 128 + signal.SIGTERM

    def __init__(self) -> None:
        self._installed = False

    @staticmethod
    def _terminate(signum: int, _frame: Any) -> None:
        raise SystemExit(TerminationScope.EXIT_STATUS)

    def enter(self) -> None:
        if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) in (
                signal.SIG_DFL, None):
            signal.signal(signal.SIGTERM, self._terminate)
            self._installed = True

    def exit(self) -> None:
        if self._installed and threading.current_thread() is threading.main_thread():
            if signal.getsignal(signal.SIGTERM) == self._terminate:
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
            self._installed = False


def block_until_signal(
    is_alive: Callable[[], bool], wake: threading.Event, period_s: float, watch: Optional[SignalWatch] = None
) -> Optional[int]:
    """Wait until SIGINT or SIGTERM arrives or `is_alive` turns false; the signal, or None.

    With `watch` given (already entered), its handlers are used and stay installed; otherwise
    handlers are installed for the wait only.
    """
    if watch is None:
        with SignalWatch(wake) as own:
            return block_until_signal(is_alive, wake, period_s, own)
    while not watch.received and is_alive():
        wake.wait(period_s)
    return watch.first
