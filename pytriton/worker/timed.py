"""The execution timeout: run the callable on a thread the handler can give up on.

One request step, between the handler and the callable, used only with
``ModelConfig(execution_timeout_s=...)``; without it the handler calls the callable in its own
thread and nothing here runs. A thread inside the user's code cannot be killed, so a call that
does not return in time is abandoned: `TimedCaller` raises `ExecutionTimeout` to the handler,
leaves the stuck thread to finish (or not) on its own, and runs the next call on a fresh thread.
What an abandoned call returns later is dropped.
"""

from __future__ import annotations

import contextvars
import itertools
import logging
import queue
import threading
import time
from typing import Any, Callable, List, Optional, Tuple

from pytriton.worker.context import TritonContext, set_current_context

logger = logging.getLogger("pytriton.worker")

_STOP = object()
_SLICE_S = 0.1  # how often a wait looks at the handler's stop flag


class ExecutionTimeout(Exception):
    """The callable did not return within the model's ``execution_timeout_s``."""


class _Executor:
    """One thread that runs calls handed to it, one at a time."""

    def __init__(self, func: Callable[[Any], Any], context: TritonContext, name: str) -> None:
        self._func = func
        self._context = context
        self.inbox: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.outbox: queue.SimpleQueue[Tuple[bool, Any]] = queue.SimpleQueue()
        self.abandoned = False
        # Made on the handler's thread: the call sees what that thread set (such as the registry of
        # the instance's metrics, `pytriton.metrics`).
        inherited = contextvars.copy_context()
        self.thread = threading.Thread(target=inherited.run, args=(self._run,), name=name, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        set_current_context(self._context)  # decorators such as @batch read the model from it
        while True:
            argument = self.inbox.get()
            if argument is _STOP:
                return
            started = time.monotonic()
            try:
                outcome: Tuple[bool, Any] = (True, self._func(argument))
            except BaseException as exc:  # noqa: BLE001 - handed to the handler's thread, which raises it
                outcome = (False, exc)
            del argument  # the requests view the proxy's shared memory: hold them no longer than the call
            if self.abandoned:
                logger.warning("Model '%s': the call abandoned on thread %s returned after %.1f s; its result is "
                               "dropped", self._context.model_name, self.thread.name, time.monotonic() - started)
                return
            self.outbox.put(outcome)
            del outcome


class TimedCaller:
    """Calls `func` on a thread of its own and waits at most `timeout_s` for it to return.

    Args:
        func: the inference callable.
        timeout_s: how long one call may take.
        context: the model served (its name goes into errors and logs; the call's thread sets it
            as the current context, as the handler's thread does).
        instance: the model instance, for logs.
        stopping: set when the handler stops; a wait then gives up at once.
    """

    def __init__(
        self,
        func: Callable[[Any], Any],
        timeout_s: float,
        *,
        context: TritonContext,
        instance: int,
        stopping: threading.Event,
    ) -> None:
        self._func = func
        self._timeout_s = timeout_s
        self._context = context
        self._instance = instance
        self._stopping = stopping
        self._executor: Optional[_Executor] = None
        self._abandoned: List[_Executor] = []
        self._numbers = itertools.count()

    def __call__(self, argument: Any) -> Any:
        """What `func(argument)` returns or raises, unless it takes longer than the timeout.

        Raises:
            ExecutionTimeout: the call did not return in time (or the handler stopped meanwhile);
                it goes on in the background and its result is dropped.
        """
        executor = self._executor
        if executor is None or not executor.thread.is_alive():
            name = f"pytriton-{self._context.model_name}-{self._instance}-call-{next(self._numbers)}"
            executor = self._executor = _Executor(self._func, self._context, name)
        executor.inbox.put(argument)
        del argument
        deadline = time.monotonic() + self._timeout_s
        while True:
            left = deadline - time.monotonic()
            try:
                done, value = executor.outbox.get(timeout=max(0.0, min(left, _SLICE_S)))
                break
            except queue.Empty:
                if left <= _SLICE_S or self._stopping.is_set():
                    return self._abandon(executor, stopping=left > _SLICE_S)
        if done:
            return value
        raise value

    def _abandon(self, executor: _Executor, *, stopping: bool) -> Any:
        executor.abandoned = True
        executor.inbox.put(_STOP)  # ends the thread should the call ever return
        self._executor = None
        self._abandoned = [e for e in self._abandoned if e.thread.is_alive()]
        self._abandoned.append(executor)
        model, limit = self._context.model_name, self._timeout_s
        if stopping:
            logger.warning("Model '%s' instance %d: stopping while the inference callable runs; abandoning its "
                           "thread %s", model, self._instance, executor.thread.name)
            raise ExecutionTimeout(f"Model '{model}': the server is stopping; the call was abandoned")
        logger.warning(
            "Model '%s' instance %d: the inference callable did not return within %g s; abandoning its thread "
            "%s (%d abandoned and still running) and serving on a fresh one",
            model, self._instance, limit, executor.thread.name, len(self._abandoned),
        )
        raise ExecutionTimeout(
            f"Model '{model}': the inference callable did not return within {limit:g} s "
            "(ModelConfig.execution_timeout_s); the call was abandoned"
        )

    def close(self) -> None:
        """End the idle thread; abandoned ones end by themselves if their call ever returns."""
        if self._executor is not None:
            self._executor.inbox.put(_STOP)
            self._executor = None

    def abandoned_running(self) -> int:
        """How many abandoned calls are still running."""
        return sum(1 for e in self._abandoned if e.thread.is_alive())
