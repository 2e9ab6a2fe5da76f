"""The worker handler's side of the wire: its control socket, its data socket, and the proxies' connections.

A handler listens on two sockets: a ZeroMQ ROUTER for the control channel (`protocol.Hello` in,
`protocol.Welcome` out) and a Unix SEQPACKET socket that each welcomed proxy connects to for
its batches (`pytriton.ipc.channel`). pytriton's Triton backend connects to the data socket
straight away and greets on it (`HandlerEndpoint.greet`), answered on the same connection, and
asks for the model's metrics on a third socket beside it (`protocol.metrics_socket_path`).
`HandlerEndpoint.wait` is the one place the handler's thread sleeps: it wakes for a batch on
any connection (the kernel wakes this very thread), and answers greetings, metrics polls and
accepts connections on its way. The socket files are 0600 in the workspace's 0700 folder: only
the user who started the server can reach them.
"""

from __future__ import annotations

import logging
import os
import select
import time
from typing import Any, Callable, Dict, List, Optional, Sequence

import zmq

from pytriton.ipc import channel, protocol
from pytriton.ipc.channel import Channel, ChannelClosed, pid_alive

logger = logging.getLogger("pytriton.worker")

SEND_TIMEOUT_S = 1.0
"""How long a send waits on a full queue before it looks whether the proxy still lives."""

CONTROL_LOOK_S = 0.1
"""How often a wait reads the control socket whether or not its descriptor said so."""


class Connection:
    """A proxy's data channel, and the pid of the stub process the proxy runs in."""

    __slots__ = ("channel", "proxy_pid")

    def __init__(self, channel: Channel, proxy_pid: int) -> None:
        self.channel = channel
        self.proxy_pid = proxy_pid


class HandlerEndpoint:
    """The sockets of one worker handler (model instance).

    Args:
        zmq_context: the process's ZeroMQ context.
        endpoint: the control endpoint to bind (``ipc://...``, see `protocol.instance_endpoint`).
        instance: the handler's number, checked against each proxy's greeting.
        model_name: for log messages.
        on_proxy_replaced: called when a proxy of another process greets than the one before (a
            stub that replaces a dead one reuses its segment names, so mappings of the old must go).
        metrics_report: the instance's metrics, as a `protocol.MetricsReport` carries them (a
            `protocol.MetricsPoll` asks for them).
        arena_stem: what a greeter on the data channel names its input arenas after
            (`protocol.Welcome.arena_stem`).
    """

    def __init__(
        self,
        zmq_context: zmq.Context[Any],
        endpoint: str,
        instance: int,
        model_name: str,
        on_proxy_replaced: Callable[[], None] = lambda: None,
        metrics_report: Callable[[], Any] = tuple,
        arena_stem: str = "",
    ) -> None:
        self._instance = instance
        self._model_name = model_name
        self._on_proxy_replaced = on_proxy_replaced
        self._metrics_report = metrics_report
        self._arena_stem = arena_stem
        self.control = zmq_context.socket(zmq.ROUTER)
        self.control.setsockopt(zmq.LINGER, 0)
        self.control.bind(endpoint)
        self._control_path = protocol.ipc_socket_path(endpoint)
        self._data_path: Optional[str] = None
        try:
            if self._control_path is None:
                raise ValueError(f"the worker's control endpoint must be ipc://, not {endpoint!r}")
            # ZeroMQ creates the socket file with the process umask; only this user may connect.
            os.chmod(self._control_path, 0o600)
            self._data_path = protocol.data_socket_path(self._control_path)
            self.listener = channel.listen(self._data_path)
            self.listener.setblocking(False)
            self._metrics_path = protocol.metrics_socket_path(self._data_path)
            self.metrics_listener = channel.listen(self._metrics_path)
            self.metrics_listener.setblocking(False)
        except BaseException:
            self.control.close(linger=0)
            if self._data_path is not None and hasattr(self, "listener"):
                self.listener.close()
            raise
        self._metrics_connections: Dict[int, Channel] = {}
        self._greetings = 0
        self.connections: Dict[int, Connection] = {}
        """The open data connections by file descriptor."""
        self.proxy_pid: Optional[int] = None
        """The pid of the stub process whose proxy greeted last (None before the first)."""
        # One poll(2) per wait: the control socket joins as its descriptor, which ZeroMQ makes
        # readable when something happened on the socket (edge-triggered: `answer_greetings`
        # reads until nothing is left, and a wait reads it every `CONTROL_LOOK_S` anyway). A
        # zmq.Poller would cost two or three system calls per wait, and this wait runs once per batch.
        self._control_fd = self.control.getsockopt(zmq.FD)
        self._poller = select.poll()
        self._next_control_look = 0.0
        for fd in (self._control_fd, self.listener.fileno(), self.metrics_listener.fileno()):
            self._poller.register(fd, select.POLLIN)

    def wait(self, timeout_ms: int) -> List[Connection]:
        """The connections with a message (or an end) to read, after up to `timeout_ms` of waiting.

        Greetings are answered and new connections accepted on the way; they are not returned.
        """
        ready = []
        events = self._poller.poll(timeout_ms)
        now = time.monotonic()
        if now >= self._next_control_look:  # what an edge of the control descriptor may have missed
            self._next_control_look = now + CONTROL_LOOK_S
            self.answer_greetings()
        for fd, _ in events:
            connection = self.connections.get(fd)
            if connection is not None:
                ready.append(connection)
            elif fd == self._control_fd:
                self.answer_greetings()
            elif fd == self.listener.fileno():
                self.accept()
            elif fd in self._metrics_connections:
                self.answer_metrics(fd)
            elif fd == self.metrics_listener.fileno():
                self.accept_metrics()
        return ready

    def accept_metrics(self) -> List[int]:
        """Take the backend's pending metrics connections; their descriptors."""
        accepted = []
        while (opened := channel.accept(self.metrics_listener)) is not None:
            opened.set_timeouts(None, SEND_TIMEOUT_S)
            self._metrics_connections[opened.fileno()] = opened
            self._poller.register(opened.fileno(), select.POLLIN)
            accepted.append(opened.fileno())
        return accepted

    def answer_metrics(self, fd: int) -> bool:
        """Answer the backend's `MetricsPoll` on metrics connection `fd` (only its latest
        greeter's: an earlier instance, being unloaded, is told it is superseded). False when
        the connection ended (and is forgotten)."""
        connection = self._metrics_connections.get(fd)
        if connection is None:
            return False
        try:
            received = connection.receive(wait=False)
            if received is None:
                return True
            message = protocol.decode(received[0])
            if isinstance(message, protocol.MetricsPoll):
                if message.greeting != self._greetings:
                    report = protocol.MetricsReport((), os.getpid(), superseded=True)
                else:
                    report = protocol.MetricsReport(self._metrics_report(), os.getpid())
                connection.send(protocol.encode(report))
            return True
        except (ChannelClosed, BlockingIOError, ValueError):
            del self._metrics_connections[fd]
            self._poller.unregister(fd)
            connection.close()
            return False

    def answer_greetings(self) -> None:
        """Answer every `Hello` and `MetricsPoll` waiting on the control socket."""
        while True:
            try:
                identity, header = self.control.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            except ValueError:  # not two frames: not a proxy of ours
                continue
            try:
                message = protocol.decode(header)
            except ValueError:
                logger.warning("Model '%s': dropped an unreadable control message", self._model_name)
                continue
            if isinstance(message, protocol.Hello):
                self.control.send_multipart([identity, protocol.encode(self._welcome(message))])
            elif isinstance(message, protocol.MetricsPoll):
                if message.proxy_pid and self.proxy_pid is not None and message.proxy_pid != self.proxy_pid:
                    report = protocol.MetricsReport((), os.getpid(), superseded=True)
                else:
                    report = protocol.MetricsReport(self._metrics_report(), os.getpid())
                self.control.send_multipart([identity, protocol.encode(report)])

    def _refusal(self, hello: protocol.Hello) -> Optional[str]:
        """Why a greeting is refused (None: welcome)."""
        if hello.protocol != protocol.PROTOCOL_VERSION:
            return (
                f"protocol mismatch: the server side speaks version {hello.protocol}, the worker "
                f"{protocol.PROTOCOL_VERSION}; the server and the library come from different pytriton installations"
            )
        if hello.instance != self._instance:
            return f"instance {hello.instance} connected to the handler of instance {self._instance}"
        return None

    def greet(self, connection: Connection, hello: protocol.Hello) -> None:
        """Answer the backend's greeting on its data connection.

        The backend runs inside tritonserver (`hello.proxy_pid` is the server's pid): it is no
        stub for the supervisor to watch, so `proxy_pid` stays as it was. Its input arenas take
        names no other instance of the server ever used (`protocol.Welcome.arena_stem` and a
        server-wide generation), so no mapping of an earlier greeter can be mistaken for them.
        """
        error = self._refusal(hello)
        if error is None:
            self._greetings += 1
            if self._greetings > 1:  # a reload: Triton's new instance took over from the one before
                self._on_proxy_replaced()
            logger.debug("Model '%s' instance %d: the backend in pid %d greeted", self._model_name, self._instance,
                         hello.proxy_pid)
            for other in list(self.connections.values()):  # one greeter at a time: one arena of answers
                if other is not connection:
                    self.drop(other)
        welcome = protocol.Welcome(protocol.PROTOCOL_VERSION, os.getpid(), error, self._data_path or "",
                                   self._arena_stem, self._metrics_path, self._greetings)
        self.send(connection, protocol.encode(welcome))

    def _welcome(self, hello: protocol.Hello) -> protocol.Welcome:
        error = self._refusal(hello)
        if error is None:
            if hello.proxy_pid != self.proxy_pid:
                if self.proxy_pid is not None:
                    self._on_proxy_replaced()
                self.proxy_pid = hello.proxy_pid
            logger.debug("Model '%s' instance %d: proxy pid %d greeted", self._model_name, self._instance,
                         hello.proxy_pid)
        return protocol.Welcome(protocol.PROTOCOL_VERSION, os.getpid(), error, self._data_path or "")

    def accept(self) -> None:
        """Take every pending data connection.

        A handler has one proxy (its Triton instance): a newer connection replaces the ones
        before it, whose stub died or was replaced (one arena serves the one proxy's answers).
        """
        while True:
            try:
                opened = channel.accept(self.listener)
            except OSError:
                logger.exception("Model '%s': accepting a proxy's data connection failed", self._model_name)
                return
            if opened is None:
                return
            opened.set_timeouts(None, SEND_TIMEOUT_S)
            for older in list(self.connections.values()):
                self.drop(older)
            self.connections[opened.fileno()] = Connection(opened, opened.peer_pid())
            self._poller.register(opened.fileno(), select.POLLIN)

    def send(self, connection: Connection, header: bytes, payload: Sequence[Any] = ()) -> bool:
        """Send one message to a proxy; False when its connection is gone (and now dropped).

        A proxy whose queue stays full (it reads a stream slower than the callable yields) is
        waited for as long as its process lives.
        """
        if connection.channel.closed:
            return False
        try:
            while True:
                try:
                    connection.channel.send(header, payload)
                    return True
                except BlockingIOError:
                    if not pid_alive(connection.proxy_pid):
                        break
        except ChannelClosed:
            pass
        self.drop(connection)
        return False

    def drop(self, connection: Connection) -> None:
        """Forget a connection whose proxy is gone (its stub died or was unloaded)."""
        fd = connection.channel.fileno()
        if self.connections.get(fd) is connection:
            del self.connections[fd]
            self._poller.unregister(fd)
        connection.channel.close()

    def close(self) -> None:
        """Close every socket and remove the socket files."""
        for connection in list(self.connections.values()):
            self.drop(connection)
        for metrics in self._metrics_connections.values():
            metrics.close()
        self._metrics_connections.clear()
        self.listener.close()
        self.metrics_listener.close()
        self.control.close(linger=0)
        for path in (self._control_path, self._data_path, self._metrics_path):
            if path is not None:
                try:
                    os.unlink(path)
                except FileNotFoundError:
                    pass
