"""Ending the requests a dead model instance left unanswered, instead of waiting for the timeout.

Triton 2.51 never answers a relayed request (to an async callable or a decoupled model) whose
stub died; pytriton's server then names such requests in the model's configuration when it
restarts the instance (`pytriton.ipc.lost`; the notices' format: `pytriton.client_contract`). A
client that has waited `LOOK_AFTER_S` on a relayed request looks at that configuration every
`LOOK_EVERY_S` (one look serves all of the client's requests) and, finding its request's id,
ends the request with `PyTritonClientRequestLostError`. Requests to other models are answered by
Triton itself after such a death and are never looked for. Every request of these clients
carries an id unique to the client (`RequestIds`), so one client's notice never ends another's
request.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import secrets
import time
from collections.abc import Awaitable, Iterator
from typing import Any, Callable, TypeVar

from pytriton.client.exceptions import PyTritonClientError, PyTritonClientRequestLostError
from pytriton.client.model_config import ClientModelConfig
from pytriton.client_contract import PARAM_RELAYED, lost_message, notices_of

_T = TypeVar("_T")

LOOK_AFTER_S = 1.0
"""How long a relayed request is waited for before the client first looks for a notice."""
LOOK_EVERY_S = 0.5
"""How often the client looks again while a relayed request stays unanswered."""
LOOK_TIMEOUT_S = 1.0
"""The time limit of one look (the model is unloaded for a moment while it restarts)."""


def is_relayed(config: ClientModelConfig) -> bool:
    """Whether the model answers through the relay (decoupled, or an async callable), whose
    requests a dead instance leaves unanswered."""
    return config.decoupled or config.backend_parameters.get(PARAM_RELAYED) == "1"


class RequestIds:
    """Request ids unique to one client: a random prefix and a counter (``"3f9a0c1e-0"``, ...)."""

    def __init__(self) -> None:
        self._prefix = secrets.token_hex(4)
        self._numbers = itertools.count()

    def __call__(self) -> str:
        return f"{self._prefix}-{next(self._numbers)}"


class Lookout:
    """One client's view of its model's notices of lost requests, refreshed at most every `LOOK_EVERY_S`.

    Args:
        model_name: the model, for messages.
    """

    def __init__(self, model_name: str) -> None:
        self.model_name = model_name
        self._notices: list[dict[str, Any]] = []
        self._looked = -math.inf

    def check(self, request_id: str, read: Callable[[float], ClientModelConfig]) -> None:
        """Read the notices if due (`read` fetches the configuration within a time limit) and
        raise `PyTritonClientRequestLostError` when one names `request_id`."""
        if self._due():
            try:
                self._take(read(LOOK_TIMEOUT_S))
            except PyTritonClientError:
                self._take(None)  # the model is away while it restarts: look again later
        self._raise_if_lost(request_id)

    async def check_async(self, request_id: str, read: Callable[[float], Awaitable[ClientModelConfig]]) -> None:
        """`check` for the asyncio clients (`read` is awaited)."""
        if self._due():
            try:
                self._take(await read(LOOK_TIMEOUT_S))
            except PyTritonClientError:
                self._take(None)
        self._raise_if_lost(request_id)

    def _due(self) -> bool:
        return time.monotonic() - self._looked >= LOOK_EVERY_S

    def _take(self, config: ClientModelConfig | None) -> None:
        """The notices of a freshly read configuration (None: it could not be read)."""
        self._looked = time.monotonic()
        if config is not None:
            self._notices = notices_of(config.backend_parameters)

    def _raise_if_lost(self, request_id: str) -> None:
        message = lost_message(self.model_name, request_id, self._notices)
        if message is not None:
            raise PyTritonClientRequestLostError(message)


async def watched(call: Awaitable[_T], look: Callable[[], Awaitable[None]], timeout_s: float) -> _T:
    """Await `call` (an asyncio request with its own time limit `timeout_s`), awaiting `look`
    between slices of the wait; when `look` raises, `call` is cancelled and the error goes on."""
    task = asyncio.ensure_future(call)
    try:
        for wait_s in wait_slices(timeout_s):
            done, _ = await asyncio.wait({task}, timeout=wait_s)
            if done:
                break
            await look()
        return await task  # done, or at its deadline: its own time limit ends it
    finally:
        if not task.done():
            task.cancel()


def wait_slices(timeout_s: float) -> Iterator[float]:
    """How long each wait of a watched request lasts: `LOOK_AFTER_S` first, then `LOOK_EVERY_S`,
    the last one cut to the deadline `timeout_s` from now; between two, the caller looks."""
    deadline = time.monotonic() + timeout_s
    step = LOOK_AFTER_S
    while (left := deadline - time.monotonic()) > 0:
        yield min(step, left)
        step = LOOK_EVERY_S
