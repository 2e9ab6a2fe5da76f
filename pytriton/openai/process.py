"""The front's process, seen from the serving process: started, watched, restarted, stopped.

The OpenAI-compatible front runs in a process of its own (`pytriton.openai.front`), so that its
event loop never waits for the interpreter that the callables' threads and pytriton's worker
hold (docs/design/openai.md). `FrontProcess` is the serving process's side:

- `spawn` starts the process when tritonserver starts, so that its imports (aiohttp, gRPC:
  about a second) overlap the server's start; `open`, once Triton is ready, has it listen and
  returns when the port accepts connections, or raises why it could not;
- a watcher thread starts the process and lives as long as it (``PR_SET_PDEATHSIG`` fires when
  the *thread* that started a child ends, and the front sets it), reads its messages, and starts
  it again when it ends unasked (``kill -9``, the OOM killer), saying so on the
  ``pytriton.openai`` logger; more than `RESTARTS` restarts in `RESTART_WINDOW_S` and the
  server is stopped (`on_fatal`), as for a model that keeps dying: health checks then fail and
  an orchestrator restarts the whole;
- the process runs in a session of its own: a Ctrl+C in the terminal reaches the serving
  process only, which stops in order: `begin_stop` (new requests 503 while Triton drains the
  answers in flight), then `close` (the process ends; killed after `CLOSE_TIMEOUT_S`);
- it dies with the serving process: by ``PR_SET_PDEATHSIG``, and at the end of the socket pair.

The messages, one JSON object per line on a Unix socket pair. To the front: ``listen`` (with
the settings, which include the API key and so never travel on a command line), ``stop``,
``close``. From the front: ``listening`` (its pid) or ``failed`` (why), ``answers`` (the
figures of finished answers for the front's histograms, `pytriton.openai.measures`), ``log``
(a record the front logged, logged here on ``pytriton.openai`` with the user's logging setup).
"""

from __future__ import annotations

import json
import logging
import os
import pathlib
import socket
import subprocess
import sys
import threading
import time
from typing import Any, Callable, Dict, Optional

from pytriton import children
from pytriton.exceptions import PyTritonServerError, PyTritonServerStartupError
from pytriton.exit_status import describe_returncode
from pytriton.server.supervisor import RestartBudget

logger = logging.getLogger("pytriton.openai")

OPEN_TIMEOUT_S = 60.0
"""How long `open` waits for the process to listen (its imports included, on a loaded machine)."""
CLOSE_TIMEOUT_S = 10.0
"""How long `close` waits for the process to end before it is killed."""
RESTARTS = 5
RESTART_WINDOW_S = 60.0
_QUICK_DEATH_S = 1.0
"""A process that ends sooner than this after its start is started again only after this long."""
_POLL_S = 0.5
"""How often the watcher looks whether the process still runs, when nothing arrives."""
_ROOT = str(pathlib.Path(__file__).resolve().parents[2])
"""The folder holding the ``pytriton`` package this process runs."""
_MAIN = "import sys; sys.path.append(sys.argv.pop(1)); from pytriton.openai.front import main; main()"
"""The front's process: the folder of this ``pytriton`` goes last on its import path, found
where no installed ``pytriton`` is (a checkout on ``sys.path``), and shadowing nothing."""


def _label() -> str:
    """A word for the front's command line: ``pytriton-<serving pid>-openai``. A search for what
    this process's servers left (``pytriton-<pid>-``) finds it; the kill of a stopped server's
    leftovers, which looks for the server's whole id, leaves it to `FrontProcess.close`, after
    the drain."""
    return f"pytriton-{os.getpid()}-openai"


class FrontGivenUpError(PyTritonServerError):
    """The front's process ended unasked more often than `RESTARTS` times in `RESTART_WINDOW_S`,
    or could not start again; the server was stopped, so that the whole can be restarted."""


Record = Callable[[str, float, Optional[float]], None]
"""Records one answer's figures: (model, time to first token s, tokens per second or None)."""


class FrontProcess:
    """The front's process (see the module docstring).

    Args:
        settings: what the front needs to listen: ``port``, ``host`` (None: every interface),
            ``grpc_address``, ``access_token``, ``api_key``.
        record: where the figures of each finished answer go (`pytriton.openai.measures.FrontMeasures`).
        on_fatal: told when the process keeps dying (`FrontGivenUpError`) or cannot be started again.
    """

    def __init__(self, settings: Dict[str, Any], record: Optional[Record] = None,
                 on_fatal: Optional[Callable[[PyTritonServerError], None]] = None) -> None:
        self.port: int = settings["port"]
        self._settings = dict(settings)
        self._record = record
        self._on_fatal = on_fatal
        self._lock = threading.Lock()
        self._process: Optional[subprocess.Popen[bytes]] = None
        self._socket: Optional[socket.socket] = None
        self._thread: Optional[threading.Thread] = None
        self._listen = False  # open() was called: a (re)started process listens at once
        self._answered = threading.Event()  # the process said listening or failed, or ended
        self._failure: Optional[str] = None
        self._closing = False
        self._stopping = False
        self._budget = RestartBudget(RESTARTS, RESTART_WINDOW_S)
        self.pid: Optional[int] = None
        """The pid of the process now serving (None before it listens)."""
        self.restarts = 0
        """How many times the process was started again after it ended unasked."""

    # -- the serving process's calls -----------------------------------------------------------
    def spawn(self) -> None:
        """Start the process (it imports what it needs, then waits for `open`)."""
        started = threading.Event()
        self._thread = threading.Thread(target=self._watch, args=(started,), name="pytriton-openai", daemon=True)
        self._thread.start()
        started.wait()

    def open(self) -> None:
        """Have the process listen; returns once the port accepts connections.

        Raises:
            PyTritonServerStartupError: it could not listen (the port taken, the address
                unknown), it ended, or it did not listen within `OPEN_TIMEOUT_S`.
        """
        with self._lock:
            self._listen = True
            self._send_locked({"op": "listen", "settings": self._settings})
        if not self._answered.wait(OPEN_TIMEOUT_S):
            raise PyTritonServerStartupError(f"the OpenAI-compatible API did not open port {self.port} within "
                                             f"{OPEN_TIMEOUT_S:.0f} s")
        if self._failure is not None:
            raise PyTritonServerStartupError(
                f"the OpenAI-compatible API could not listen on {self._settings['host'] or '0.0.0.0'}:{self.port}: "
                f"{self._failure}; choose another port with TritonConfig(openai_port=...)")
        logger.info("OpenAI-compatible API listening on %s:%d (process %s)", self._settings["host"] or "0.0.0.0",
                    self.port, self.pid)

    def begin_stop(self) -> None:
        """From now on, new requests get 503; answers in flight go on."""
        with self._lock:
            self._stopping = True
            self._send_locked({"op": "stop"})

    def close(self) -> None:
        """End the process (killed after `CLOSE_TIMEOUT_S`) and its watcher (idempotent)."""
        with self._lock:
            self._closing = self._stopping = True
            self._send_locked({"op": "close"})
            process = self._process
        if process is not None:
            try:
                process.wait(CLOSE_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                logger.warning("the OpenAI-compatible API's process (pid %d) did not end within %.0f s; killing it",
                               process.pid, CLOSE_TIMEOUT_S)
                process.kill()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(CLOSE_TIMEOUT_S)
        self._answered.set()

    # -- the watcher thread -------------------------------------------------------------------
    def _send_locked(self, message: Dict[str, Any]) -> None:
        if self._socket is None:
            return
        try:
            self._socket.sendall(json.dumps(message).encode("utf-8") + b"\n")
        except OSError:  # the process ended: the watcher sees it
            pass

    def _start_process(self) -> subprocess.Popen[bytes]:
        ours, theirs = socket.socketpair()
        try:
            with children.LOCK:  # as PID 1, the reaper leaves it to us: its exit status is ours to read
                process = subprocess.Popen(
                    [sys.executable, "-c", _MAIN, _ROOT, str(theirs.fileno()), str(os.getpid()), _label()],
                    stdin=subprocess.DEVNULL, pass_fds=(theirs.fileno(),), start_new_session=True)
                children.keep(process.pid)
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        ours.settimeout(_POLL_S)
        with self._lock:
            self._process, self._socket = process, ours
            if self._closing:
                self._send_locked({"op": "close"})
            elif self._listen:  # a restart: listen at once
                self._send_locked({"op": "listen", "settings": self._settings})
                if self._stopping:
                    self._send_locked({"op": "stop"})
        return process

    def _watch(self, started: threading.Event) -> None:
        try:
            process: Optional[subprocess.Popen[bytes]] = self._start_process()
        except OSError as exc:
            self._failure = f"its process could not start: {exc}"
            self._answered.set()
            return
        finally:
            started.set()
        while process is not None:
            began = time.monotonic()
            self._follow(process)
            process = self._after_end(process, time.monotonic() - began)

    def _follow(self, process: subprocess.Popen[bytes]) -> None:
        """Take the process's messages until it ends."""
        assert self._socket is not None
        pending = b""
        while True:
            try:
                chunk = self._socket.recv(65536)
            except socket.timeout:
                if process.poll() is not None:
                    return
                continue
            except OSError:
                return
            if not chunk:
                return
            *lines, pending = (pending + chunk).split(b"\n")
            for line in lines:
                try:
                    self._take(json.loads(line))
                except Exception:  # one bad message must not end the watch
                    logger.exception("the OpenAI-compatible API's process sent a message that could not be taken: "
                                     "%.200r", line)

    def _take(self, message: Dict[str, Any]) -> None:
        op = message.get("op")
        if op == "answers" and self._record is not None:
            for model, first_token_s, tokens_per_s in message["answers"]:
                self._record(model, first_token_s, tokens_per_s)
        elif op == "listening":
            self.pid = message["pid"]
            self._answered.set()
        elif op == "failed":
            self._failure = message["error"]
            self._answered.set()
        elif op == "log":
            logger.log(int(message["level"]), "%s", message["message"])

    def _after_end(self, process: subprocess.Popen[bytes], lived_s: float) -> Optional[subprocess.Popen[bytes]]:
        """Wait for the process that ended; the next one when it ended unasked and may start again."""
        try:
            process.wait(CLOSE_TIMEOUT_S)
        except subprocess.TimeoutExpired:  # its socket closed, yet it runs: end it
            process.kill()
            process.wait()
        children.release(process.pid)
        how = describe_returncode(process.returncode)
        with self._lock:
            if self._socket is not None:
                self._socket.close()
                self._socket = None
            closing, listened, pid = self._closing, self.pid is not None, self.pid
            self.pid = None
        if closing:
            logger.debug("the OpenAI-compatible API's process (pid %s) %s after its close", process.pid, how)
            self._answered.set()
            return None
        if not listened:
            if self._failure is None:
                self._failure = f"its process {how} before it listened"
            if self.restarts:  # a restart that could not listen: nothing serves the port any more
                self._fatal(FrontGivenUpError(f"the OpenAI-compatible API's process could not start again: "
                                                f"{self._failure}; the server was stopped"))
            self._answered.set()
            return None
        if not self._budget.allow(time.monotonic()):
            logger.error("the OpenAI-compatible API's process (pid %s) %s, past its %d restarts in %.0f s; the server "
                         "stops", pid, how, RESTARTS, RESTART_WINDOW_S)
            self._fatal(FrontGivenUpError(
                f"the OpenAI-compatible API's process ended more than {RESTARTS} times within "
                f"{RESTART_WINDOW_S:.0f} s (the last time {how}); the server was stopped"))
            return None
        self.restarts += 1
        logger.warning("the OpenAI-compatible API's process (pid %s) %s; starting it again on port %d",
                       pid, how, self.port)
        if lived_s < _QUICK_DEATH_S:
            time.sleep(_QUICK_DEATH_S - lived_s)
        with self._lock:
            if self._closing:  # stopped meanwhile
                return None
        self._answered.clear()
        try:
            return self._start_process()
        except OSError as exc:
            self._failure = f"{exc}"
            self._fatal(FrontGivenUpError(f"the OpenAI-compatible API's process ended ({how}) and could not "
                                            f"start again: {exc}; the server was stopped"))
            return None

    def _fatal(self, error: PyTritonServerError) -> None:
        self._answered.set()
        if self._on_fatal is not None and not self._closing:
            self._on_fatal(error)
