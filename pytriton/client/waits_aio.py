"""Carrying out the readiness waits of `pytriton.client.readiness` through a client core.

`readiness_steps` and `server_steps` say what to ask next and when to give up, without I/O;
`drive_async` asks it. The asyncio driver and the blocking one are written once
(``build_backend/unasync.py`` writes the blocking module from the asyncio one), so they cannot differ.
"""

from __future__ import annotations

import asyncio  # unasync: import time
import contextlib
from collections.abc import Generator
from typing import Protocol

from pytriton.client.exceptions import PyTritonClientModelUnavailableError, PyTritonClientTimeoutError
from pytriton.client.readiness import Probe, ProbeOutcome, call_for, readiness_steps, server_steps
from pytriton.client.url import TritonUrl


class AsyncReadinessCalls(Protocol):
    """The calls of a core that the waits make (the client cores have them)."""

    url: TritonUrl

    async def is_server_live(self, timeout_s: float | None = None) -> bool: ...

    async def is_server_ready(self, timeout_s: float | None = None) -> bool: ...

    async def is_model_ready(self, model_name: str, model_version: str = "", timeout_s: float | None = None) -> bool:
        ...

    async def model_presence(self, model_name: str, timeout_s: float | None = None) -> bool | None: ...

    async def served_models(self, timeout_s: float | None = None) -> list[str] | None: ...


async def wait_until_server_ready_async(core: AsyncReadinessCalls, timeout_s: float,
                                        budget: str = "init_timeout_s") -> None:
    """Wait until the server is live and ready (see `server_steps`; `budget` names the setting
    `timeout_s` came from, for the notices).

    Raises:
        PyTritonClientTimeoutError: not live and ready within ``timeout_s``; says what was last seen.
        PyTritonClientModelUnavailableError: the server is stopping.
        PyTritonClientInferenceServerError: the server refused the check (a restricted health API).
    """
    await drive_async(core, server_steps(core.url, timeout_s, budget))


async def wait_until_ready_async(
    core: AsyncReadinessCalls, model_name: str, model_version: str, timeout_s: float, unknown_fails: bool = False,
    budget: str = "init_timeout_s",
) -> None:
    """Wait until the server and the model are ready (see `readiness_steps`).

    Args:
        core: the connection to poll through.
        model_name: the model to wait for.
        model_version: its version, ``""`` for the server's choice.
        timeout_s: the longest to wait.
        unknown_fails: give a model the server does not have at all a short grace, then fail.
        budget: the setting `timeout_s` came from, as the notices name it (``init_timeout_s``,
            or ``timeout_s`` for a timeout given to the wait).

    Raises:
        PyTritonClientTimeoutError: not ready within ``timeout_s``.
        PyTritonClientModelUnavailableError: with `unknown_fails`, the server has no such model;
            or the server is stopping.
    """
    steps = readiness_steps(core.url, model_name, model_version, timeout_s, unknown_fails, budget)
    await drive_async(core, steps, model_name, model_version)


async def drive_async(core: AsyncReadinessCalls, steps: Generator[Probe, ProbeOutcome, None], model_name: str = "",
                      model_version: str = "") -> None:
    """Carry out `steps` through `core`; a server not reachable yet answers "not ready"."""
    outcome: ProbeOutcome = None
    with contextlib.suppress(StopIteration):
        while True:
            probe = steps.send(outcome)
            outcome = None
            if probe.kind == "sleep":
                await asyncio.sleep(probe.timeout_s)
                continue
            name, args = call_for(probe, model_name, model_version)
            try:
                outcome = await getattr(core, name)(*args, timeout_s=probe.timeout_s)
            except (PyTritonClientTimeoutError, PyTritonClientModelUnavailableError) as exc:  # not reachable yet
                outcome = exc
