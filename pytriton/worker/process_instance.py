"""A model instance in a worker process: the `InstanceHandler` run in a child forked from the user's.

Opt-in through ``ModelConfig(process_instances=True)``. Threads of one process share a GIL, so a
callable that spends its time in Python code serves one batch at a time however many instances
its model has; a forked child per instance runs on a core of its own. The callable and what it
closes over reach the child by fork: nothing is pickled.

`ProcessInstance` offers the `pytriton.worker.instance.Instance` interface, as an `InstanceHandler`
does. A watcher thread in the parent forks the child, relays what the
child reports over a pipe, and forks a fresh child on the same endpoint when one dies (a
``kill -9``, a crash in native code). The child:

- makes its own ZeroMQ context (the parent's sockets and I/O threads did not survive the fork);
- ignores SIGINT (a Ctrl-C reaches the whole process group; the parent decides what to do);
- dies with the parent: ``PR_SET_PDEATHSIG`` fires when the parent's watcher thread, which forked
  it, ends, and a thread of its own watches ``getppid`` where that is not available;
- reports the pid of the stub whose proxy connected (the supervisor watches that stub), a
  `PyTritonUnrecoverableError` (waiting for the parent's acknowledgement before the requesters get
  their answer, as in-thread instances do), and its end; and takes ``stop`` and ``end_streams``.

The child leaves only through ``os._exit``: the parent's ``atexit`` hooks (stopping the server)
and ``finally`` blocks up the stack of the fork belong to the parent. The child's side is
`pytriton.worker.process_child`.
"""

from __future__ import annotations

import glob
import logging
import multiprocessing
import multiprocessing.connection
import os
import signal
import sys
import threading
import time
import warnings
from typing import Any, Callable, Optional, Tuple

from pytriton import children
from pytriton.exceptions import PyTritonModelConfigError
from pytriton.exit_status import describe_wait_status
from pytriton.ipc import protocol
from pytriton.ipc.shm import SHM_DIR
from pytriton.model_config.instances import InstanceSetup
from pytriton.worker.instance import BusySince, InstanceSpec
from pytriton.worker.placement import CUDA_VISIBLE_DEVICES, placement_of
from pytriton.worker.process_child import DUMP_SIGNAL, POLL_S, child_main

logger = logging.getLogger("pytriton.worker")

START_TIMEOUT_S = 60.0
"""How long `start` waits for a child to report that its handler listens (after its setup, if any)."""
_DUMP_WAIT_S = 0.3
_KILL_GRACE_S = 2.0
"""How long past the `stop` timeout a child gets to end before it is killed."""
_AT_ONCE_GRACE_S = 0.1
"""The grace of a stop at once (``stop(0)``): an idle child exits within it; a busy one is killed."""
_QUICK_DEATH_S = 1.0
"""A child that dies sooner than this after its fork is forked again only after this long."""
_FORK_LOCK = threading.Lock()
"""Instances fork from their watcher threads at once (`launch`): one fork at a time, so that no
child inherits the child's end of another's pipe, and `warnings.catch_warnings` (process-wide) is
not entered by two threads at once."""


def check_forkable(model_name: str) -> None:
    """Refuse process instances where the forked children could not use CUDA.

    A process that initialised CUDA cannot use it in a forked child (the driver's state does not
    survive the fork). Asking torch whether CUDA is there (``torch.cuda.is_available()``,
    ``device_count()``) already starts the driver without `torch.cuda.is_initialized()` saying
    so, and torch then marks every later fork as unable to use CUDA: measured on an H100, each
    request failed with "Cannot re-initialize CUDA in forked subprocess". A short-lived probe
    child asks torch about exactly that, once per `bind`, so the user hears it at `bind`.

    Raises:
        PyTritonModelConfigError: torch has initialised CUDA, or probed it, in this process.
    """
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None)
    try:
        initialised = bool(cuda is not None and cuda.is_initialized())
    except Exception:  # noqa: BLE001 - a broken torch install says nothing about CUDA
        initialised = False
    fix = (
        "keep the instances as threads (process_instances=False, the default, which GPU models want), or touch "
        "CUDA only inside the inference callable (load the model onto the GPU on its first call)"
    )
    if initialised:
        raise PyTritonModelConfigError(
            f"model '{model_name}': ModelConfig(process_instances=True) forks a worker process per instance, but "
            f"this process has already initialised CUDA, which a forked child cannot use; {fix}"
        )
    if cuda is not None and _forks_lose_cuda(cuda):
        raise PyTritonModelConfigError(
            f"model '{model_name}': ModelConfig(process_instances=True) forks a worker process per instance, but "
            "this process already asked torch about CUDA (torch.cuda.is_available() or device_count()), which "
            "starts the CUDA driver: a forked child can then not use CUDA. Set PYTORCH_NVML_BASED_CUDA_CHECK=1 "
            f"before that check (torch then asks NVML instead), drop the check, or {fix}"
        )


def _forks_lose_cuda(cuda: Any) -> bool:
    """Whether a child forked now would find torch's CUDA unusable ("bad fork"), asked in one."""
    in_bad_fork = getattr(cuda, "_is_in_bad_fork", None)
    if in_bad_fork is None:
        return False
    with children.LOCK:
        pid = os.fork()
        if pid == 0:  # the probe: one call, then out, without running any of the parent's cleanup
            try:
                code = 1 if in_bad_fork() else 0
            except BaseException:  # noqa: BLE001 - any doubt reads as "usable", as before the probe
                code = 0
            os._exit(code)
        children.keep(pid)
    _, status = os.waitpid(pid, 0)
    children.release(pid)
    return os.waitstatus_to_exitcode(status) == 1


class _Child:
    """One forked child as the parent sees it."""

    def __init__(self, pid: int, conn: multiprocessing.connection.Connection, shm_prefix: str) -> None:
        self.pid = pid
        self.conn = conn
        self.shm_prefix = shm_prefix
        self.started = time.monotonic()
        self.status: Optional[int] = None
        """Its wait status once reaped (None while it runs, or when someone else reaped it)."""


class ProcessInstance:
    """Serves a model instance (`InstanceSpec`) from a worker process forked from this one.

    The child builds an `InstanceHandler` of the same spec, with a ZeroMQ context of its own, on
    the device ``spec.context.config.devices`` gives this instance (`pytriton.worker.placement`);
    an `InstanceSetup` in ``spec.infer_func`` builds the callable there.

    Args:
        spec: the instance.
        on_unrecoverable: called in this process (from the watcher thread) with the model name
            after the callable raised `PyTritonUnrecoverableError` in the child.

    Raises:
        PyTritonBadParameterError: the instance's device is not one this process sees.
    """

    def __init__(self, spec: InstanceSpec, *, on_unrecoverable: Callable[[str], None]) -> None:
        context, instance = spec.context, spec.instance
        self._busy_since = BusySince()  # in memory shared across the fork: the child writes, this reads
        self._spec = spec
        self.placement = placement_of(context, instance, os.environ.get(CUDA_VISIBLE_DEVICES))
        """Where the child runs (its device), worked out here so that a device not seen fails at once."""
        setup = spec.infer_func if isinstance(spec.infer_func, InstanceSetup) else None
        self._setup_timeout_s = setup.timeout_s if setup is not None else None
        self._set_up = threading.Event()
        if setup is None:
            self._set_up.set()
        self._on_unrecoverable = on_unrecoverable
        self._name = f"model '{context.model_name}' instance {instance}"
        self._socket_path = protocol.ipc_socket_path(spec.endpoint)
        self._child: Optional[_Child] = None
        self._incarnation = 0
        self._send_lock = threading.Lock()
        self._started = threading.Event()
        self._start_error: Optional[BaseException] = None
        self._stopping = threading.Event()
        self._kill_at = float("inf")
        self.proxy_pid: Optional[int] = None
        """The pid of the stub process whose proxy greeted last, as the child reports it."""
        self._thread = threading.Thread(
            target=self._watch, name=f"pytriton-{context.model_name}-{instance}-process", daemon=True
        )

    @property
    def worker_pid(self) -> Optional[int]:
        """Pid of the child serving right now (None between a death and the next fork)."""
        child = self._child
        return child.pid if child is not None and child.status is None else None

    def launch(self) -> None:
        """Fork the child without waiting for it (`start` waits): the setups of a model's instances,
        each loading the model, run at the same time."""
        if self._thread.ident is None:
            self._thread.start()

    def start(self) -> None:
        """Fork the child (unless `launch` did) and wait until its handler listens.

        Raises:
            PyTritonModelConfigError: the setup failed or did not finish within its
                ``timeout_s``, the handler refused the configuration (as `InstanceHandler`), or the
                child did not report within `START_TIMEOUT_S`; other errors of the child's start are
                raised as they were raised there.
        """
        self.launch()
        if self._setup_timeout_s is not None and not self._set_up.wait(self._setup_timeout_s):
            self.stop(1.0)
            raise PyTritonModelConfigError(
                f"{self._name}: its setup (InstanceSetup) did not finish within timeout_s={self._setup_timeout_s:g} s"
            )
        if not self._started.wait(START_TIMEOUT_S):
            self.stop(1.0)
            raise PyTritonModelConfigError(
                f"{self._name}: its worker process did not start within {START_TIMEOUT_S:.0f} s"
            )
        if self._start_error is not None:
            self._thread.join(START_TIMEOUT_S)
            raise self._start_error

    def is_serving(self) -> bool:
        """Whether the instance serves (or is forking a fresh child after a death)."""
        return self._thread.is_alive() and not self._stopping.is_set()

    def idle(self) -> bool:
        """Whether the child serves no batch."""
        return self._busy_since.idle()

    def busy_for(self, now: float) -> float:
        """How long the child's oldest batch has been served (see `InstanceHandler.busy_for`)."""
        return self._busy_since.busy_for(now)

    def stuck_stack(self) -> str:
        """Ask the child to write its threads' stacks to its stderr (the log of your process)."""
        child = self._child
        if child is None or child.status is not None:
            return "(no worker process)"
        try:
            os.kill(child.pid, DUMP_SIGNAL)
        except ProcessLookupError:
            return "(the worker process is gone)"
        time.sleep(_DUMP_WAIT_S)  # faulthandler writes from the child's signal handler
        return f"(the worker process, pid {child.pid}, wrote the stacks of its threads to its stderr above)"

    def free_stuck(self) -> bool:
        """Kill the child serving a hung callable; the watcher forks a fresh one (True)."""
        child = self._child
        if child is None or child.status is not None:
            return False
        try:
            os.kill(child.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        return True

    def end_streams(self) -> None:
        """Cut the child's streams in flight short (see `InstanceHandler.end_streams`)."""
        self._send(("end_streams",))

    def stop(self, timeout_s: float = 5.0) -> bool:
        """Stop the child, kill it if it is not gone `timeout_s` (plus a grace, short when 0: a stop
        at once, its callable abandoned) later, and clean up.

        Removes the child's socket file and output segments and reaps it.

        Returns:
            False only when the watcher thread did not end (the child could not be reaped).
        """
        grace_s = _KILL_GRACE_S if timeout_s > 0 else _AT_ONCE_GRACE_S
        self._kill_at = time.monotonic() + timeout_s + grace_s
        self._stopping.set()
        self._send(("stop", timeout_s))
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout_s + grace_s + 5.0)
        if not self._thread.is_alive():
            self.remove_death_notes()
        return not self._thread.is_alive()

    # --- the parent's side ----------------------------------------------------------------------

    def _send(self, message: Tuple[Any, ...]) -> None:
        child = self._child
        if child is None:
            return
        with self._send_lock:
            try:
                child.conn.send(message)
            except (OSError, ValueError):
                pass  # the child is gone; the watcher sees it

    def _watch(self) -> None:
        """The watcher thread: fork, relay, notice a death and fork again, until stopped."""
        try:
            child = self._fork()
        except BaseException as exc:  # noqa: BLE001 - handed to start()
            self._start_error = exc
            self._set_up.set()
            self._started.set()
            return
        first = True
        while True:
            ready = self._relay(child, first)
            self._bury(child)
            if first:
                first = False
                if not ready:
                    if self._start_error is None:
                        self._start_error = PyTritonModelConfigError(
                            f"{self._name}: its worker process {describe_wait_status(child.status)} while starting"
                        )
                    self._set_up.set()
                    self._started.set()
                    return
            if self._stopping.is_set():
                return
            logger.warning("Model '%s' instance %d: its worker process (pid %d) %s; forking a fresh one",
                           self._spec.context.model_name, self._spec.instance, child.pid,
                           describe_wait_status(child.status))
            fresh = self._fork_again(child)
            if fresh is None:
                return
            child = fresh

    def _fork_again(self, dead: _Child) -> Optional[_Child]:
        """A fresh child after `dead` died; None once stopping."""
        if time.monotonic() - dead.started < _QUICK_DEATH_S:
            self._stopping.wait(_QUICK_DEATH_S)  # a child that dies at once must not spin the CPU
        while not self._stopping.is_set():
            try:
                return self._fork()
            except Exception:  # keep trying while the instance is wanted
                logger.exception("%s: forking a fresh worker process failed; trying again", self._name)
                self._stopping.wait(_QUICK_DEATH_S)
        return None

    def _fork(self) -> _Child:
        self._incarnation += 1
        # A fresh prefix per child: the proxy may still map the dead child's segments by name.
        shm_prefix = self._spec.shm_prefix
        if self._incarnation > 1:
            shm_prefix = f"{shm_prefix}-w{self._incarnation}"
        parent_pid = os.getpid()
        with _FORK_LOCK, children.LOCK, warnings.catch_warnings():
            parent_end, child_end = multiprocessing.Pipe(duplex=True)
            # Python 3.12+ warns that a fork of a threaded process may deadlock the child on a lock
            # another thread held. The child takes none of the parent's locks but those Python
            # re-initialises after a fork (logging, imports); it builds all it uses anew.
            warnings.filterwarnings("ignore", message=".*fork.*", category=DeprecationWarning)
            pid = os.fork()
            if pid != 0:
                children.keep(pid)
                child_end.close()  # before another instance forks: its child must not hold this end
        if pid == 0:  # the child: never returns
            parent_end.close()
            child_main(self._spec, placement=self.placement, busy_since=self._busy_since, shm_prefix=shm_prefix,
                       conn=child_end, parent_pid=parent_pid, restarts=self._incarnation - 1)
        child = _Child(pid, parent_end, shm_prefix)
        self._child = child
        return child

    def _relay(self, child: _Child, first: bool) -> bool:
        """Relay the child's reports until it ended (killing it once past a stop's deadline).

        Returns:
            Whether the child reported that it serves.
        """
        ready = False
        while True:
            if self._stopping.is_set() and time.monotonic() >= self._kill_at:
                logger.warning("%s: its worker process (pid %d) did not stop in time; killing it", self._name,
                               child.pid)
                _kill(child.pid)
                self._kill_at = float("inf")
            try:
                message = child.conn.recv() if child.conn.poll(POLL_S) else None
            except (EOFError, OSError):
                message = ("gone",)
            if message is not None:
                kind = message[0]
                if kind == "set_up":
                    self._set_up.set()
                elif kind == "ready":
                    ready = True
                    if first:
                        self._set_up.set()
                        self._started.set()
                elif kind == "failed":
                    self._start_error = message[1]
                elif kind == "proxy_pid":
                    self.proxy_pid = message[1]
                elif kind == "unrecoverable":
                    try:
                        self._on_unrecoverable(message[1])
                    finally:
                        self._send(("ack",))
                elif kind == "gone":
                    self._wait_exit(child)
                    return ready
            if self._reaped(child):
                return ready

    def _wait_exit(self, child: _Child) -> None:
        """The pipe closed: the child is ending; wait for its exit (killing it if it lingers)."""
        deadline = time.monotonic() + _KILL_GRACE_S
        while not self._reaped(child):
            if time.monotonic() >= deadline:
                _kill(child.pid)
                deadline = float("inf")
            time.sleep(0.01)

    @staticmethod
    def _reaped(child: _Child) -> bool:
        try:
            pid, status = os.waitpid(child.pid, os.WNOHANG)
        except ChildProcessError:  # reaped by someone else (the user's own reaper, as PID 1)
            pid, status = child.pid, None
        if pid == 0:
            return False
        child.status = status
        children.release(child.pid)
        return True

    def _bury(self, child: _Child) -> None:
        """Remove what a dead child left: its pipe, its socket file, its output segments; and
        say why it ended where the backend that held its requests looks (`_write_death_note`)."""
        child.conn.close()
        self._busy_since.value = 0.0  # the batches it was serving died with it
        if self._socket_path is not None:
            self._write_death_note(child)
            data_socket = protocol.data_socket_path(self._socket_path)
            for path in (self._socket_path, data_socket, protocol.metrics_socket_path(data_socket)):
                try:
                    os.unlink(path)
                except FileNotFoundError:
                    pass
        _remove_segments(protocol.segment_name(child.shm_prefix, self._spec.instance, "out", 0)[:-1])


    def _write_death_note(self, child: _Child) -> None:
        """Write why `child` ended beside its data socket (`protocol.death_note_path`).

        pytriton's backend, inside tritonserver, sees the child's connection end at once, with
        the child's batch still unanswered; it cannot learn the cause (the child is ours, not
        its own), so it reads it here and answers every request of the batch with it. Notes of
        earlier children go: one note per instance at a time.
        """
        self.remove_death_notes()
        stopping = " while it was being stopped" if self._stopping.is_set() else ""
        note = (f"the worker process of instance {self._spec.instance} (pid {child.pid}) "
                f"{describe_wait_status(child.status)}{stopping} while serving this request"
                f"{'' if stopping else '; a fresh worker process takes its place'}")
        data_socket = self._data_socket()
        if data_socket is None:
            return
        path = protocol.death_note_path(data_socket, child.pid)
        try:
            with open(path + ".tmp", "w", encoding="utf-8") as handle:
                handle.write(note)
            os.replace(path + ".tmp", path)
        except OSError:
            pass  # the workspace is gone: the server stops anyway

    def _data_socket(self) -> Optional[str]:
        """This instance's data socket, beside which its death notes go: where a proxy and
        pytriton's backend, both connected to it, look for them."""
        return protocol.data_socket_path(self._socket_path) if self._socket_path is not None else None

    def remove_death_notes(self) -> None:
        """Remove the death notes this instance wrote (at stop)."""
        data_socket = self._data_socket()
        if data_socket is not None:
            for old in glob.glob(glob.escape(protocol.death_note_path(data_socket, 0))[:-1] + "*"):
                _unlink(old)


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _remove_segments(prefix: str) -> None:
    """Unlink the /dev/shm segments whose name starts with `prefix` (a dead child's output arena)."""
    try:
        names = os.listdir(SHM_DIR)
    except OSError:
        return
    for name in names:
        if name.startswith(prefix):
            try:
                os.unlink(os.path.join(SHM_DIR, name))
            except OSError:
                pass
