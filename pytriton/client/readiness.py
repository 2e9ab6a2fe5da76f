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
import weakref
from collections.abc import Generator, Mapping
from typing import Any, Callable, List, Union

from pytriton.client.exceptions import (
    PyTritonClientModelUnavailableError,
    PyTritonClientTimeoutError,
)
from pytriton.client.url import TritonUrl
from pytriton.client_contract import STOPPING_MODEL
from pytriton.notices import notice_logger

_LOGGER = logging.getLogger("pytriton.client.core")
_NOTICES = notice_logger("pytriton.client.wait")

#: Pause between readiness polls; short, because each poll is one cheap request.
READY_POLL_INTERVAL_S = 0.1

#: How long a model the server does not have at all may take to appear before a wait fails.
UNKNOWN_MODEL_GRACE_S = 3.0

#: How a pytriton serving script's start line begins (``pytriton.server.announce.serving_line``).
SERVING_LINE_START = "pytriton: serving ..."

#: How long a wait goes on in silence before it says what it waits for (a server started at the
#: same moment as the client is usually up by then), and how often it says it again.
WAIT_NOTICE_AFTER_S = 2.0
WAIT_NOTICE_EVERY_S = 30.0


@dataclasses.dataclass(frozen=True)
class Probe:
    """One step of the readiness wait, for a driver to carry out.

    Attributes:
        kind: ``"live"`` (is the server live?), ``"server"`` (is the server ready?), ``"model"``
            (is the model ready?), ``"presence"`` (does the server know the model at all? True,
            False or None), ``"stopping"`` (is it a pytriton server that stops? True when it has
            `STOPPING_MODEL`), ``"served"`` (the names of the models it has ready, or None) or
            ``"sleep"`` (pause before the next poll).
        timeout_s: the poll's time limit, or the pause.
    """

    kind: str
    timeout_s: float


#: What a driver sends back for a poll: its answer, or the "not ready" error it raised.
ProbeOutcome = Union[bool, List[str], PyTritonClientTimeoutError, PyTritonClientModelUnavailableError, None]


def readiness_steps(
    url: TritonUrl, model_name: str, model_version: str, timeout_s: float, unknown_fails: bool = False,
    budget: str = "init_timeout_s",
) -> Generator[Probe, ProbeOutcome, None]:
    """The readiness wait without I/O: yields probes, receives their outcomes, ends when ready.

    Shared by the blocking and the asyncio drivers so the two waits cannot differ. Each poll's
    own time limit is the time left, so a server that accepts connections but never answers
    cannot stretch the wait past ``timeout_s``. An unreachable server, or a model the server
    has but has not loaded (yet), count as "not ready". With `unknown_fails` (a client's own wait
    before its first request), a model the server does not have at all, not even in its
    repository, is given `UNKNOWN_MODEL_GRACE_S` to appear (a serving script may be about to
    bind it), then the wait fails naming the models the server does serve; an explicit
    ``wait_for_model`` waits its whole time for a model another process may load later. A server
    that reports not ready because it stops (a pytriton server draining: `STOPPING_MODEL`) ends
    the wait at once. `budget` names the setting `timeout_s` came from, for the notices.

    Raises:
        PyTritonClientTimeoutError: not ready within ``timeout_s``; the message says what was
            last seen (server unreachable, server not ready, model not ready).
        PyTritonClientModelUnavailableError: the server answers but has no model of that name,
            or it is stopping.
    """
    deadline = time.monotonic() + timeout_s
    state = "no answer from the server yet"
    absent_since: float | None = None
    notices = WaitNotices(url, f"the server and model {model_name!r}", timeout_s, budget)
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
            yield from _fail_if_stopping(url, deadline)
        if isinstance(outcome, Exception):
            state = str(outcome)
        _LOGGER.debug("Waiting for %s at %s: %s", model_name, url, state)
        notices.seen(outcome, state)
        yield Probe("sleep", max(0.0, min(READY_POLL_INTERVAL_S, deadline - time.monotonic())))
    raise PyTritonClientTimeoutError(
        f"Server at {url} and model {model_name!r} were not ready within {timeout_s:g} s; last seen: {state}"
    )


def _fail_if_stopping(url: TritonUrl, deadline: float) -> Generator[Probe, ProbeOutcome, None]:
    """The step after a "not ready": ask whether the server is a pytriton server that stops.

    Raises:
        PyTritonClientModelUnavailableError: it is; waiting longer would not make it ready.
    """
    if (yield Probe("stopping", max(min(deadline - time.monotonic(), 1.0), 1e-3))) is True:
        raise PyTritonClientModelUnavailableError(stopping_message(url))


def stopping_message(url: TritonUrl) -> str:
    """The error of a wait on a server that stops."""
    return (f"the server at {url} is stopping: it answers the requests it accepted and takes no new ones, and "
            "will not be ready again; send the requests to another replica or a restarted server")


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
    """The error for a model the server at `url` does not have.

    A pytriton server restricts its repository index (the list of models) to its access token,
    which a client in another process does not have by default; the serving script's start line
    (``pytriton.server.announce``) names every model it serves, so the message points there.
    """
    if served is None:
        listing = (f"the serving script names the models it serves in its start line ({SERVING_LINE_START!r} on "
                   "its stderr); this server lists them to clients only with its access token "
                   "(access_token=Triton.get_access_token()), as its repository API is restricted")
    else:
        listing = "this server serves: " + (", ".join(served) if served else "no model at all")
    return f"model {model_name!r} is not served at {url}; {listing}"


def server_steps(
    url: TritonUrl, timeout_s: float, budget: str = "init_timeout_s"
) -> Generator[Probe, ProbeOutcome, None]:
    """The wait for a live and ready server without I/O, as `readiness_steps` is for a model:
    yields ``"live"``, ``"server"``, ``"stopping"`` and ``"sleep"`` probes, receives their
    outcomes, ends when the server is live and ready; one that cannot be reached yet counts as
    not ready; one that stops ends the wait. `budget` names the setting `timeout_s` came from.

    Raises:
        PyTritonClientTimeoutError: not live and ready within ``timeout_s``; says what was last seen.
        PyTritonClientModelUnavailableError: the server is stopping.
    """
    deadline = time.monotonic() + timeout_s
    seen = "no answer from the server yet"
    notices = WaitNotices(url, "the server", timeout_s, budget)
    while True:
        left = max(deadline - time.monotonic(), 1e-3)
        outcome = yield Probe("live", left)
        if outcome is True:
            outcome = yield Probe("server", max(deadline - time.monotonic(), 1e-3))
            if outcome is True:
                return
            if outcome is False:
                yield from _fail_if_stopping(url, deadline)
            seen = str(outcome) if isinstance(outcome, Exception) else "the server is not ready"
        else:
            seen = str(outcome) if isinstance(outcome, Exception) else "the server is not live"
        notices.seen(outcome, seen)
        if time.monotonic() + READY_POLL_INTERVAL_S > deadline:
            raise PyTritonClientTimeoutError(f"Server at {url} was not ready within {timeout_s:g} s; last seen: {seen}")
        yield Probe("sleep", READY_POLL_INTERVAL_S)


def wait_message(url: TritonUrl, what: str, outcome: ProbeOutcome, state: str, waited_s: float,
                 timeout_s: float, budget_name: str = "init_timeout_s") -> str:
    """What a client says while it waits: whether anything answers at `url`, and for how long
    it goes on waiting, naming where that came from (`budget_name`: ``init_timeout_s``, or the
    ``timeout_s`` given to the wait)."""
    left = max(timeout_s - waited_s, 0.0)
    budget = f"waiting up to {timeout_s:g} s ({budget_name}) for {what}, {left:.0f} s left"
    if isinstance(outcome, PyTritonClientModelUnavailableError):  # refused, reset, no route: unreachable
        cause = state.split(f"{url}: ", 1)[-1]
        verb = "nothing listens at" if "refused" in cause.lower() else "cannot reach"
        return f"{verb} {url} yet ({cause}); {budget}. Is the server started, and is this its address and port?"
    if isinstance(outcome, PyTritonClientTimeoutError):
        return f"the server at {url} accepts connections but does not answer yet; {budget}"
    return f"{state} at {url}; {budget}"


class WaitNotices:
    """Says, on a logger seen without any logging set up (`pytriton.notices`), what a long wait
    waits for: first after `WAIT_NOTICE_AFTER_S`, then every `WAIT_NOTICE_EVERY_S`, so a client
    started before its server, or pointed at the wrong port, does not wait in silence.

    Waits for the same thing at the same time (the worker threads of a `FuturesModelClient`,
    up to 128) speak through one of them: the first to speak, for as long as it waits.
    """

    def __init__(self, url: TritonUrl, what: str, timeout_s: float, budget: str = "init_timeout_s",
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._url, self._what, self._timeout_s, self._budget, self._clock = url, what, timeout_s, budget, clock
        self._started = clock()
        self._next = self._started + WAIT_NOTICE_AFTER_S

    def seen(self, outcome: ProbeOutcome, state: str) -> None:
        """Record one poll's outcome (and the state it left); say it when a notice is due."""
        now = self._clock()
        if now < self._next or now - self._started >= self._timeout_s:
            return
        self._next = now + WAIT_NOTICE_EVERY_S
        key = (str(self._url), self._what)
        if _SPEAKERS.setdefault(key, self) is not self:
            return  # another wait for the same server and model speaks for this one too
        _NOTICES.info("%s", wait_message(self._url, self._what, outcome, state, now - self._started, self._timeout_s,
                                         self._budget))


_SPEAKERS: weakref.WeakValueDictionary[tuple[str, str], WaitNotices] = weakref.WeakValueDictionary()
"""The wait that speaks for each (URL, what is awaited); an entry goes with its wait."""


def call_for(probe: Probe, model_name: str, model_version: str) -> tuple[str, tuple[Any, ...]]:
    """The core's method name and arguments that answer `probe` (not a ``"sleep"``)."""
    if probe.kind == "live":
        return "is_server_live", ()
    if probe.kind == "server":
        return "is_server_ready", ()
    if probe.kind == "presence":
        return "model_presence", (model_name,)
    if probe.kind == "stopping":
        return "model_presence", (STOPPING_MODEL,)
    if probe.kind == "served":
        return "served_models", ()
    return "is_model_ready", (model_name, model_version)
