"""How a proxy waits for its worker's answer: a short, adaptive spin before it sleeps.

A thread that sleeps in ``recv`` and is woken by the worker's answer pays for the wake-up twice:
the worker's ``send`` must wake it (on a virtual machine, an inter-processor interrupt the
hypervisor handles: 15 us of the sender's time, measured on this project's 2-core machine) and
the woken thread starts on a cold core (another 20 to 30 us before it runs). An answer that
comes within a fraction of a millisecond is therefore cheaper to catch awake: `AnswerWait`
polls the socket without blocking for up to its window, giving the core to any other runnable
thread between two looks (``sched_yield``), and sleeps in ``recv`` only after that.

It spins only for a batch of one request whose model usually answers within the window (a
running average of the waits). A 10 ms model never spins, so the cores are not spent on answers
that are far off; and a batch of several requests means requests are queueing, so the cores are
busy with them and polling would only take a core from the work (measured at concurrency 16:
6 ms more CPU per 1,000 requests in the stub when it polled every batch).
The window is ``PYTRITON_PROXY_SPIN_US`` of the serving process (`SPIN_PARAMETER` carries it to
the proxy); 0 turns spinning off.
"""

from __future__ import annotations

import os
import time
from typing import Any, Optional, Tuple

from pytriton.ipc.channel import Channel

DEFAULT_SPIN_US = 200
_AVERAGE_WEIGHT = 1 / 8


class AnswerWait:
    """Waits for the next message on one channel, spinning first while that pays (see the module)."""

    def __init__(self, window_us: float) -> None:
        self._window_s = max(0.0, window_us) / 1e6
        self.typical_s = 0.0
        """Running average of how long answers took, from the batch's send (seconds)."""

    def receive(
        self, channel: Channel, requests: int = 1, since: Optional[float] = None
    ) -> Optional[Tuple[memoryview, memoryview]]:
        """The next message, as `Channel.receive` gives it (None: the receive timeout passed).

        Args:
            requests: how many requests the awaited batch holds (only a batch of one spins).
            since: when the awaited batch was sent (``time.perf_counter``), so that an answer
                waited for across several receive timeouts counts its whole wait; now if None.
        """
        started = time.perf_counter()
        since = started if since is None else since
        received = None
        if requests == 1 and self._window_s and self.typical_s < self._window_s:
            deadline = started + self._window_s
            while (received := channel.receive(wait=False)) is None and time.perf_counter() < deadline:
                os.sched_yield()
        if received is None:
            received = channel.receive()
        if received is not None:
            self.typical_s += (time.perf_counter() - since - self.typical_s) * _AVERAGE_WEIGHT
        return received


def spin_window_us(value: Any) -> float:
    """The spin window from the model parameter (the default when absent or unreadable)."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return float(DEFAULT_SPIN_US)
