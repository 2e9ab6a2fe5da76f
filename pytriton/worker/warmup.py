"""Warm-ups pytriton runs itself (`pytriton.repository.warmup.WarmupPlan.local`), before the model loads.

Triton's own warm-up sends one sample to every request of its batch; a warm-up whose batch rows
differ (a ``.npy`` file of rows, as the published PyTriton reads them) is run here instead: each
callable of the model is called `count` times with one request holding the rows, in the user's
process, before the handlers start (so process instances, forked then, inherit what it loaded).
A failure fails the `bind`, with the callable's error, as a failed Triton warm-up fails the load.
"""

from __future__ import annotations

import asyncio
import inspect
from typing import Any, Callable, Sequence

from pytriton.exceptions import PyTritonModelConfigError
from pytriton.repository.warmup import LocalWarmup
from pytriton.worker.context import TritonContext, reset_current_context, set_current_context
from pytriton.worker.continuous import ContinuousStep, warm_up
from pytriton.worker.request import Request, Requests


def run_local_warmups(context: TritonContext, infer_funcs: Sequence[Callable[..., Any]],
                      warmups: Sequence[LocalWarmup]) -> None:
    """Call each distinct callable with each warm-up, `count` times, in the warm-ups' order.

    Raises:
        PyTritonModelConfigError: a call raised; names the model, the warm-up and the error.
    """
    if not warmups:
        return
    token = set_current_context(context)  # decorators read the model's tensors from it
    try:
        callables = list({id(func): func for func in infer_funcs}.values())
        for warmup in warmups:
            for func in callables:
                for _ in range(warmup.count):
                    request = Request({name: array.copy() for name, array in warmup.inputs.items()})
                    try:
                        if isinstance(func, ContinuousStep):
                            warm_up(func, request)
                        else:
                            _finish(func(Requests([request])))
                    except Exception as exc:
                        raise PyTritonModelConfigError(
                            f"model '{context.model_name}': warm-up '{warmup.name}' failed: "
                            f"{type(exc).__name__}: {exc}"
                        ) from exc
    finally:
        reset_current_context(token)


def _finish(result: Any) -> None:
    """Run what the callable returned to its end: a coroutine, or a (async) generator's steps."""
    if inspect.iscoroutine(result):
        asyncio.run(result)
    elif inspect.isgenerator(result):
        for _ in result:
            pass
    elif inspect.isasyncgen(result):
        async def drain() -> None:
            async for _ in result:
                pass

        asyncio.run(drain())
