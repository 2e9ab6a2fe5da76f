"""Waiting until a server and a model are ready, as pure steps.

`readiness_steps` and `server_steps` say what to ask next and when to give up, without any
I/O; `call_for` names the core's call that answers a step. The drivers that carry them out
through a client core are in ``pytriton.client.waits_aio`` (and the blocking
``pytriton.client.waits`` generated from it).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Generator, Mapping
from typing import Any, List, Union

from pytriton.client.exceptions import (
    PyTritonClientModelUnavailableError,
    PyTritonClientTimeoutError,
)
from pytriton.client.url import TritonUrl

_LOGGER = logging.getLogger("pytriton.client.core")

#: Pause between readiness polls; short, because each poll is one cheap request.
READY_POLL_INTERVAL_S = 0.1

#: How long a model the server does not have at all may take to appear before a wait fails.
UNKNOWN_MODEL_GRACE_S = 3.0


@dataclasses.dataclass(frozen=True)
class Probe:
    """One step of the readiness wait, for a driver to carry out.

    Attributes:
        kind: ``"server"`` (is the server ready?), ``"model"`` (is the model ready?),
            ``"presence"`` (does the server know the model at all? True, False or None),
            ``"served"`` (the names of the models it has ready, or None) or ``"sleep"`` (pause
            before the next poll).
        timeout_s: the poll's time limit, or the pause.
    """

    kind: str
    timeout_s: float


#: What a driver sends back for a poll: its answer, or the "not ready" error it raised.
ProbeOutcome = Union[bool, List[str], PyTritonClientTimeoutError, PyTritonClientModelUnavailableError, None]


def readiness_steps(
    url: TritonUrl, model_name: str, model_version: str, timeout_s: float, unknown_fails: bool = False
) -> Generator[Probe, ProbeOutcome, None]:
    """The readiness wait without I/O: yields probes, receives their outcomes, ends when ready.

    Shared by the blocking and the asyncio drivers so the two waits cannot differ. Each poll's
    own time limit is the time left, so a server that accepts connections but never answers
    cannot stretch the wait past ``timeout_s``. An unreachable server, or a model the server
    has but has not loaded (yet), count as "not ready". With `unknown_fails` (a client's own wait
    before its first request), a model the server does not have at all, not even in its
    repository, is given `UNKNOWN_MODEL_GRACE_S` to appear (a serving script may be about to
    bind it), then the wait fails naming the models the server does serve; an explicit
    ``wait_for_model`` waits its whole time for a model another process may load later.

    Raises:
        PyTritonClientTimeoutError: not ready within ``timeout_s``; the message says what was
            last seen (server unreachable, server not ready, model not ready).
        PyTritonClientModelUnavailableError: the server answers but has no model of that name.
    """
    deadline = time.monotonic() + timeout_s
    state = "no answer from the server yet"
    absent_since: float | None = None
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        outcome = yield Probe("server", left)
        if outcome is True:
            outcome = yield Probe("model", max(deadline - time.monotonic(), 1e-3))
            if outcome is True:
                return
            if outcome is False:
                state = f"model {model_name!r} (version {model_version or 'default'}) is not ready"
                present = (yield Probe("presence", max(deadline - time.monotonic(), 1e-3))) if unknown_fails else None
                if present is False:
                    now = time.monotonic()
                    absent_since = now if absent_since is None else absent_since
                    if now - absent_since >= min(UNKNOWN_MODEL_GRACE_S, timeout_s / 2):
                        served = yield Probe("served", max(deadline - time.monotonic(), 1e-3))
                        raise PyTritonClientModelUnavailableError(
                            unknown_model_message(url, model_name, served if isinstance(served, list) else None)
                        )
                else:
                    absent_since = None
        elif outcome is False:
            state = "the server is not ready"
        if isinstance(outcome, Exception):
            state = str(outcome)
        _LOGGER.debug("Waiting for %s at %s: %s", model_name, url, state)
        yield Probe("sleep", max(0.0, min(READY_POLL_INTERVAL_S, deadline - time.monotonic())))
    raise PyTritonClientTimeoutError(
        f"Server at {url} and model {model_name!r} were not ready within {timeout_s:g} s; last seen: {state}"
    )


def presence_from_error(exc: BaseException) -> bool | None:
    """What a failed metadata request says of the model: False when the server has no model of
    that name (Triton: "... is not found"), True when it has one without a ready version
    ("... has no available versions"), None for anything else (unreachable, restricted)."""
    text = str(exc)
    if "is not found" in text:
        return False
    if "has no available versions" in text or "is not ready" in text:
        return True
    return None


def ready_names(index: Any) -> list[str] | None:
    """The sorted names of the READY models of a repository index, as HTTP or gRPC (JSON) gives it."""
    entries = index.get("models", []) if isinstance(index, Mapping) else index
    try:
        return sorted({str(entry["name"]) for entry in entries if entry.get("state") == "READY"})
    except (TypeError, KeyError, AttributeError):
        return None


def unknown_model_message(url: TritonUrl, model_name: str, served: list[str] | None) -> str:
    """The error for a model the server at `url` does not have."""
    if served is None:
        listing = ("the models it serves are listed by its repository API, which is restricted: pass the server's "
                   "access_token to see them")
    else:
        listing = "this server serves: " + (", ".join(served) if served else "no model at all")
    return f"model {model_name!r} is not served at {url}; {listing}"


def server_steps(url: TritonUrl, timeout_s: float) -> Generator[Probe, ProbeOutcome, None]:
    """The wait for a live and ready server without I/O, as `readiness_steps` is for a model:
    yields ``"live"``, ``"server"`` and ``"sleep"`` probes, receives their outcomes, ends when
    the server is live and ready; one that cannot be reached yet counts as not ready.

    Raises:
        PyTritonClientTimeoutError: not live and ready within ``timeout_s``; says what was last seen.
    """
    deadline = time.monotonic() + timeout_s
    seen = "no answer from the server yet"
    while True:
        left = max(deadline - time.monotonic(), 1e-3)
        live = yield Probe("live", left)
        if live is True:
            ready = yield Probe("server", max(deadline - time.monotonic(), 1e-3))
            if ready is True:
                return
            seen = str(ready) if isinstance(ready, Exception) else "the server is not ready"
        else:
            seen = str(live) if isinstance(live, Exception) else "the server is not live"
        if time.monotonic() + READY_POLL_INTERVAL_S > deadline:
            raise PyTritonClientTimeoutError(f"Server at {url} was not ready within {timeout_s:g} s; last seen: {seen}")
        yield Probe("sleep", READY_POLL_INTERVAL_S)


def call_for(probe: Probe, model_name: str, model_version: str) -> tuple[str, tuple[Any, ...]]:
    """The core's method name and arguments that answer `probe` (not a ``"sleep"``)."""
    if probe.kind == "live":
        return "is_server_live", ()
    if probe.kind == "server":
        return "is_server_ready", ()
    if probe.kind == "presence":
        return "model_presence", (model_name,)
    if probe.kind == "served":
        return "served_models", ()
    return "is_model_ready", (model_name, model_version)
