"""The proxy's connection to its worker handler: the ZeroMQ handshake, then the data channel.

A proxy greets its handler on the control channel (`protocol.Hello` over a ZeroMQ DEALER); the
handler's `protocol.Welcome` tells the pid of the process that serves it (the user's process,
or a worker process forked from it) and the path of its data socket, which the proxy then
connects to (`pytriton.ipc.channel`). When the worker goes away (its process died, or it closed
the connection), the proxy greets whatever worker serves the endpoint next: a worker process
forked anew binds the same sockets.

Imports only the standard library, zmq and `pytriton.ipc`, like the rest of the proxy (the test
suite's proxy driver uses it outside Triton too).
"""

from __future__ import annotations

import time
from typing import Any, Optional

import zmq

from pytriton.ipc import channel, protocol
from pytriton.ipc.channel import pid_alive

_POLL_MS = 100


class LinkError(Exception):
    """No worker answered, or the worker refused the proxy; the message says which and why."""


class Link:
    """The control and data channels of one proxy (Triton instance) to its worker handler.

    Args:
        model_name: for error messages.
        endpoint: the handler's ZeroMQ control endpoint (``ipc://...``).
        hello: what the proxy says of itself.
        worker_pid: the pid expected to serve until a welcome says otherwise (the user's
            process); while it is dead before a first welcome, the handshake gives up early.
    """

    def __init__(self, model_name: str, endpoint: str, hello: protocol.Hello, worker_pid: int) -> None:
        self._model_name = model_name
        self._endpoint = endpoint
        self._hello = hello
        self.worker_pid = worker_pid
        self._zmq: Any = zmq.Context(io_threads=1)
        self._control = self._zmq.socket(zmq.DEALER)
        self._control.setsockopt(zmq.LINGER, 0)
        self._control.connect(endpoint)
        self.channel: Optional[channel.Channel] = None
        self.data_path = ""
        """The worker's data socket, from its last welcome (beside it: why a worker died)."""
        self._welcomed = False

    def connect(self, timeout_s: float, receive_timeout_s: Optional[float]) -> channel.Channel:
        """Greet the handler and open the data channel (replacing any earlier one).

        Args:
            timeout_s: how long to wait for a welcome.
            receive_timeout_s: the data channel's receive timeout (its liveness period).

        Raises:
            LinkError: no welcome in time (or the worker died first), a refusal, or a data socket
                nobody listens on.
        """
        self.drop()
        welcome = self._handshake(timeout_s)
        if welcome.error:
            raise LinkError(f"Model '{self._model_name}': {welcome.error}")
        try:
            opened = channel.connect(welcome.data_path)
        except OSError as exc:
            raise LinkError(
                f"Model '{self._model_name}': the pytriton worker (pid {welcome.worker_pid}) welcomed this proxy "
                f"but its data socket {welcome.data_path} refused the connection ({exc})"
            ) from exc
        opened.set_timeouts(receive_timeout_s, receive_timeout_s)
        self.channel = opened
        self.data_path = welcome.data_path
        return opened

    def _handshake(self, timeout_s: float) -> protocol.Welcome:
        self._control.send(protocol.encode(self._hello))
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._control.poll(_POLL_MS):
                message = protocol.decode(self._control.recv())
                if isinstance(message, protocol.Welcome):
                    if message.error is None:
                        self.worker_pid = message.worker_pid
                        self._welcomed = True
                    return message
            elif not self._welcomed and not pid_alive(self.worker_pid):
                break  # the user's process is gone before it ever answered
        raise LinkError(
            f"Model '{self._model_name}': no pytriton worker answered at {self._endpoint} within {timeout_s:.0f} s "
            f"(worker pid {self.worker_pid}, alive: {pid_alive(self.worker_pid)})"
        )

    @property
    def zmq_context(self) -> Any:
        """The proxy's ZeroMQ context (its metrics thread has a socket of its own in it)."""
        return self._zmq

    def worker_alive(self) -> bool:
        return pid_alive(self.worker_pid)

    def worker_gone(self) -> str:
        """Why the worker is gone: its owner's note when a worker process died, else a plain statement."""
        note = protocol.read_death_note(self.data_path, self.worker_pid) if self.data_path else None
        return note or f"the pytriton worker process (pid {self.worker_pid}) is gone"

    def drop(self) -> None:
        """Close the data channel (after the worker was found gone); `connect` opens a new one."""
        if self.channel is not None:
            self.channel.close()
            self.channel = None

    def close(self) -> None:
        self.drop()
        self._control.close(linger=0)
        self._zmq.term()
