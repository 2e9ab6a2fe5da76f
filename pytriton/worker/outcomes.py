"""What a batch's call comes to, as the worker's steps hand it on: the types they share.

Step of the request flow: none of its own. `pytriton.worker.batches` (a batch in, the call) makes
these, `pytriton.worker.responses` (a batch out) reads them, the loops (`pytriton.worker.blocking`,
`pytriton.worker.asynchronous`, `pytriton.worker.continuous`) pass them along, and the decorators
(`pytriton.decorating.shaping`) build the whole-batch ones; so they live apart from all of them.

- `Expected`: what each request's answer is checked against (its batch size, the outputs it asked for);
- `Failure`: an error for the requesters of a batch, in place of their responses;
- `WholeOutputs`: a ``@batch`` answer as each output of the whole batch in one array;
- `Packed`: a batch's answer packed for the wire, nothing left to check;
- `Running`: an outcome that goes on after the call returned (a generator or a coroutine),
  which the loop runs to its end;
- `WholeBatch`: a plain ``@batch`` callable taken apart for the whole-batch lane.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, NamedTuple, Optional, Tuple

import numpy as np

from pytriton.ipc import protocol
from pytriton.worker.request import BatchResponses


class Failure:
    """An error meant for the requesters of a batch, in place of their responses.

    `code` is the `protocol.ErrorCode` it goes back with (INTERNAL unless the request was wrong).
    """

    __slots__ = ("message", "unrecoverable", "code")

    def __init__(self, message: str, unrecoverable: bool = False, code: int = protocol.ErrorCode.INTERNAL) -> None:
        self.message = message
        self.unrecoverable = unrecoverable
        self.code = code


def bad_request(message: str) -> Failure:
    """A `Failure` that says the request was wrong (Triton's INVALID_ARG: HTTP 400), not the model."""
    return Failure(message, code=protocol.ErrorCode.INVALID_ARG)


class Expected(List[Optional[int]]):
    """Per request of a batch, its batch size (for `strict` shape checks; else None), and in
    `requested` the outputs each request asked for when some asked for fewer than all."""

    def __init__(self, sizes: List[Optional[int]], requested: Tuple[Tuple[str, ...], ...] = ()) -> None:
        super().__init__(sizes)
        self.requested = requested

    def asked(self, index: int) -> Optional[Tuple[str, ...]]:
        """The outputs request `index` asked for, or None for all of them."""
        return (self.requested[index] or None) if self.requested else None


class WholeOutputs(NamedTuple):
    """The answer of the whole-batch path: each output of the batch as one array, and each
    request's row count (what ``@batch`` would have split them by)."""

    outputs: Dict[str, np.ndarray]
    rows: List[int]

    def responses(self) -> Any:
        """The answer as ``@batch`` gives it through the general path: one response per request."""
        if len(self.rows) == 1:
            return [self.outputs]
        return BatchResponses(self.outputs, self.rows)


class Packed(NamedTuple):
    """A batch's answer packed for the wire: the `BatchResult` and its payload. The whole-batch
    lane packs what it checked itself (`pytriton.worker.responses.batch_result` then has nothing
    left to do)."""

    result: protocol.BatchResult
    payload: List[Any]


class Running(NamedTuple):
    """What a call left running (a generator, a coroutine or an async generator): the loop runs
    it to its end and sends its answers; `batch_sizes` is what they are checked against."""

    outcome: Any
    batch_sizes: Expected


class WholeBatch(NamedTuple):
    """A plain ``@batch`` callable taken apart for the whole-batch lane (`pytriton.worker.batches.WholeLane`),
    by the decorators' `pytriton.decorating.shaping.whole_batch`."""

    function: Callable[..., Any]
    """The function under ``@batch``: called with each input of the batch as one array, by name."""
    answer: Callable[[Any, List[int]], Any]
    """What ``@batch`` makes of the function's result, given each request's row count:
    `WholeOutputs`, or a generator or coroutine whose values it splits per request. Raises what
    ``@batch``'s checks raise."""
