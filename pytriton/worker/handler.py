"""One handler per model instance: the sockets, the loop that serves them, and its thread.

`InstanceHandler` is what the bindings start for each callable of a model (in the user's
process; `pytriton.worker.process_instance` runs one in a forked child). It builds the
instance's sockets (`endpoint`), the steps every batch goes through (`batches`) and the loop
that fits the callable: `blocking` for plain functions and generators, `asynchronous` for
coroutine and async generator functions, `continuous` for a ``@continuous`` step function, and
runs that loop on a thread of its own. Both kinds
of instance offer the `Instance` interface.
"""

from __future__ import annotations

import inspect
import logging
import sys
import threading
import traceback
import warnings
from typing import Any, Callable, Optional, Sequence, Union

import zmq

from pytriton.exceptions import PyTritonModelConfigError
from pytriton.ipc import protocol
from pytriton.metrics import Registry
from pytriton.worker.asynchronous import AsyncLoop
from pytriton.worker.batches import BatchCalls
from pytriton.worker.blocking import BlockingLoop, StampLog, stamps_folder
from pytriton.worker.continuous import ContinuousLoop, is_continuous
from pytriton.worker.endpoint import HandlerEndpoint
from pytriton.worker.instance import BusySince, Instance, InstanceSpec
from pytriton.worker.measures import Measures

logger = logging.getLogger("pytriton.worker")

__all__ = ["Instance", "InstanceHandler", "InstanceSpec", "check_callables", "forgotten_decorator", "is_async_callable",
           "is_generator_callable"]


def is_async_callable(func: Callable[..., Any]) -> bool:
    """Whether `func` is a coroutine function or an async generator function (seen through
    `wrapt` decorators, and on an object's ``__call__``)."""
    for candidate in (func, getattr(func, "__call__", None)):  # noqa: B004 - the method, not callable()
        if inspect.iscoroutinefunction(candidate) or inspect.isasyncgenfunction(candidate):
            return True
    return False


def is_generator_callable(func: Callable[..., Any]) -> bool:
    """Whether `func` is a generator or async generator function (seen like `is_async_callable`)."""
    for candidate in (func, getattr(func, "__call__", None)):  # noqa: B004
        if inspect.isgeneratorfunction(candidate) or inspect.isasyncgenfunction(candidate):
            return True
    return False


def forgotten_decorator(func: Callable[..., Any], input_names: Sequence[str]) -> Optional[str]:
    """Why `func` looks like a callable that lost its ``@batch`` (or ``@sample``), or None.

    Without a decorator the worker calls ``func(requests)`` with the list of requests; a function
    whose parameters are named after the model's inputs (``def scale(values, factor)``) was
    written for the keyword arrays that ``@batch`` passes, and would fail on every request with
    a ``TypeError`` that names neither. A callable with any decorator (``__wrapped__``), on
    itself or on an object's ``__call__`` (a class whose ``__call__`` carries ``@batch``), is
    left alone: its wrapper decides what the function receives.
    """
    if any(hasattr(c, "__wrapped__") for c in (func, getattr(func, "__call__", None))):  # noqa: B004
        return None
    try:
        parameters = inspect.signature(func).parameters.values()
    except (TypeError, ValueError):  # a builtin or an extension type: nothing to read
        return None
    named = [p.name for p in parameters if p.name in input_names and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    if not named:
        return None
    return (f"the inference callable {getattr(func, '__name__', type(func).__name__)!r} has no decorator, yet its "
            f"parameters {named} are named after the model's inputs: without a decorator it receives the list of "
            "requests as its only argument. Did you forget @batch (keyword arrays of the whole batch) or @sample "
            "(one request at a time)?")


def check_callables(model_name: str, funcs: Sequence[Callable[..., Any]], decoupled: bool,
                    input_names: Sequence[str]) -> None:
    """The checks `bind` makes of the callables: refuse a generator on a model that is not
    decoupled; warn (``UserWarning``, at the caller of ``bind``) of a forgotten decorator.

    Raises:
        PyTritonModelConfigError: a generator callable on a model that is not decoupled.
    """
    if any(is_generator_callable(f) for f in funcs) and not decoupled:
        raise PyTritonModelConfigError(
            f"model '{model_name}': the inference callable is a generator, which streams responses; "
            "bind it with config=ModelConfig(decoupled=True)"
        )
    hint = next((h for h in (forgotten_decorator(f, input_names) for f in funcs) if h), None)
    if hint:
        warnings.warn(f"model '{model_name}': {hint}", UserWarning, stacklevel=4)  # here, declare, bind, caller


class InstanceHandler:
    """Serves one model instance (`InstanceSpec`) with its inference callable, in this process.

    Args:
        spec: the instance: its model, callable, endpoint, number, segments and kind.
        zmq_context: the process's ZeroMQ context.
        on_unrecoverable: called (from the handler's thread) after a callable raised
            `PyTritonUnrecoverableError`, before its requesters get their errors.
        worker_restarts: for a process instance, how many of its worker processes died before
            this one (a metric, `pytriton.worker.measures`).
        busy_since: where the handler keeps the start of the oldest batch it serves (given by the
            parent of a process instance, which reads it; a fresh one by default).

    Raises:
        PyTritonModelConfigError: ``isolate_failures`` or ``execution_timeout_s`` asked of an
            async callable (they apply to plain callables only).
    """

    def __init__(
        self,
        spec: InstanceSpec,
        *,
        zmq_context: zmq.Context[zmq.Socket[bytes]],
        on_unrecoverable: Callable[[str], None],
        worker_restarts: int = 0,
        busy_since: Optional[BusySince] = None,
    ) -> None:
        context, instance = spec.context, spec.instance
        self._stop = threading.Event()
        self._busy_since = busy_since if busy_since is not None else BusySince()
        self._ending_streams = threading.Event()
        self._measures = Measures(Registry(context.model_name, context.model_version, instance), worker_restarts)
        self._calls = BatchCalls(spec, self._stop, self._measures)
        self._endpoint = HandlerEndpoint(zmq_context, spec.endpoint, instance, context.model_name,
                                         on_proxy_replaced=self._proxy_replaced,
                                         metrics_report=self._measures.registry.report,
                                         arena_stem=protocol.segment_name(spec.shm_prefix, instance, "in", 0)[:-1])
        self._loop: Union[BlockingLoop, AsyncLoop, ContinuousLoop]
        if is_continuous(spec.infer_func):
            self._loop = ContinuousLoop(self._endpoint, self._calls, step=spec.infer_func,
                                        capacity=context.config.max_batch_size, stop=self._stop,
                                        ending_streams=self._ending_streams, on_unrecoverable=on_unrecoverable,
                                        busy_since=self._busy_since)
        elif spec.asynchronous:
            self._loop = AsyncLoop(self._endpoint, self._calls, stop=self._stop, ending_streams=self._ending_streams,
                                   on_unrecoverable=on_unrecoverable, busy_since=self._busy_since)
        else:
            folder = stamps_folder()
            decoupled = self._calls.decoupled
            self._loop = BlockingLoop(
                self._endpoint, self._calls, spec=spec, use_arenas=spec.pipelined and not decoupled,
                stop=self._stop, ending_streams=self._ending_streams, on_unrecoverable=on_unrecoverable,
                stamp_log=StampLog(folder, context.model_name, instance) if folder and not decoupled else None,
                busy_since=self._busy_since,
            )
        self._released = False
        self._thread = threading.Thread(target=self._loop.run, name=f"pytriton-{context.model_name}-{instance}",
                                        daemon=True)

    @property
    def registry(self) -> Registry:
        """The instance's metric registry: what it reports on Triton's metrics port."""
        return self._measures.registry

    @property
    def proxy_pid(self) -> Optional[int]:
        """The pid of the stub process whose proxy greeted last (None before the first)."""
        return self._endpoint.proxy_pid

    def _proxy_replaced(self) -> None:
        # A new stub replaces a dead one and reuses its segment names: drop the old mappings.
        self._loop.reader.close()
        self._measures.stub_replaced()

    def launch(self) -> None:
        """Start serving (at once: a thread starts)."""
        if self._thread.ident is None:
            self._thread.start()

    def start(self) -> None:
        self.launch()

    def is_serving(self) -> bool:
        """Whether the handler's thread still runs (it ends only on stop)."""
        return self._thread.is_alive()

    def idle(self) -> bool:
        """Whether no batch is being served: no callable running, no stream open."""
        return self._busy_since.idle()

    def busy_for(self, now: float) -> float:
        """How long the oldest batch being served has been at it (0.0 when idle), at `now`
        (`time.monotonic`)."""
        return self._busy_since.busy_for(now)

    def stuck_stack(self) -> str:
        """Where the handler's thread is now (and, for an async callable, where its oldest batch
        waits): for the log of a hung callable."""
        frames = sys._current_frames().get(self._thread.ident or -1)
        text = "".join(traceback.format_stack(frames)) if frames is not None else ""
        if isinstance(self._loop, AsyncLoop):
            text += self._loop.oldest_task_stack()
        return text or "(the handler's thread is not running)"

    def free_stuck(self) -> bool:
        """Free a hung callable: impossible for a thread of this process (False)."""
        return False

    def end_streams(self) -> None:
        """Cut the streams in flight short (the server is stopping): each gets an error and its end.

        Triton does not unload a decoupled model while a stream is open, so a stop would otherwise
        wait for every generator to finish on its own.
        """
        self._ending_streams.set()

    def stop(self, timeout_s: float = 5.0) -> bool:
        """Stop serving and release the sockets and shared memory.

        Returns:
            False when the thread is still inside the callable after `timeout_s`.
        """
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)
        if self._thread.is_alive():
            return False
        if not self._released:
            self._released = True
            self._endpoint.close()
            self._loop.close()
            self._calls.close()
        return True
