"""Failure isolation inside a batch: find the requests that make the callable raise.

One request step, between the handler and the callable, used only with
``ModelConfig(isolate_failures=True)``. When the callable raised on a batch, `isolate` calls it
again on halves of the batch, and on halves of each half that fails, down to single requests,
so that the requests that work get their answers and each failing request gets the error of
the smallest group it failed in. A pure function of the call it is given: no thread, no socket.

Cost: with k failing requests in a batch of n, each level of halving calls at most 2·k groups,
and there are about log2(n) levels, so at most about 2·k·log2(n) extra calls.
"""

from __future__ import annotations

from typing import Any, Callable, List, NamedTuple, Optional, Sequence, Tuple


class Group(NamedTuple):
    """Requests that share one outcome: the answer of the call that covered them, or an error."""

    indices: Sequence[int]
    answer: Any
    error: Optional[Exception]


def isolate(
    count: int,
    call: Callable[[Sequence[int]], Any],
    error: Exception,
    *,
    may_split: Callable[[Exception], bool],
    must_stop: Callable[[Exception], bool],
) -> List[Group]:
    """Split a failed batch of `count` requests until each failure is pinned to its requests.

    Args:
        count: the number of requests of the batch the callable failed on.
        call: runs the callable on the requests at these indices (in this order); returns its
            answer or raises.
        error: what the call on the whole batch raised.
        may_split: whether a group that raised this error is worth splitting further (an error
            that says nothing about the requests, such as a timeout, is not).
        must_stop: whether this error ends the search at once (an unrecoverable error: the
            callable must not be called again); the groups not yet tried keep the error of the
            group they came from.

    Returns:
        Groups covering every index once, in index order: each with the answer of the call that
        covered it, or the error of the smallest failing group it belongs to.
    """
    if count <= 1 or not may_split(error) or must_stop(error):
        return [Group(tuple(range(count)), None, error)]
    done: List[Group] = []
    # Depth first, left half first, so the groups come out in index order. Each entry carries the
    # error of the failed group it was split from, which it keeps if the search stops before it.
    pending: List[Tuple[Sequence[int], Exception]] = []
    _push_halves(pending, tuple(range(count)), error)
    stopped = False
    while pending:
        indices, inherited = pending.pop()
        if stopped:
            done.append(Group(indices, None, inherited))
            continue
        try:
            done.append(Group(indices, call(indices), None))
            continue
        except Exception as exc:  # noqa: BLE001 - the callable's error is the answer for this group
            failure = exc
        if must_stop(failure):
            stopped = True
            done.append(Group(indices, None, failure))
        elif len(indices) > 1 and may_split(failure):
            _push_halves(pending, indices, failure)
        else:
            done.append(Group(indices, None, failure))
    return done


def _push_halves(pending: List[Tuple[Sequence[int], Exception]], indices: Sequence[int], error: Exception) -> None:
    middle = (len(indices) + 1) // 2
    pending.append((indices[middle:], error))  # popped second
    pending.append((indices[:middle], error))  # popped first
