"""The worker process's side of a process instance: what runs in the child forked from the user's.

`pytriton.worker.process_instance` forks the child and calls `child_main` in it. The child sets
its ``CUDA_VISIBLE_DEVICES`` (a device of its own), dies with its parent, ignores SIGINT, runs its
`InstanceSetup` when it has one (`pytriton.worker.placement`), builds an `InstanceHandler` with a
ZeroMQ context of its own, tells the parent over the pipe when its setup is done and when it
serves (and the pid of the stub whose proxy greeted it, and an unrecoverable error, which it waits
for the parent to acknowledge), takes ``stop`` and ``end_streams``, and leaves only through
``os._exit``.
"""

from __future__ import annotations

import ctypes
import dataclasses
import faulthandler
import logging
import multiprocessing.connection
import os
import pickle
import signal
import threading
import time
from typing import Any, Optional, Tuple

import zmq

from pytriton.exceptions import PyTritonModelConfigError
from pytriton.model_config.instances import InstancePlacement, InstanceSetup
from pytriton.worker import tracing
from pytriton.worker.handler import InstanceHandler
from pytriton.worker.instance import BusySince, InstanceSpec
from pytriton.worker.placement import CUDA_VISIBLE_DEVICES, set_up

logger = logging.getLogger("pytriton.worker")

POLL_S = 0.05
"""How often each side looks at the pipe (and the parent at the child's exit status)."""
DUMP_SIGNAL = signal.SIGUSR1
"""Asks a worker process to write its threads' stacks to stderr (`faulthandler`)."""
_PARENT_CHECK_S = 0.5
_ACK_TIMEOUT_S = 5.0
_PR_SET_PDEATHSIG = 1


def child_main(spec: InstanceSpec, *, placement: InstancePlacement, busy_since: BusySince, shm_prefix: str,
               conn: multiprocessing.connection.Connection, parent_pid: int, restarts: int) -> None:
    """Run in the forked child: serve until told to stop or the parent is gone; never returns.

    `placement` holds the ``CUDA_VISIBLE_DEVICES`` set before anything else runs; `busy_since`
    lives in memory the parent reads; `shm_prefix` names this child's segments (each child of an
    instance gets a fresh one); `restarts` counts the children of this instance that died before
    this one.
    """
    code = 1
    try:
        if placement.visible_devices is not None:
            # First: CUDA reads it once, when something in this process initialises it.
            os.environ[CUDA_VISIBLE_DEVICES] = placement.visible_devices
        _die_with_parent(parent_pid)
        faulthandler.register(DUMP_SIGNAL, all_threads=True)  # a hung callable's stacks, on the parent's request
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the parent's Python handlers are not ours
        signal.set_wakeup_fd(-1)  # an asyncio loop of the parent set one: its pipe is the parent's
        code = _ChildRuntime(dataclasses.replace(spec, shm_prefix=shm_prefix), placement, busy_since, conn,
                             restarts).run()
    except BaseException:  # logged, then the exit code says it
        logger.exception("Model '%s' instance %d: the worker process failed", spec.context.model_name, spec.instance)
    finally:
        try:
            tracing.shutdown()  # export this process's last spans: os._exit runs no exit hooks
        finally:
            os._exit(code)


def _die_with_parent(parent_pid: int) -> None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass  # not Linux: the watch below does it, a little later
    if os.getppid() != parent_pid:  # the parent died before the prctl took effect
        os._exit(1)

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(_PARENT_CHECK_S)
        os._exit(1)

    threading.Thread(target=watch, name="pytriton-parent-watch", daemon=True).start()


class _ChildRuntime:
    def __init__(self, spec: InstanceSpec, placement: InstancePlacement, busy_since: BusySince,
                 conn: multiprocessing.connection.Connection, restarts: int) -> None:
        self._spec = spec
        self._placement = placement
        self._busy_since = busy_since
        self._restarts = restarts
        self._conn = conn
        self._send_lock = threading.Lock()
        self._acked = threading.Event()

    def _send(self, message: Tuple[Any, ...]) -> None:
        with self._send_lock:
            self._conn.send(message)

    def _unrecoverable(self, model_name: str) -> None:
        """From the handler's thread: tell the parent, and wait until it acted (before the answer goes)."""
        self._acked.clear()
        self._send(("unrecoverable", model_name))
        self._acked.wait(_ACK_TIMEOUT_S)

    def run(self) -> int:
        spec = self._spec
        if isinstance(spec.infer_func, InstanceSetup):
            try:
                built = set_up(spec.infer_func, self._placement, spec.context, spec.warmups)
                spec = dataclasses.replace(spec, infer_func=built, whole=spec.whole_of(built))
            except Exception as exc:  # noqa: BLE001 - the parent raises it from start()
                self._send(("failed", _picklable(exc)))
                return 1
            self._send(("set_up",))
        zmq_context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
        try:
            handler = InstanceHandler(spec, zmq_context=zmq_context, on_unrecoverable=self._unrecoverable,
                                      worker_restarts=self._restarts, busy_since=self._busy_since)
        except Exception as exc:  # noqa: BLE001 - the parent raises it from start()
            self._send(("failed", _picklable(exc)))
            return 1
        handler.start()
        self._send(("ready", os.getpid()))
        timeout_s = 5.0
        reported: Optional[int] = None
        while handler.is_serving():
            if handler.proxy_pid != reported:
                reported = handler.proxy_pid
                self._send(("proxy_pid", reported))
            try:
                message = self._conn.recv() if self._conn.poll(POLL_S) else None
            except (EOFError, OSError):
                break  # the parent is gone
            if message is None:
                continue
            if message[0] == "stop":
                timeout_s = message[1]
                break
            if message[0] == "end_streams":
                handler.end_streams()
            elif message[0] == "ack":
                self._acked.set()
        stopped = handler.stop(timeout_s)
        if stopped:
            zmq_context.term()
        # else: a callable still runs; os._exit ends it with the process
        return 0


def _picklable(exc: BaseException) -> BaseException:
    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:  # noqa: BLE001
        return PyTritonModelConfigError(f"{type(exc).__name__}: {exc}")
