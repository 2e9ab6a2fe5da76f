"""The data path of the hop: one Unix ``SOCK_SEQPACKET`` connection between a proxy and a worker handler.

Every batch and every answer crosses this connection. It is a plain kernel socket because the
round trip is the floor of every request's latency (measured by ``bench/hop.py`` on this
project's 2-core machine: 35 us for a SEQPACKET pair against 85 us for a ZeroMQ DEALER/ROUTER
over ``ipc://``, whose I/O threads add four thread wake-ups per round trip). The thread blocked
in `Channel.receive` is the one the kernel wakes, so the worker's handler thread receives its
batch itself, and the proxy's `execute` its answer. Message boundaries are kept by the kernel,
and a peer that dies (``kill -9`` included) closes its end: the other side reads an end of file
at once instead of waiting for a liveness check.

ZeroMQ stays for the control channel (`pytriton.ipc.protocol.Hello` / ``Welcome``), where its
automatic reconnection and identities help and speed does not matter.

One message is a 12-byte prefix (magic, header length, payload length), the header (see
`pytriton.ipc.protocol.encode`), zeros up to the next multiple of 8 bytes, and the payload (the
inline tensor bytes, see `pytriton.ipc.codec`). It goes as one datagram, gathered from its parts by ``sendmsg`` with no
copy in Python; a message larger than `DATAGRAM_BYTES` goes as several consecutive datagrams,
which only the sender's lock keeps together.
"""

from __future__ import annotations

import errno
import os
import socket
import struct
import threading
from typing import Any, List, Optional, Sequence, Tuple

DATAGRAM_BYTES = 128 * 1024
"""The largest datagram sent; the kernel's default send buffer (208 KiB) holds one with room to spare."""
_SEND_BUFFER_BYTES = 1 << 20
"""Asked of the kernel for each socket (it caps the request at ``net.core.wmem_max``)."""
_PREFIX = struct.Struct("<III")
_MAGIC = 0x70797432  # "pyt2": a message of this framing, not stray bytes
PREFIX_BYTES = _PREFIX.size
_ALIGNMENT = 8
_PAD = bytes(_ALIGNMENT)
_GONE = frozenset({errno.EPIPE, errno.ECONNRESET, errno.ECONNREFUSED, errno.ENOTCONN, errno.EBADF})
"""What a send or receive fails with when the peer (or this end) has closed the connection."""


class ChannelClosed(Exception):
    """The peer closed its end of the connection (it ended, was killed, or unloaded)."""


def _padding(size: int) -> int:
    """Bytes after the header that start the payload 8-byte aligned (the buffers are), so the
    arrays viewing it are aligned as numpy and torch expect."""
    return -size % _ALIGNMENT


def pid_alive(pid: int) -> bool:
    """Whether process `pid` exists (a process of another user counts): the liveness check of a
    peer that neither answers nor closes its end."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _timeval(seconds: Optional[float]) -> bytes:
    whole = int(seconds or 0)
    return struct.pack("ll", whole, int(((seconds or 0) - whole) * 1_000_000))


def set_timeouts(sock: socket.socket, receive_s: Optional[float], send_s: Optional[float] = None) -> None:
    """Kernel-side timeouts (``SO_RCVTIMEO``/``SO_SNDTIMEO``) on a blocking socket; None waits forever.

    Python's own socket timeouts would call ``poll`` before every ``recv``: one system call more
    per message. With kernel timeouts the socket stays in blocking mode and a call that times
    out raises `BlockingIOError`.
    """
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, _timeval(receive_s))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, _timeval(send_s))


def _tune(sock: socket.socket) -> None:
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, _SEND_BUFFER_BYTES)
    except OSError:
        pass


def listen(path: str) -> socket.socket:
    """A listening SEQPACKET socket at `path` (mode 0600: only this user may connect)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        try:
            os.unlink(path)  # a socket file left by a dead worker of the same endpoint
        except FileNotFoundError:
            pass
        sock.bind(path)
        os.chmod(path, 0o600)
        sock.listen(16)
    except BaseException:
        sock.close()
        raise
    return sock


def accept(listener: socket.socket) -> Optional[Channel]:
    """The next pending connection of `listener` as a `Channel` (None when there is none)."""
    try:
        sock, _ = listener.accept()
    except (BlockingIOError, InterruptedError):
        return None
    sock.setblocking(True)
    _tune(sock)
    return Channel(sock)


def connect(path: str) -> Channel:
    """A `Channel` connected to the listener at `path`.

    Raises:
        OSError: nobody listens there (yet).
    """
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        _tune(sock)
        sock.connect(path)
    except BaseException:
        sock.close()
        raise
    return Channel(sock)


class Channel:
    """One end of a SEQPACKET connection, sending and receiving whole messages.

    Sends may come from several threads (each message is sent under a lock); receives from one
    thread at a time. `receive` reads into a buffer the channel reuses, so what it returns is
    valid until the next `receive` (or use ``keep=True``).
    """

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._buffer = bytearray(DATAGRAM_BYTES)
        self._view = memoryview(self._buffer)  # sliced per message: no copy
        self._send_lock = threading.Lock()
        self.closed = False

    def fileno(self) -> int:
        return self.sock.fileno()

    def peer_pid(self) -> int:
        """The pid of the process at the other end (``SO_PEERCRED``)."""
        creds = self.sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        pid, _, _ = struct.unpack("3i", creds)
        return int(pid)

    def set_timeouts(self, receive_s: Optional[float], send_s: Optional[float] = None) -> None:
        set_timeouts(self.sock, receive_s, send_s)

    def send(self, header: bytes, payload: Sequence[Any] = ()) -> None:
        """Send one message: `header` and the `payload` buffers, back to back.

        Raises:
            ChannelClosed: the peer is gone.
            BlockingIOError: the send timeout passed with the peer's queue still full.
        """
        size = 0
        for part in payload:
            size += memoryview(part).nbytes
        pad = _padding(PREFIX_BYTES + len(header))
        parts: List[Any] = [_PREFIX.pack(_MAGIC, len(header), size), header, _PAD[:pad], *payload]
        try:
            with self._send_lock:
                if PREFIX_BYTES + len(header) + pad + size <= DATAGRAM_BYTES:
                    self.sock.sendmsg(parts)
                else:
                    self._send_in_pieces(parts)
        except OSError as exc:
            if exc.errno not in _GONE:
                raise
            raise ChannelClosed(str(exc)) from exc

    def _send_in_pieces(self, parts: List[Any]) -> None:
        whole = memoryview(b"".join(parts))
        for start in range(0, len(whole), DATAGRAM_BYTES):
            piece = whole[start : start + DATAGRAM_BYTES]
            while True:
                try:
                    self.sock.send(piece)
                    break
                except BlockingIOError:
                    continue  # a send timeout in the middle of a message: the rest must follow it

    def receive(self, keep: bool = False, wait: bool = True) -> Optional[Tuple[memoryview, memoryview]]:
        """The next message's header and payload, read-only; None when the receive timeout passed first.

        Args:
            keep: read into memory of this message's own, valid for as long as it is referenced
                (for a message received while arrays still view the previous one), instead of
                into the channel's reused buffer.
            wait: False returns None at once when no message is there.

        Raises:
            ChannelClosed: the peer closed the connection (or sent something unreadable).
        """
        flags = 0 if wait else socket.MSG_DONTWAIT
        try:
            if keep:
                view = memoryview(self.sock.recv(DATAGRAM_BYTES, flags))
                got = view.nbytes
            else:
                view = self._view
                got = self.sock.recv_into(self._buffer, 0, flags)
        except BlockingIOError:
            return None
        except OSError as exc:
            if exc.errno not in _GONE:
                raise
            raise ChannelClosed(str(exc)) from exc
        if got == 0:
            raise ChannelClosed("the peer closed the connection")
        if got < PREFIX_BYTES:
            raise ChannelClosed(f"a message of {got} bytes is shorter than its prefix")
        magic, header_size, payload_size = _PREFIX.unpack_from(view)
        if magic != _MAGIC:
            raise ChannelClosed(f"a message with magic {magic:#x} is not of the pytriton wire")
        end = PREFIX_BYTES + header_size
        start = end + _padding(end)
        total = start + payload_size
        if total > got:
            view = self._rest(view, got, total)
        return view[PREFIX_BYTES:end], view[start:total].toreadonly()

    def _rest(self, first: memoryview, got: int, total: int) -> memoryview:
        """Read the datagrams that continue a message into a buffer of its own."""
        whole = bytearray(total)
        whole[:got] = first[:got]
        view = memoryview(whole)
        while got < total:
            try:
                size = self.sock.recv_into(view[got:], min(DATAGRAM_BYTES, total - got))
            except BlockingIOError:
                continue  # the sender is in the middle of the message: its next piece comes
            if size == 0:
                raise ChannelClosed("the peer closed the connection in the middle of a message")
            got += size
        return view

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            try:
                self.sock.close()
            except OSError:
                pass
