"""Callables stuck past their model's ``ModelConfig.hang_timeout_s``: what is done about them.

The supervisor's loop calls `HangWatch.check` each round. Each instance reports when its oldest
batch began (`pytriton.worker.instance.BusySince`); a batch older than its model's limit is hung:

- in a worker process (``process_instances``), the process writes its threads' stacks and is
  killed, and a fresh one serves on;
- on a thread of the user's process nothing can free it: its stack is logged and the server is
  stopped at once (no drain waits for a call that never ends), so that readiness and liveness
  fail, `serve()` raises `PyTritonModelHangError` and an orchestrator restarts the process.
"""

from __future__ import annotations

import logging
import math
import time
from typing import Any, Callable, Dict, List, Tuple

from pytriton.exceptions import PyTritonModelHangError, PyTritonServerError

logger = logging.getLogger("pytriton.server")

FREE_WAIT_S = 5.0
"""How long a killed worker process has to be noticed before its instance is checked again."""

Hung = Tuple[str, int, Any, float, float]
"""``(model, instance number, instance, seconds busy, hang_timeout_s)`` (`ModelBindings.hung`)."""


class HangWatch:
    """Acts on hung callables (see the module docstring).

    Args:
        hung: the instances hung at a `time.monotonic` moment.
        hurry: called before the server is stopped for a hang: its stop waits for no drain.
        on_fatal: called with the error that stops the server.
    """

    def __init__(self, hung: Callable[[float], List[Hung]], hurry: Callable[[], None],
                 on_fatal: Callable[[PyTritonServerError], None]) -> None:
        self._hung = hung
        self._hurry = hurry
        self._on_fatal = on_fatal
        self._freed: Dict[Tuple[str, int], float] = {}  # a killed worker process is noticed within a moment
        self._stopping = False

    def check(self) -> None:
        if self._stopping:
            return
        now = time.monotonic()
        for name, index, handler, busy, limit in self._hung(now):
            if now - self._freed.get((name, index), -math.inf) < FREE_WAIT_S:
                continue
            where = handler.stuck_stack()
            if handler.free_stuck():
                self._freed[(name, index)] = now
                logger.error("Model '%s' instance %d: the inference callable has served one batch for %.1f s, past "
                             "ModelConfig.hang_timeout_s=%g; killing its worker process (a fresh one takes over) %s",
                             name, index, busy, limit, where)
                continue
            message = (f"Model '{name}' instance {index}: the inference callable has served one batch for "
                       f"{busy:.1f} s, past ModelConfig.hang_timeout_s={limit:g}, on a thread of this process "
                       "that nothing can free; stopping the server so that the process can be restarted")
            logger.error("%s. The callable's thread is here:\n%s", message, where)
            self._stopping = True
            self._hurry()
            self._on_fatal(PyTritonModelHangError(message))
            return
