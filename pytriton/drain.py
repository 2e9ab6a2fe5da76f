"""How a stop drains the server: refuse new work at once, answer what was accepted, then end.

At a stop (`Triton.stop`, SIGINT, SIGTERM) the server first reports not ready over HTTP and gRPC
(`readiness.hold_not_ready`); after ``TritonConfig.drain_serving_s`` (0 by default) it raises
the stopping flag (`pytriton.ipc.stopping`), so every request that reaches a model from then on
is refused as retryable (HTTP 503, gRPC UNAVAILABLE) while the batches the workers hold finish.
Once the workers have been idle for a moment, their last answers sent, pytriton ends tritonserver
itself: Triton's own shutdown would serve the keep-alive connections' new requests and wait for
those connections to close until its exit timeout.

It falls back to Triton's shutdown, watched by `drain_poll`, where ending early would lose
something: a model with sequences (their later requests are still answered), a server that writes
a trace or log file at the end of its shutdown, or workers still busy at the exit timeout.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, List, Optional

from pytriton.binding import ModelBindings
from pytriton.ipc.stopping import raise_flag
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
"""How long the workers must stay idle, new requests refused, before a stop ends tritonserver:
a batch that passed the flag just before it rose reaches its worker within microseconds, and
Triton's endpoints send the last answers within milliseconds."""


def _say_hurried() -> None:
    logger.warning("Second signal during the drain: stopping tritonserver at once")


def drain_poll(exit_timeout: float, *, process: Optional[ServerProcess], supervisor: Optional[Supervisor],
               bindings: ModelBindings, hurry: threading.Event, writes_files: bool) -> Callable[[float], bool]:
    """What `stop()` does while the server drains: cut the streams still open shortly before
    the server's exit timeout (so their clients get an error, not a dropped connection), and
    stop at once on a second signal, when only the versions stuck after a stub's death are
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

    def poll(waited: float) -> bool:
        if waited >= cut_after and not cut.is_set():
            cut.set()
            bindings.end_streams()
        if hurry.is_set():
            _say_hurried()
            return True
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


def refuse_new_requests(control: Any, workspace: Workspace, serving_s: float, hurry: threading.Event) -> None:
    """The drain's first part: not ready at once, new requests served for `serving_s` more (unless
    a second signal comes), then refused (`pytriton.ipc.stopping`)."""
    hold_not_ready(control, workspace.model_repository)
    flag = workspace.stopping_flag
    if serving_s > 0:
        logger.info("Stopping: not ready any more; serving new requests for %.1f s more (drain_serving_s)", serving_s)
        hurry.wait(serving_s)
    raise_flag(flag)


def wait_answered(bindings: ModelBindings, timeout_s: float, hurry: threading.Event) -> bool:
    """Wait until the workers have answered what they accepted and stayed idle a moment (streams
    cut at 80 % of `timeout_s`). Whether they did within `timeout_s` (False: a second signal, or
    a callable still busy)."""
    started = time.monotonic()
    settle_s = _RELAYED_SETTLE_S if bindings.relays() else _ANSWERED_SETTLE_S
    idle_since: Optional[float] = None
    cut = False
    while not hurry.is_set():
        now = time.monotonic()
        if not bindings.idle():
            idle_since = None
        elif idle_since is None:
            idle_since = now
        elif now - idle_since >= settle_s:
            logger.debug("Stopping: the accepted requests are answered (%.2f s)", now - started)
            return True
        if now - started >= timeout_s:
            logger.warning("Stopping: a callable was still busy after the exit timeout (%.0f s); ending the server",
                           timeout_s)
            return False
        if not cut and now - started >= timeout_s * 0.8:
            cut = True
            bindings.end_streams()
        time.sleep(0.005)
    _say_hurried()
    return False


def stop_draining(process: ServerProcess, config: TritonConfig, tracing: Optional[TraceExport], *,
                  supervisor: Optional[Supervisor], bindings: ModelBindings, hurry: threading.Event,
                  workspace: Optional[Workspace], control: Any = None) -> None:
    """Stop tritonserver the way `Triton.stop` does (see the module doc): refuse new requests
    (given the server's `control`), wait for the accepted ones (at most the exit timeout), then
    end it at once where nothing more can be lost, or else drain through Triton's shutdown
    (`drain_poll`), killing it if it outlives its exit timeout by 15 s; kill the stubs of this
    server it left, end the streams the workers still hold, and reap what ended. At most
    ``drain_serving_s`` + the exit timeout (+ 15 s through Triton's shutdown)."""
    exit_timeout = exit_timeout_s(config)
    # Ending tritonserver before its own shutdown would lose a sequence's later requests, or the
    # trace or log file it completes at its end: those stops drain through Triton's shutdown.
    writes_files = writes_files_at_exit(config, tracing)
    through_triton = writes_files or bindings.keeps_sequences()
    at_once = False
    if control is not None and workspace is not None and process.is_running() and not hurry.is_set():
        refuse_new_requests(control, workspace, config.drain_serving_s or 0.0, hurry)
        if not through_triton:
            # Answered, or the exit timeout spent on a busy callable, or a second signal: over.
            wait_answered(bindings, exit_timeout, hurry)
            at_once = True
    pid = process.pid
    process.stop(
        timeout_s=exit_timeout + 15,
        poll=(lambda waited: True) if at_once else drain_poll(
            exit_timeout, process=process, supervisor=supervisor, bindings=bindings, hurry=hurry,
            writes_files=writes_files),
        after_exit=(lambda: kill_server_processes({workspace.server_id}, exclude=pid))
        if workspace is not None else None,
    )
    bindings.end_streams()
    reap_adopted()
