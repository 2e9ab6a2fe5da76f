"""Supervision of the tritonserver process: start, log capture, polite stop, forced stop.

The server runs in its own session (a Ctrl-C in the terminal reaches only the user's process,
which then stops the server in order, after in-flight requests) and receives SIGTERM if the
user's process dies (``PR_SET_PDEATHSIG``), so it never outlives its owner.
"""

from __future__ import annotations

import collections
import ctypes
import logging
import os
import re
import signal
import subprocess
import threading
import time
from typing import Any, Callable, Deque, List, Mapping, Optional, Sequence, Tuple

import psutil

logger = logging.getLogger("pytriton.server")
_server_log = logging.getLogger("pytriton.server.tritonserver")

_PR_SET_PDEATHSIG = 1
_ERROR_LINE = re.compile(r"^E\d{4} ")
# Error lines tritonserver prints although nothing fails: on a machine without a usable GPU, its
# CUDA helper at start and the CUDA stream each ensemble asks for (it runs without one); and for
# each model loaded from a configuration sent with the load call (the readiness gate, a failed
# load's placeholder), a modification time it has no file to take from; and, for a server started
# without models, the failed load of the closed readiness gate (server/readiness.py) that keeps it
# not ready, with the summary line that follows it.
_HARMLESS = ("CudaDriverHelper has not been initialized", "unable to create stream for",
             "Failed to set config modification time: model_config_content_name_ is empty",
             "backend 'pytriton_readiness_gate_closed'", "failed to load all models")
# Logged each second of a shutdown (at INFO level, which is on by default) once in-flight
# inferences are done and the models are being unloaded.
_LIVE_MODELS = re.compile(r"Found (\d+) live models")
_SETTLE_S = 5.0
"""How long an exited server's last lines may take to reach the reader (see `ServerProcess._settle`)."""
# Logged once a shutdown found no inference in flight any more; what follows is only unloading.
_DRAINED = re.compile(r"Found 0 model versions that have in-flight inferences")
# Logged each second of a shutdown while HTTP connections stay open: Triton waits for every one
# to close, idle keep-alive connections too, until its exit timeout.
_HTTP_CONNECTIONS = re.compile(r"Found \d+ HTTP service connections")
# Logged (at INFO level) once a model version's object is destroyed: every request it accepted
# released, its instances finalized (a model replaced by a load, or unloaded).
_UNLOADED = re.compile(r"successfully unloaded '([^']+)' version (\d+)")


_STOP_POLL_S = 0.02
_PRIVATE_UMASK = 0o077
_SIG_IGN = 1  # <signal.h>: SIG_IGN is ((void (*)(int)) 1)


def wait_gone(processes: List[psutil.Process], timeout_s: float, interval_s: float = 0.01) -> List[psutil.Process]:
    """Wait until every process has ended; the ones still running after `timeout_s`.

    A killed process that is not our child stays a zombie until its new parent reaps it, which
    some init processes do only every second or so: a zombie counts as ended here (it runs no
    more code and holds no resource but its process-table entry).
    """
    deadline = time.monotonic() + timeout_s
    running = list(processes)
    while running:
        still = []
        for process in running:
            try:
                if process.status() != psutil.STATUS_ZOMBIE:
                    still.append(process)
            except psutil.NoSuchProcess:
                pass
        running = still
        if not running or time.monotonic() >= deadline:
            break
        time.sleep(interval_s)
    return running


def _prepare_child() -> None:
    """Runs in the child before exec: a private umask, SIGTERM when the parent dies, and
    SIGCHLD ignored, which the exec keeps.

    With SIGCHLD ignored the kernel reaps tritonserver's children (the Python-backend stubs)
    as they die. Triton 2.51 never waits for a stub killed in the middle of a request (that
    model version never finishes unloading), which otherwise stays a zombie for as long as the
    server runs. Triton's own checks still work: `waitpid` on a live stub answers 0, on a
    reaped one -1, which it reads as "not alive" like a reaped exit. A reaped stub's pid is free
    at once, and Triton still sends SIGKILL to it when it unloads that model version: the
    supervisor asks for that unload within about a second of the death (and the version Triton
    cannot unload never gets there), far sooner than the kernel hands the pid out again.
    (Popen's own ``umask=`` argument needs Python 3.9; this works on 3.8 too.)
    """
    os.umask(_PRIVATE_UMASK)
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    libc.signal.restype = ctypes.c_void_p
    libc.signal.argtypes = [ctypes.c_int, ctypes.c_void_p]
    libc.signal(signal.SIGCHLD, _SIG_IGN)


class ServerProcess:
    """One tritonserver process and a bounded buffer of its output.

    Args:
        argv: the full command line (see `pytriton.server.argv`).
        env: its environment (see `pytriton.server.distribution.server_environment`).
        keep_lines: how many lines of output to keep for error messages.
        secrets: words of the argv (an access token) replaced by ``***`` when it is logged.

    The server starts with umask 077: every file, socket and shared-memory segment it and its
    Python-backend stubs create is readable and writable by this user only.
    """

    def __init__(
        self, argv: Sequence[str], env: Mapping[str, str], keep_lines: int = 400, secrets: Sequence[str] = ()
    ) -> None:
        self._argv = list(argv)
        self._secrets = [secret for secret in secrets if secret]
        self._env = dict(env)
        self._lines: Deque[str] = collections.deque(maxlen=keep_lines)
        self._process: Optional[subprocess.Popen[bytes]] = None
        self._reader: Optional[threading.Thread] = None
        self.live_models: Optional[int] = None
        """During a shutdown: how many model versions the server still waits for (from its log)."""
        self.drained = False
        """During a shutdown: the server has reported that no inference is in flight (from its log)."""
        self.waits_for_connections = False
        """During a shutdown: the server waits for HTTP connections to close (from its log)."""
        self.unloaded: List[Tuple[str, int]] = []
        """The model versions the server logged as unloaded, in order (from its INFO log)."""

    @property
    def pid(self) -> Optional[int]:
        return self._process.pid if self._process else None

    def start(self) -> None:
        """Start the server from a thread of its own that lives as long as the server.

        The kernel sends ``PR_SET_PDEATHSIG`` when the *thread* that forked the child ends, not the
        process: started from a short-lived thread (a thread pool, a web framework's start-up
        hook), the server would be killed with it. The launching thread therefore stays, reading
        the server's output, until the server exits.
        """
        logger.debug("Starting %s", self._redacted(" ".join(self._argv)))
        launched = threading.Event()
        failure: List[BaseException] = []

        def launch() -> None:
            try:
                self._process = subprocess.Popen(
                    self._argv,
                    env=self._env,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    preexec_fn=_prepare_child,
                )
            except Exception as exc:  # noqa: BLE001 - handed to the caller of start()
                failure.append(exc)
                return
            finally:
                launched.set()
            self._pump()

        self._reader = threading.Thread(target=launch, name="pytriton-server", daemon=True)
        self._reader.start()
        launched.wait()
        if failure:
            raise failure[0]

    def _redacted(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text

    def _pump(self) -> None:
        assert self._process is not None and self._process.stdout is not None
        for raw in self._process.stdout:
            line = raw.decode("utf-8", "replace").rstrip()
            self._lines.append(line)
            live = _LIVE_MODELS.search(line)
            if live:
                self.live_models = int(live.group(1))
            elif _DRAINED.search(line):
                self.drained = True
            elif _HTTP_CONNECTIONS.search(line):
                self.waits_for_connections = True
            elif unloaded := _UNLOADED.search(line):
                self.unloaded.append((unloaded.group(1), int(unloaded.group(2))))
            harmless = any(text in line for text in _HARMLESS)
            level = logging.WARNING if _ERROR_LINE.match(line) and not harmless else logging.DEBUG
            _server_log.log(level, "%s", line)

    def is_running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def returncode(self) -> Optional[int]:
        return self._process.poll() if self._process else None

    def output_tail(self, lines: int = 30) -> str:
        """The last lines the server printed, for error messages."""
        self._settle()
        return "\n".join(list(self._lines)[-lines:])

    def output(self) -> List[str]:
        self._settle()
        return list(self._lines)

    def _settle(self) -> None:
        """Once the server has exited, its last lines may still be on their way through the pipe:
        give the reader a moment to take them in (it ends at the pipe's end), or an error message
        would miss the very line that says why. The reader ends at the pipe's end, which comes with
        the exit unless a process the server started still holds the pipe: that is what the limit
        is for, and it is generous, since a loaded machine may be slow to run the reader."""
        reader = self._reader
        if self.returncode is not None and reader is not None and reader is not threading.current_thread():
            reader.join(_SETTLE_S)

    def report(self) -> str:
        """The errors the server logged (``E<date>`` lines), then its last lines: for error messages."""
        self._settle()
        errors = [line for line in self._lines
                  if _ERROR_LINE.match(line) and not any(text in line for text in _HARMLESS)]
        parts = []
        if errors:
            parts.append("Errors it logged:\n" + "\n".join(errors[-10:]))
        parts.append("Its last output:\n" + self.output_tail(8))
        return "\n".join(parts)

    def stop(
        self,
        timeout_s: float,
        poll: Optional[Callable[[float], bool]] = None,
        after_exit: Optional[Callable[[], Any]] = None,
    ) -> Optional[int]:
        """SIGTERM (Triton finishes in-flight requests, then unloads), then SIGKILL after `timeout_s`.

        Args:
            timeout_s: how long the server may take.
            poll: called with the seconds waited so far, every 20 ms while the server drains;
                returning True kills the server at once (a second signal, nothing left to wait for).
            after_exit: called once the server has exited, before its output is read to the end:
                kills what it left (stubs of a server that died before `stop` hold its output
                pipe open, and they are no children of it any more).

        Returns:
            The exit code.
        """
        process = self._process
        if process is None:
            return None
        try:
            children = psutil.Process(process.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            children = []
        if process.poll() is None:
            # SIGTERM, not SIGINT (Triton handles both alike): glibc's system(), which Triton 2.51
            # calls to probe each Python-backend stub it starts, ignores SIGINT process-wide while
            # the probe runs, so a SIGINT during a model load was lost and the server never began
            # its shutdown (seen: 3 stops in 30 during a load, killed after the exit timeout).
            process.send_signal(signal.SIGTERM)
            started = time.monotonic()
            while True:
                waited = time.monotonic() - started
                try:
                    process.wait(min(_STOP_POLL_S, max(timeout_s - waited, 0.0)))
                    break
                except subprocess.TimeoutExpired:
                    pass
                if time.monotonic() - started >= timeout_s:
                    logger.warning("tritonserver did not stop within %.0f s; killing it", timeout_s)
                    process.kill()
                    process.wait()
                    break
                if poll is not None and poll(waited):
                    process.kill()
                    process.wait()
                    break
        for child in children:  # stubs left behind by a killed server
            try:
                child.kill()
            except psutil.NoSuchProcess:
                pass
        wait_gone(children, timeout_s=5)
        if after_exit is not None:
            after_exit()
        if self._reader is not None:
            self._reader.join(5)
        # A process still holding the pipe keeps the reader in its read, and closing the pipe
        # under it would wait for it: leave both to the garbage collector then.
        if process.stdout is not None and not (self._reader is not None and self._reader.is_alive()):
            process.stdout.close()
        return process.returncode
