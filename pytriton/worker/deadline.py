"""Deadlines that travel with requests: the ones that passed are answered without the callable.

pytriton's clients send their inference timeout as an absolute deadline (the request parameter
`pytriton.ipc.protocol.DEADLINE_PARAMETER`). A request that waited in Triton's queue past it has
no one waiting for its answer any more; computing it would only delay the requests behind it.
Pure functions: the handler decides what to do with the indices.
"""

from __future__ import annotations

import json
import time
from typing import List, Sequence

from pytriton.ipc.protocol import DEADLINE_PARAMETER
from pytriton.worker.request import Request


def pop_expired(requests: Sequence[Request], now_s: float) -> List[int]:
    """Indices of the requests whose deadline passed by `now_s` (Unix seconds).

    The deadline parameter is removed from every request's parameters, so the callable sees only
    the parameters its client chose, and kept on the request for `Request.is_cancelled`. A value
    that is not a number is ignored (not pytriton's).
    """
    expired = []
    now_ms = now_s * 1000
    for index, request in enumerate(requests):
        deadline = request.parameters.pop(DEADLINE_PARAMETER, None)
        if isinstance(deadline, (int, float)) and not isinstance(deadline, bool):
            request._deadline_ms = deadline  # past it, request.is_cancelled() says True: nobody waits
            if deadline < now_ms:
                expired.append(index)
    return expired


def only_live_deadlines(parameters: Sequence[str]) -> bool:
    """Whether a batch's request parameters (JSON text per request, "" for none) hold nothing but
    pytriton's deadlines, none of them passed: what pytriton's own clients send. Such a batch
    needs no request objects (`pytriton.worker.whole`); any other parameter, or a passed
    deadline, goes the general way, which hands parameters over and answers the expired."""
    now_ms = time.time() * 1000
    for text in parameters:
        if not text:
            continue
        try:
            values = json.loads(text)
        except ValueError:
            return False
        if type(values) is not dict or len(values) != 1:
            return False
        deadline = values.get(DEADLINE_PARAMETER)
        if not isinstance(deadline, (int, float)) or isinstance(deadline, bool) or deadline < now_ms:
            return False
    return True


def expired_message(model_name: str) -> str:
    return (f"Model '{model_name}': the request's deadline (its client's inference timeout) passed while it "
            "waited in the server's queue; it was not computed")
