"""`request.is_cancelled()` while the callable runs: the proxy's `Cancel` messages, read on demand.

While a batch takes longer than a tenth of a second, the proxy looks whether its requests were
cancelled by their clients (a closed connection, a cancelled gRPC call) and sends the worker
their positions (`protocol.Cancel`). Nobody reads the channel while the handler thread runs the
callable, so the callable's own question reads it: `CancelProbe.is_cancelled` asks the handler
for what arrived (at most every `_READ_EVERY_S`, so a loop may ask as often as it likes) and
keeps any other message for later. One probe per handler: a handler serves one batch at a time.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Optional, Sequence, Set, Tuple

_READ_EVERY_S = 0.01

Reader = Callable[[], Optional[Tuple[int, ...]]]
"""Reads the channel now: the positions of the current batch cancelled so far (``()`` for all),
or None when nothing new arrived."""


class CancelProbe:
    """What the requests of the batch being served learn about their cancellation."""

    __slots__ = ("requests", "_reader", "_cancelled", "_all", "_next_read")

    def __init__(self) -> None:
        self.requests: Sequence[Any] = ()
        self._reader: Optional[Reader] = None
        self._cancelled: Set[int] = set()
        self._all = False
        self._next_read = 0.0

    def begin(self, requests: Sequence[Any], reader: Optional[Reader]) -> None:
        """A new batch: its requests, and how to read its cancellations (None: never learnt)."""
        self.requests = requests
        self._reader = reader
        self._cancelled = set()
        self._all = False
        self._next_read = 0.0

    def end(self) -> None:
        """The batch is answered: let go of its requests, whose arrays may view shared memory
        that the handler unmaps once idle."""
        self.begin((), None)

    def is_cancelled(self, request: Any) -> bool:
        """Whether `request` (or the request it was rebuilt from) was cancelled by its client."""
        self._refresh()
        if self._all:
            return True
        if not self._cancelled:
            return False
        position = self._position(request)
        return position is not None and position in self._cancelled

    def all_cancelled(self) -> bool:
        """Whether every request of the batch was cancelled: nobody waits for the answer."""
        self._refresh()
        return self._all or (bool(self.requests) and len(self._cancelled) >= len(self.requests))

    def _refresh(self) -> None:
        if self._reader is None or self._all:
            return
        now = time.monotonic()
        if now < self._next_read:
            return
        self._next_read = now + _READ_EVERY_S
        positions = self._reader()
        if positions is None:
            return
        if not positions:
            self._all = True
        self._cancelled.update(positions)

    def _position(self, request: Any) -> Optional[int]:
        while request is not None:
            for position, candidate in enumerate(self.requests):
                if candidate is request:
                    return position
            request = getattr(request, "_origin", None)  # rebuilt by a decorator from this one
        return None
