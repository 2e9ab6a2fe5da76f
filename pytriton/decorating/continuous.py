"""``@continuous``: marks a step function for continuous batching (`pytriton.worker.continuous`).

A decorator in name only: it wraps nothing and changes no argument. It tells ``bind`` that the
callable is a step over the streams active now, so the instance is served by the continuous
loop, and pytriton's backend sends it new streams between steps.
"""

from __future__ import annotations

from typing import Any, Callable, List, Optional, Union, overload

from pytriton.worker.continuous import ContinuousStep, Stream, is_continuous

__all__ = ["ContinuousStep", "Stream", "continuous", "is_continuous"]

StepFunction = Callable[[List[Stream]], Any]


@overload
def continuous(function: StepFunction) -> ContinuousStep: ...


@overload
def continuous(function: None = None, *, max_steps: Optional[int] = None) -> Callable[[StepFunction], ContinuousStep]:
    ...


def continuous(function: Optional[StepFunction] = None, *,
               max_steps: Optional[int] = None) -> Union[ContinuousStep, Callable[[StepFunction], ContinuousStep]]:
    """Serve `function` with continuous batching: one call per step over the streams active now.

    ``function(streams)`` receives the list of `Stream` objects running now (those that joined since
    the last step included, at most ``ModelConfig.max_batch_size``) and returns one entry per
    stream, in the list's order: a mapping of output name to array (the stream's piece at this
    step, with the request's batch axis, as a plain callable answers a request) or None (no piece
    this step). Or it returns one mapping of output name to array whose rows are the streams'
    pieces, one row per stream in the list's order: the shape a batched forward pass ends in
    (next tokens of shape ``(len(streams), 1)``), sent as it is, which costs less than a mapping
    per stream at every step. A stream keeps its own `Stream.state` across steps;
    `Stream.finish` makes this step's piece its last, `Stream.fail` ends it with an error. It may
    be a coroutine function.

    Bind it to a decoupled model on pytriton's backend:
    ``triton.bind(..., infer_func=step, config=ModelConfig(max_batch_size=32, decoupled=True))``.

    Args:
        function: the step function (when used as ``@continuous``).
        max_steps: end every stream after this many steps (a stop condition of pytriton's; None:
            only the function ends its streams).
    """
    if function is not None:
        return ContinuousStep(function, max_steps)
    return lambda wrapped: ContinuousStep(wrapped, max_steps)
