"""How a stop drains the server: when `Triton.stop` may end tritonserver before its exit timeout.

Triton's own shutdown waits for the requests in flight, then unloads each model and polls once a
second for it, and while HTTP connections stay open (idle keep-alive ones included) it waits up to
its exit timeout. pytriton knows more: whether its workers are idle, and which model versions are
only the leftovers of dead stubs. `drain_poll` gives the process's stop the check it runs while it
waits.
"""

from __future__ import annotations

import logging
import threading
from typing import Callable, List, Optional

from pytriton.binding import ModelBindings
from pytriton.server.process import ServerProcess
from pytriton.server.supervisor import Supervisor, reap_adopted
from pytriton.server.workspace import Workspace, kill_server_processes

logger = logging.getLogger("pytriton.triton")

DEFAULT_EXIT_TIMEOUT_S = 30
"""Triton's own exit timeout when ``TritonConfig.exit_timeout_secs`` leaves it unset."""
_RELAYED_SETTLE_S = 0.2
"""How long the workers of relayed models stay idle before a stop ends tritonserver itself."""
_CONNECTIONS_SETTLE_S = 0.5
"""How long the workers must be idle to end a drain while Triton still waits for HTTP connections."""


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
            logger.warning("Second signal during the drain: stopping tritonserver at once")
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


def stop_draining(process: ServerProcess, exit_timeout_secs: Optional[int], *, supervisor: Optional[Supervisor],
                  bindings: ModelBindings, hurry: threading.Event, writes_files: bool,
                  workspace: Optional[Workspace]) -> None:
    """Stop tritonserver the way `Triton.stop` does: drain (see `drain_poll`), kill it if it
    outlives its exit timeout by 15 s, kill the stubs of this server it left, end the streams
    the workers still hold, and reap what ended."""
    exit_timeout = exit_timeout_secs if exit_timeout_secs is not None else DEFAULT_EXIT_TIMEOUT_S
    pid = process.pid
    process.stop(
        timeout_s=exit_timeout + 15,
        poll=drain_poll(exit_timeout, process=process, supervisor=supervisor, bindings=bindings, hurry=hurry,
                        writes_files=writes_files),
        after_exit=(lambda: kill_server_processes({workspace.server_id}, exclude=pid))
        if workspace is not None else None,
    )
    bindings.end_streams()
    reap_adopted()
