"""How a stop drains the server: refuse new work at once, answer what was accepted, then end.

At a stop (`Triton.stop`, SIGINT, SIGTERM) the server first reports not ready over HTTP and gRPC
(`readiness.hold_not_ready`, whose failed model also tells a waiting client that the server is
stopping); after ``TritonConfig.drain_serving_s`` (0 by default) it reloads each model as a
refusing one (`pytriton.ipc.stopping`): every request that arrives from then on is refused at once
as retryable (HTTP 503, gRPC UNAVAILABLE), whatever the instances are doing, while the requests
the models accepted before (running, or queued in Triton behind a busy instance) are answered.
Once Triton has released all of them (it destroys a replaced model version then, and logs it;
without its INFO log, once the workers have been idle for a moment), pytriton ends tritonserver
itself: Triton's own shutdown would serve the keep-alive connections' new requests and wait for
those connections to close until its exit timeout.

It falls back to Triton's shutdown, watched by `drain_poll`, where ending early would lose
something: a model with sequences (their later requests are still answered), a server that writes
a trace or log file at the end of its shutdown, or workers still busy at the exit timeout.

A second signal (or a hung callable) stops at once: the requests in flight are answered
UNAVAILABLE by the server (the stopping flag's `ABANDONED`), which then ends, and the callables
still running are left behind (`stop_handlers(0)`).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any, Callable, List, Optional, Tuple

from pytriton.binding import ModelBindings
from pytriton.exceptions import PyTritonServerError
from pytriton.ipc.stopping import ABANDONED, REFUSING, raise_flag, refusing_config
from pytriton.launch import writes_files_at_exit
from pytriton.server.config import TritonConfig, exit_timeout_s
from pytriton.server.process import ServerProcess
from pytriton.server.readiness import hold_not_ready
from pytriton.server.supervisor import Supervisor, reap_adopted
from pytriton.server.workspace import Workspace, kill_server_processes
from pytriton.worker.tracing import TraceExport

logger = logging.getLogger("pytriton.triton")

_RELAYED_SETTLE_S = 0.2
"""How long the workers of relayed models stay idle before a stop ends tritonserver itself."""
_CONNECTIONS_SETTLE_S = 0.5
"""How long the workers must be idle to end a drain while Triton still waits for HTTP connections."""
_ANSWERED_SETTLE_S = 0.1
"""Without Triton's INFO log: how long the workers must stay idle, new requests refused, before a
stop ends tritonserver: a request queued behind a busy instance reaches its worker within
milliseconds of the instance's last answer (plus the batcher's queue delay,
`ModelBindings.longest_queue_delay_s`), and Triton's endpoints send the last answers within
milliseconds."""
_UNLOADED_SETTLE_S = 0.05
"""How long after the last replaced model version is unloaded a stop ends tritonserver: its
requests are released once their answers are handed to the endpoints, which send them within
milliseconds."""
_NO_UNLOAD_LINE_S = 3.0
"""How long the workers may stay idle, a replaced version not logged as unloaded, before a stop
ends tritonserver anyway (a log that says nothing of it)."""
_ABANDON_S = 0.2
"""How long a stop at once waits, the flag at `ABANDONED`, before it kills tritonserver: the
backend's and the proxy's waits for the workers (and their relays) look at the flag at least
every 0.1 s, and Triton sends their UNAVAILABLE answers within milliseconds."""
_REFUSAL_LOAD_S = 10.0
"""The longest a refusing model's load may take (on pytriton's backend: about 10 ms)."""


def _say_hurried() -> None:
    logger.warning("Second signal during the drain: stopping tritonserver at once")


def abandon_in_flight(workspace: Optional[Workspace]) -> None:
    """The stop at once: the server answers each request in flight UNAVAILABLE (retryable) within
    `_ABANDON_S`, instead of its client finding the connection closed when the server ends."""
    if workspace is None:
        return
    try:
        raise_flag(workspace.stopping_flag, ABANDONED)
    except OSError as exc:  # the workspace is gone: nothing maps the flag any more
        logger.debug("could not raise the stopping flag: %s", exc)
        return
    time.sleep(_ABANDON_S)


def drain_poll(exit_timeout: float, *, process: Optional[ServerProcess], supervisor: Optional[Supervisor],
               bindings: ModelBindings, hurry: threading.Event, writes_files: bool,
               flag: Optional[os.PathLike[str]] = None) -> Callable[[float], bool]:
    """What `stop()` does while the server drains: cut the streams still open shortly before
    the server's exit timeout (so their clients get an error, not a dropped connection), and
    stop at once on a second signal (the requests in flight answered UNAVAILABLE through the
    stopping `flag` first, when given), when only the versions stuck after a stub's death are
    left (Triton would wait for them until the exit timeout), or as soon as the server
    reports that no inference is in flight any more: the rest of Triton's shutdown unloads
    each model and polls once a second for it (2 to 3 s for one idle model), while pytriton
    removes the stubs and their shared memory itself. Not when Triton writes a trace file
    or a log file, which it completes only at the end of its own shutdown."""
    cut_after = exit_timeout * 0.8
    cut = threading.Event()
    # Relayed answers (streams, async callables) travel after Triton counted the request done:
    # the workers must be idle too, and for a moment, so their last answer reaches the client.
    settle_s = _RELAYED_SETTLE_S if bindings.relays() else 0.0
    # While Triton waits for its HTTP connections to close, idle keep-alive ones included (up to
    # the exit timeout), it says nothing of the requests in flight: the workers must then be
    # idle for longer than a batcher may hold a request while an instance is free, and long
    # enough for a request being read to reach its model.
    connections_settle_s = max(_CONNECTIONS_SETTLE_S, bindings.longest_queue_delay_s() + 0.05)
    idle_since: List[float] = []
    hurried_at: List[float] = []

    def poll(waited: float) -> bool:
        if waited >= cut_after and not cut.is_set():
            cut.set()
            bindings.end_streams()
        if hurry.is_set():  # the requests in flight are answered UNAVAILABLE first (`abandon_in_flight`)
            if not hurried_at:
                _say_hurried()
                hurried_at.append(waited)
                try:
                    if flag is not None:
                        raise_flag(flag, ABANDONED)
                except OSError:  # the workspace is gone: nothing maps the flag any more
                    return True
            return flag is None or waited - hurried_at[0] >= _ABANDON_S
        if process is not None and (process.drained or process.waits_for_connections) and not writes_files:
            needed = settle_s if process.drained else connections_settle_s
            if not bindings.idle():
                idle_since.clear()
            elif not idle_since:
                idle_since.append(waited)
            elif waited - idle_since[0] >= needed:
                logger.debug("No inference in flight any more; stopping tritonserver without its unloading"
                             "%s", "" if process.drained else " (idle HTTP connections were still open)")
                return True
        stuck = supervisor.stuck_versions if supervisor is not None else 0
        live = process.live_models if process is not None else None
        if stuck and live is not None and live <= stuck:
            logger.info("Only the %d model version(s) left behind by dead stubs remain; stopping tritonserver",
                        stuck)
            return True
        return False

    return poll


def refuse_new_requests(control: Any, workspace: Workspace, serving_s: float, hurry: threading.Event,
                        bindings: ModelBindings, refusing_backend: str) -> Optional[List[Tuple[str, int]]]:
    """The drain's first part: not ready at once, new requests served for `serving_s` more (unless
    a second signal comes), then refused: each model reloaded as a refusing one of
    `refusing_backend` (`pytriton.ipc.stopping`), or, where that fails, refused where its
    batches start (the flag's `REFUSING`).

    Returns:
        The model versions replaced, whose unloads tell that what they accepted is answered; None
        when a second signal came first or a model is refused by the flag instead.
    """
    hold_not_ready(control, workspace.model_repository)
    if serving_s > 0:
        logger.info("Stopping: not ready any more; serving new requests for %.1f s more (drain_serving_s)", serving_s)
        hurry.wait(serving_s)
    if hurry.is_set():
        return None
    started = time.monotonic()
    replaced: List[Tuple[str, int]] = []
    failed = []
    for name in bindings.refused_at_stop():
        try:
            config = control.model_config(name, _REFUSAL_LOAD_S)
            control.load_model(name, _REFUSAL_LOAD_S, refusing_config(config, refusing_backend, os.getpid()))
            replaced += [(name, version) for version in bindings.models.versions(name)]
        except PyTritonServerError as exc:
            failed.append(name)
            logger.warning("Stopping: model '%s' could not be reloaded as a refusing model (%s); the models' batches "
                           "are refused where they start instead, those already queued too", name, exc)
    if failed:
        raise_flag(workspace.stopping_flag, REFUSING)
    logger.debug("Stopping: new requests refused (%.3f s)", time.monotonic() - started)
    return None if failed else replaced


def wait_answered(bindings: ModelBindings, timeout_s: float, hurry: threading.Event,
                  replaced: Optional[Callable[[], bool]] = None) -> bool:
    """Wait until what the models accepted is answered (streams cut at 80 % of `timeout_s`).
    Whether it was within `timeout_s` (False: a second signal, or a callable still busy).

    With `replaced` (whether every model version a stop replaced is unloaded: Triton destroys a
    replaced version once it released every request it accepted), that is the sign, and a short
    settle for the endpoints to send the last answers. Without it (Triton's INFO log is off), the
    workers must stay idle for a moment: a request queued behind a busy instance reaches its
    worker within milliseconds, and within a batcher's queue delay."""
    started = time.monotonic()
    settle_s = _RELAYED_SETTLE_S if bindings.relays() else _ANSWERED_SETTLE_S
    if bindings.longest_queue_delay_s() > 0:
        settle_s = max(settle_s, bindings.longest_queue_delay_s() + 0.05)
    idle_since: Optional[float] = None
    unloaded_at: Optional[float] = None
    cut = False
    while not hurry.is_set():
        now = time.monotonic()
        if replaced is not None:
            if unloaded_at is None and replaced():
                unloaded_at = now
            if unloaded_at is not None and now - unloaded_at >= _UNLOADED_SETTLE_S:
                logger.debug("Stopping: the accepted requests are answered (%.2f s)", now - started)
                return True
        if not bindings.idle():
            idle_since = None
        elif idle_since is None:
            idle_since = now
        elif now - idle_since >= (settle_s if replaced is None else _NO_UNLOAD_LINE_S):
            # (with `replaced`: no line came long after the workers went idle; the log says no more)
            logger.debug("Stopping: the workers are idle (%.2f s)", now - started)
            return True
        if now - started >= timeout_s:
            logger.warning("Stopping: a callable was still busy after the exit timeout (%.0f s); ending the server",
                           timeout_s)
            return False
        if not cut and now - started >= timeout_s * 0.8:
            cut = True
            bindings.end_streams()
        time.sleep(0.005)
    return False


def stop_draining(process: ServerProcess, config: TritonConfig, tracing: Optional[TraceExport], *,
                  supervisor: Optional[Supervisor], bindings: ModelBindings, hurry: threading.Event,
                  workspace: Optional[Workspace], control: Any = None, refusing_backend: str = "pytriton") -> None:
    """Stop tritonserver the way `Triton.stop` does (see the module doc): refuse new requests
    (given the server's `control`; the refusing models of `refusing_backend`), wait for the
    accepted ones (at most the exit timeout), then end it at once where nothing more can be lost,
    or else drain through Triton's shutdown (`drain_poll`), killing it if it outlives its exit
    timeout by 15 s; kill the stubs of this server it left, end the streams the workers still
    hold, and reap what ended. At most ``drain_serving_s`` + the exit timeout (+ 15 s through
    Triton's shutdown); on a second signal (`hurry`), within `_ABANDON_S` of it."""
    exit_timeout = exit_timeout_s(config)
    # Ending tritonserver before its own shutdown would lose a sequence's later requests, or the
    # trace or log file it completes at its end: those stops drain through Triton's shutdown.
    writes_files = writes_files_at_exit(config, tracing)
    through_triton = writes_files or bindings.keeps_sequences()
    at_once = False
    if control is not None and workspace is not None and process.is_running() and not hurry.is_set():
        mark = len(process.unloaded)
        replaced = refuse_new_requests(control, workspace, config.drain_serving_s or 0.0, hurry, bindings,
                                       refusing_backend)
        if not through_triton:
            # Triton says when a replaced version is gone only in its INFO log (on by default).
            unloads = None if replaced is None or config.log_info is False else (
                lambda: set(replaced) <= set(process.unloaded[mark:]))
            # Answered, or the exit timeout spent on a busy callable, or a second signal: over.
            wait_answered(bindings, exit_timeout, hurry, unloads)
            at_once = True
    if at_once and hurry.is_set() and process.is_running():
        _say_hurried()
        abandon_in_flight(workspace)
    pid = process.pid
    process.stop(
        timeout_s=exit_timeout + 15,
        poll=(lambda waited: True) if at_once else drain_poll(
            exit_timeout, process=process, supervisor=supervisor, bindings=bindings, hurry=hurry,
            writes_files=writes_files, flag=workspace.stopping_flag if workspace is not None else None),
        after_exit=(lambda: kill_server_processes({workspace.server_id}, exclude=pid))
        if workspace is not None else None,
    )
    bindings.end_streams()
    reap_adopted()
