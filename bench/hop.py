"""Micro-benchmark of the per-batch hop between two processes (docs/design/hop.md).

The proxy (in Triton's Python-backend stub) and the worker (in the user's process) exchange one
request and one answer per batch; pytriton does it over a Unix SOCK_SEQPACKET connection (it
used a ZeroMQ DEALER/ROUTER pair on ``ipc://`` before, the baseline of the tables below). This
script measures what that round trip costs against the alternatives ZeroMQ and the OS offer, in two
freshly forked processes per measurement (a client playing the proxy, a server echoing like the
worker), idle and with two CPU burners contending for the cores:

- ZeroMQ DEALER/ROUTER over ipc (our setup: default context, blocking receive with RCVTIMEO), and
  the same with zero-copy frames, a ``zmq.Poller``, IMMEDIATE and small HWMs, ``tcp://127.0.0.1``,
  a short spin of non-blocking receives, and a PAIR socket;
- an AF_UNIX socket pair, SOCK_STREAM (length-prefixed) and SOCK_SEQPACKET, blocking with
  SO_RCVTIMEO as the liveness period;
- a shared-memory ring (one ``/dev/shm`` file, one ring per direction) with doorbells: an eventfd
  per direction waited on with ``poll`` (plain, after a short spin, or through a ``zmq.Poller``
  that also watches an idle ZeroMQ control socket, as a worker would), or a SOCK_SEQPACKET pair
  carrying one byte per message.

Payloads of 64 B and 64 KiB travel inline (as our inline limit allows); 1 MiB travels, for every
variant alike, in a shared-memory arena, the message carrying only a 64-byte descriptor, as the
library does with large tensors. Each side copies what it receives out of the transport once.

Per variant and size: median, p90 and p99 of the round trip in microseconds, round trips per
second, and CPU seconds per 10k round trips on each side (all threads of the process, so
ZeroMQ's I/O thread counts). Usage::

    python bench/hop.py [--quick] [--count N] [--json PATH|-] [--variants NAME ...] [--sizes 64 ...]

Markdown tables go to stdout, progress to stderr. Linux only (eventfd, SOCK_SEQPACKET, /dev/shm);
needs Python 3.10+ for ``os.eventfd``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import mmap
import os
import platform
import resource
import secrets
import select
import shutil
import signal
import socket
import struct
import sys
import tempfile
import time
import traceback
from typing import Any, Callable, Dict, List, Optional, Sequence

import numpy as np
import zmq

INLINE_MAX = 64 * 1024  # the library's inline limit: larger tensors go through the arena
DESCRIPTOR = struct.Struct("<QQ48x")  # (offset, length) padded to 64 bytes: the message of an arena payload
STOP = b"\x00"  # one byte: every real message is at least 64
LIVENESS_MS = 1000  # receive timeout after which a side checks that its peer still lives
SLOTS = 4  # messages a ring holds
SLOT_BYTES = 64 + INLINE_MAX  # length word, padding, payload
RING_BYTES = 128 + SLOTS * SLOT_BYTES  # two counters on their own cache lines, then the slots
SIZES = (64, 64 * 1024, 1024 * 1024)
SHM_DIR = "/dev/shm"
MIN_COUNT = 20  # round trips measured per case even past --max-s


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def cpu_seconds() -> float:
    """User + system CPU time of this process, all its threads (ZeroMQ's I/O thread included)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class PeerGone(Exception):
    """The other side of the hop died or closed: the measurement ends."""


# --- endpoints: one side of one transport ---------------------------------------------------------


class Endpoint:
    """One side of a transport: blocking `recv` that returns an owned message, `send`, `try_recv`.

    `peer_alive` is called whenever a wait times out (every LIVENESS_MS), as the library's sides
    check each other's pid; the runner sets it.
    """

    peer_alive: Callable[[], bool] = staticmethod(lambda: True)

    def send(self, data: Any) -> None:
        raise NotImplementedError

    def recv(self) -> Any:
        raise NotImplementedError

    def try_recv(self) -> Optional[Any]:
        """A message if one is there now, else None; never blocks (for the spinning variants)."""
        raise NotImplementedError

    def check_peer(self) -> None:
        if not self.peer_alive():
            raise PeerGone()

    def close(self) -> None:
        pass


class SpinEndpoint(Endpoint):
    """Tries a non-blocking receive for up to `spin_us` before the wrapped endpoint blocks."""

    def __init__(self, inner: Endpoint, spin_us: float) -> None:
        self._inner = inner
        self._spin_ns = int(spin_us * 1000)

    def send(self, data: Any) -> None:
        self._inner.send(data)

    def recv(self) -> Any:
        deadline = time.perf_counter_ns() + self._spin_ns
        while time.perf_counter_ns() < deadline:
            message = self._inner.try_recv()
            if message is not None:
                return message
        return self._inner.recv()

    def close(self) -> None:
        self._inner.close()

    @property  # type: ignore[override]
    def peer_alive(self) -> Callable[[], bool]:
        return self._inner.peer_alive

    @peer_alive.setter
    def peer_alive(self, check: Callable[[], bool]) -> None:
        self._inner.peer_alive = check


class ZmqEndpoint(Endpoint):
    """A ZeroMQ socket; a ROUTER side keeps the identity of the last sender to answer it."""

    def __init__(self, kind: int, address: str, bind: bool, copy: bool = True, poller: bool = False,
                 options: Optional[Dict[int, int]] = None) -> None:
        self._context = zmq.Context()  # io_threads=1, as both sides of the library have
        self._socket = self._context.socket(kind)
        self._socket.setsockopt(zmq.LINGER, 0)
        self._socket.setsockopt(zmq.RCVTIMEO, LIVENESS_MS)
        for option, value in (options or {}).items():
            self._socket.setsockopt(option, value)
        if not copy:
            self._socket.copy_threshold = 0  # pyzmq copies under 64 KiB otherwise, whatever copy= says
        self._router = kind == zmq.ROUTER
        self._copy = copy
        self._identity = b""
        self._poller: Optional[zmq.Poller] = None
        if poller:
            self._poller = zmq.Poller()
            self._poller.register(self._socket, zmq.POLLIN)
        if bind:
            self._socket.bind(address)
        else:
            self._socket.connect(address)

    def send(self, data: Any) -> None:
        if self._router:
            self._socket.send_multipart([self._identity, data], copy=self._copy)
        else:
            self._socket.send(data, copy=self._copy)

    def _take(self, flags: int) -> Any:
        if self._router:
            self._identity, message = self._socket.recv_multipart(flags, copy=self._copy)
            return message
        return self._socket.recv(flags, copy=self._copy)

    def recv(self) -> Any:
        while True:
            try:
                if self._poller is not None:
                    if not self._poller.poll(LIVENESS_MS):
                        self.check_peer()
                        continue
                    return self._take(zmq.NOBLOCK)
                return self._take(0)
            except zmq.Again:
                self.check_peer()

    def try_recv(self) -> Optional[Any]:
        try:
            return self._take(zmq.NOBLOCK)
        except zmq.Again:
            return None

    def close(self) -> None:
        self._socket.close(linger=0)
        self._context.term()


def _set_receive_timeout(sock: socket.socket) -> None:
    """A kernel receive timeout: a blocking recv() returns EAGAIN after it, with no extra poll()."""
    seconds, millis = divmod(LIVENESS_MS, 1000)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack("ll", seconds, millis * 1000))


class SeqpacketEndpoint(Endpoint):
    """One end of an AF_UNIX SOCK_SEQPACKET pair: one syscall per message, EOF when the peer dies."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        _set_receive_timeout(sock)

    def send(self, data: Any) -> None:
        self._sock.send(data)

    def recv(self) -> Any:
        while True:
            try:
                message = self._sock.recv(INLINE_MAX + 64)
            except BlockingIOError:
                self.check_peer()
                continue
            if not message:
                raise PeerGone()
            return message

    def try_recv(self) -> Optional[Any]:
        try:
            message = self._sock.recv(INLINE_MAX + 64, socket.MSG_DONTWAIT)
        except BlockingIOError:
            return None
        if not message:
            raise PeerGone()
        return message

    def close(self) -> None:
        self._sock.close()


class StreamEndpoint(Endpoint):
    """One end of an AF_UNIX SOCK_STREAM pair, messages framed by a 4-byte length (two recv calls)."""

    _LENGTH = struct.Struct("<I")

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        _set_receive_timeout(sock)
        self._header = bytearray(4)

    def send(self, data: Any) -> None:
        view = memoryview(data)
        sent = self._sock.sendmsg([self._LENGTH.pack(len(view)), view])
        if sent < 4 + len(view):  # a partial write of a large message: the rest goes with sendall
            remainder = (self._LENGTH.pack(len(view)) + bytes(view))[sent:]
            self._sock.sendall(remainder)

    def _fill(self, view: memoryview) -> None:
        got = 0
        while got < len(view):
            try:
                count = self._sock.recv_into(view[got:])
            except BlockingIOError:
                self.check_peer()
                continue
            if count == 0:
                raise PeerGone()
            got += count

    def recv(self) -> Any:
        self._fill(memoryview(self._header))
        (length,) = self._LENGTH.unpack(self._header)
        message = bytearray(length)
        self._fill(memoryview(message))
        return message

    def try_recv(self) -> Optional[Any]:
        raise NotImplementedError("no spinning variant over a stream socket")

    def close(self) -> None:
        self._sock.close()


class EventfdBell:
    """Doorbell on an eventfd per direction: ring = write 1, wait = poll(timeout) then read."""

    def __init__(self, ring_fd: int, wait_fd: int, control: Optional[str] = None) -> None:
        self._ring_fd = ring_fd
        self._wait_fd = wait_fd
        self._context: Optional[zmq.Context] = None
        if control is None:
            self._poll: Any = select.poll()
            self._poll.register(wait_fd, select.POLLIN)
        else:  # the worker's shape: the data doorbell and an (idle) ZeroMQ control socket in one wait
            self._context = zmq.Context()
            self._control = self._context.socket(zmq.ROUTER)
            self._control.setsockopt(zmq.LINGER, 0)
            self._control.bind(control)
            self._poll = zmq.Poller()
            self._poll.register(wait_fd, zmq.POLLIN)
            self._poll.register(self._control, zmq.POLLIN)

    def ring(self) -> None:
        os.eventfd_write(self._ring_fd, 1)

    def wait(self) -> bool:
        """True when the doorbell rang (its count is then reset), False on the liveness timeout."""
        events = self._poll.poll(LIVENESS_MS)
        for fd, _ in events:
            if fd == self._wait_fd:
                os.eventfd_read(self._wait_fd)
                return True
        return False

    def close(self) -> None:
        if self._context is not None:
            self._control.close(linger=0)
            self._context.term()


class SocketBell:
    """Doorbell on a SOCK_SEQPACKET pair: ring = one byte, wait = blocking recv with SO_RCVTIMEO.

    Unlike an eventfd, the peer's death shows as EOF at once.
    """

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        _set_receive_timeout(sock)

    def ring(self) -> None:
        self._sock.send(b"\x01")

    def wait(self) -> bool:
        try:
            if not self._sock.recv(64):
                raise PeerGone()
        except BlockingIOError:
            return False
        return True

    def close(self) -> None:
        self._sock.close()


class RingEndpoint(Endpoint):
    """Single-producer single-consumer rings in one shared-memory file, one per direction.

    A ring is a `tail` counter (written by the producer), a `head` counter (written by the
    consumer) on their own cache lines, and SLOTS slots of a length word plus up to INLINE_MAX
    bytes. The producer writes the slot, then publishes `tail`, then rings the doorbell; the
    consumer reads `tail`, copies the slot out, then publishes `head`. 8-byte aligned stores are
    atomic and ordered on x86-64 (and on other 64-bit targets numpy's stores are at least atomic).
    """

    _LENGTH = struct.Struct("<I")

    def __init__(self, path: str, side: str, bell: Any) -> None:
        fd = os.open(path, os.O_RDWR)
        try:
            self._map = mmap.mmap(fd, 2 * RING_BYTES)
        finally:
            os.close(fd)
        out_ring, in_ring = (0, RING_BYTES) if side == "client" else (RING_BYTES, 0)
        self._out = out_ring
        self._in = in_ring
        counters = np.ndarray((2 * RING_BYTES // 8,), dtype=np.uint64, buffer=self._map)
        self._out_tail, self._out_head = out_ring // 8, out_ring // 8 + 8
        self._in_tail, self._in_head = in_ring // 8, in_ring // 8 + 8
        self._counters = counters
        self._sent = int(counters[self._out_tail])
        self._taken = int(counters[self._in_head])
        self._bell = bell

    def send(self, data: Any) -> None:
        view = memoryview(data).cast("B")
        while self._sent - int(self._counters[self._out_head]) >= SLOTS:  # full: never in a ping-pong
            time.sleep(0)
        slot = self._out + 128 + (self._sent % SLOTS) * SLOT_BYTES
        self._LENGTH.pack_into(self._map, slot, len(view))
        self._map[slot + 64 : slot + 64 + len(view)] = view
        self._sent += 1
        self._counters[self._out_tail] = self._sent
        self._bell.ring()

    def try_recv(self) -> Optional[Any]:
        if int(self._counters[self._in_tail]) == self._taken:
            return None
        slot = self._in + 128 + (self._taken % SLOTS) * SLOT_BYTES
        (length,) = self._LENGTH.unpack_from(self._map, slot)
        message = self._map[slot + 64 : slot + 64 + length]  # a copy out of the ring
        self._taken += 1
        self._counters[self._in_head] = self._taken
        return message

    def recv(self) -> Any:
        while True:
            message = self.try_recv()
            if message is not None:
                return message
            if not self._bell.wait():
                self.check_peer()

    def close(self) -> None:
        self._bell.close()
        del self._counters
        self._map.close()


# --- variants -------------------------------------------------------------------------------------


@dataclasses.dataclass
class Variant:
    """A transport under test: what it needs before the fork, how each side opens it."""

    name: str
    description: str
    prepare: Callable[[str], Dict[str, Any]]  # work folder -> what both sides inherit
    open: Callable[[str, Dict[str, Any]], Endpoint]  # side, prepared -> endpoint


def _ipc(folder: str) -> Dict[str, Any]:
    return {"address": f"ipc://{folder}/hop.sock"}


def _tcp(folder: str) -> Dict[str, Any]:
    with socket.socket() as probe:  # a free port; the server binds it a moment later
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return {"address": f"tcp://127.0.0.1:{port}"}


def _dealer_router(**options: Any) -> Callable[[str, Dict[str, Any]], Endpoint]:
    def open_side(side: str, prepared: Dict[str, Any]) -> Endpoint:
        kind = zmq.DEALER if side == "client" else zmq.ROUTER
        return ZmqEndpoint(kind, prepared["address"], bind=side == "server", **options)

    return open_side


def _pair(side: str, prepared: Dict[str, Any]) -> Endpoint:
    return ZmqEndpoint(zmq.PAIR, prepared["address"], bind=side == "server")


def _spin(open_side: Callable[[str, Dict[str, Any]], Endpoint], spin_us: float) -> Callable[..., Endpoint]:
    def open_spinning(side: str, prepared: Dict[str, Any]) -> Endpoint:
        return SpinEndpoint(open_side(side, prepared), spin_us)

    return open_spinning


def _socketpair(kind: int) -> Callable[[str], Dict[str, Any]]:
    def prepare(folder: str) -> Dict[str, Any]:
        client, server = socket.socketpair(socket.AF_UNIX, kind)
        return {"client": client, "server": server, "fds": [client, server]}

    return prepare


def _unix(endpoint: Callable[[socket.socket], Endpoint]) -> Callable[[str, Dict[str, Any]], Endpoint]:
    def open_side(side: str, prepared: Dict[str, Any]) -> Endpoint:
        for other in prepared["fds"]:
            if other is not prepared[side]:
                other.close()  # so that this side sees EOF when the peer dies
        return endpoint(prepared[side])

    return open_side


def _ring_file(folder: str) -> Dict[str, Any]:
    path = os.path.join(SHM_DIR, f"pytriton-hopbench-{os.getpid()}-{secrets.token_hex(4)}")
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.ftruncate(fd, 2 * RING_BYTES)
    finally:
        os.close(fd)
    return {"ring": path, "unlink": [path], "control": f"ipc://{folder}/control.sock"}


def _eventfd_prepare(folder: str) -> Dict[str, Any]:
    if not hasattr(os, "eventfd"):
        raise RuntimeError(f"os.eventfd needs Python 3.10+ on Linux; this is Python {platform.python_version()}")
    prepared = _ring_file(folder)
    prepared["to_server"] = os.eventfd(0, os.EFD_CLOEXEC)
    prepared["to_client"] = os.eventfd(0, os.EFD_CLOEXEC)
    prepared["raw_fds"] = [prepared["to_server"], prepared["to_client"]]
    return prepared


def _eventfd_ring(control: bool) -> Callable[[str, Dict[str, Any]], Endpoint]:
    def open_side(side: str, prepared: Dict[str, Any]) -> Endpoint:
        ring_fd, wait_fd = (
            (prepared["to_server"], prepared["to_client"])
            if side == "client"
            else (prepared["to_client"], prepared["to_server"])
        )
        address = prepared["control"] if control and side == "server" else None
        return RingEndpoint(prepared["ring"], side, EventfdBell(ring_fd, wait_fd, address))

    return open_side


def _socketbell_prepare(folder: str) -> Dict[str, Any]:
    prepared = _ring_file(folder)
    prepared.update(_socketpair(socket.SOCK_SEQPACKET)(folder))
    return prepared


def _socketbell_ring(side: str, prepared: Dict[str, Any]) -> Endpoint:
    for other in prepared["fds"]:
        if other is not prepared[side]:
            other.close()
    return RingEndpoint(prepared["ring"], side, SocketBell(prepared[side]))


SPIN_US = 50.0


def variants() -> List[Variant]:
    return [
        Variant("zmq_dealer_ipc", "(a) DEALER/ROUTER ipc, default context, blocking recv + RCVTIMEO: ours",
                _ipc, _dealer_router()),
        Variant("zmq_dealer_ipc_nocopy", "(b) same, copy=False frames on both sides (copy_threshold 0)",
                _ipc, _dealer_router(copy=False)),
        Variant("zmq_dealer_ipc_poller", "(b) same, zmq.Poller.poll(timeout) then recv(NOBLOCK)",
                _ipc, _dealer_router(poller=True)),
        # Not SNDHWM: a ROUTER drops answers silently at its high-water mark; with SNDHWM=4 the
        # ping-pong lost one in 2 to 4 runs of 8 under load (flow-control credit lags in the I/O thread).
        Variant("zmq_dealer_ipc_opts", "(b) same, IMMEDIATE=1, RCVHWM=4, SNDBUF=RCVBUF=1 MiB",
                _ipc, _dealer_router(options={zmq.IMMEDIATE: 1, zmq.RCVHWM: 4,
                                              zmq.SNDBUF: 1 << 20, zmq.RCVBUF: 1 << 20})),
        Variant("zmq_dealer_tcp", "(b) DEALER/ROUTER over tcp://127.0.0.1", _tcp, _dealer_router()),
        Variant("zmq_dealer_ipc_spin", f"(f) DEALER/ROUTER ipc, recv(NOBLOCK) spin {SPIN_US:g} us, then block",
                _ipc, _spin(_dealer_router(), SPIN_US)),
        Variant("zmq_pair_ipc", "(c) PAIR over ipc", _ipc, _pair),
        Variant("unix_stream", "(d) AF_UNIX SOCK_STREAM socketpair, length-prefixed, SO_RCVTIMEO",
                _socketpair(socket.SOCK_STREAM), _unix(StreamEndpoint)),
        Variant("unix_seqpacket", "(d) AF_UNIX SOCK_SEQPACKET socketpair, SO_RCVTIMEO",
                _socketpair(socket.SOCK_SEQPACKET), _unix(SeqpacketEndpoint)),
        Variant("shm_eventfd", "(e) shm ring + eventfd doorbells, poll(timeout) + eventfd_read",
                _eventfd_prepare, _eventfd_ring(control=False)),
        Variant("shm_eventfd_zmqpoll", "(e) same, server waits in zmq.Poller on eventfd + idle ROUTER",
                _eventfd_prepare, _eventfd_ring(control=True)),
        Variant("shm_eventfd_spin", f"(f) shm ring + eventfd, spin {SPIN_US:g} us on the ring, then poll",
                _eventfd_prepare, _spin(_eventfd_ring(control=False), SPIN_US)),
        Variant("shm_sockbell", "(e) shm ring + SOCK_SEQPACKET 1-byte doorbells (EOF = peer died)",
                _socketbell_prepare, _socketbell_ring),
    ]


# --- the two sides --------------------------------------------------------------------------------


class Arena:
    """The shared-memory arena of payloads over INLINE_MAX: request half and answer half.

    The message carries a 64-byte descriptor; the receiver copies the payload out, as our worker
    and proxy copy tensors out of the sender's arena.
    """

    def __init__(self, path: str, size: int) -> None:
        fd = os.open(path, os.O_RDWR)
        try:
            self._map = mmap.mmap(fd, 2 * size)
        finally:
            os.close(fd)
        self._size = size

    @staticmethod
    def create(size: int) -> str:
        path = os.path.join(SHM_DIR, f"pytriton-hopbench-arena-{os.getpid()}-{secrets.token_hex(4)}")
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.ftruncate(fd, 2 * size)
        finally:
            os.close(fd)
        return path

    def put(self, half: int, data: Any) -> bytes:
        offset = half * self._size
        view = memoryview(data)
        self._map[offset : offset + len(view)] = view
        return DESCRIPTOR.pack(offset, len(view))

    def take(self, descriptor: Any) -> bytes:
        offset, length = DESCRIPTOR.unpack(memoryview(descriptor))
        return self._map[offset : offset + length]

    def close(self) -> None:
        self._map.close()


def serve(endpoint: Endpoint, arena: Optional[Arena]) -> Dict[str, Any]:
    """Echo every message (through the arena's answer half for large payloads) until STOP."""
    served = 0
    start_cpu = 0.0
    while True:
        message = endpoint.recv()
        if len(message) == len(STOP):
            break
        if served == 0:
            start_cpu = cpu_seconds()  # from the first round trip on: set-up excluded
        served += 1
        endpoint.send(arena.put(1, arena.take(message)) if arena is not None else message)
    spent = cpu_seconds() - start_cpu
    return {"served": served, "cpu_s": spent, "cpu_round_trips": max(served - 1, 1)}


def drive(endpoint: Endpoint, arena: Optional[Arena], size: int, count: int, warmup: int,
          max_s: float) -> Dict[str, Any]:
    """Send `warmup` then up to `count` round trips (or until `max_s` passed, but MIN_COUNT at least)."""
    payload = os.urandom(size)

    def round_trip() -> None:
        endpoint.send(arena.put(0, payload) if arena is not None else payload)
        answer = endpoint.recv()
        if arena is not None:
            answer = arena.take(answer)
        if len(answer) != size:
            raise RuntimeError(f"answer of {len(answer)} bytes to a request of {size}")

    for _ in range(warmup):
        round_trip()
    times = np.empty(count, dtype=np.int64)
    clock = time.perf_counter_ns
    deadline = clock() + int(max_s * 1e9)
    start_cpu = cpu_seconds()
    start = clock()
    done = 0
    while done < count:
        before = clock()
        round_trip()
        after = clock()
        times[done] = after - before
        done += 1
        if after > deadline and done >= MIN_COUNT:  # percentiles of fewer would say nothing
            break
    elapsed = clock() - start
    spent = cpu_seconds() - start_cpu
    endpoint.send(STOP)
    micros = times[:done] / 1000.0
    return {
        "count": done,
        "median_us": float(np.median(micros)),
        "p90_us": float(np.percentile(micros, 90)),
        "p99_us": float(np.percentile(micros, 99)),
        "mean_us": float(micros.mean()),
        "round_trips_per_s": done / (elapsed / 1e9),
        "cpu_client_s_per_10k": spent / done * 10_000,
    }


def _child(work: Callable[[], Dict[str, Any]], result_fd: int) -> None:
    """Body of a forked side: run, write the JSON result (or the error) to the pipe, _exit."""
    code = 0
    try:
        result = work()
    except BaseException:  # noqa: BLE001 - everything goes back to the parent as text
        result = {"error": traceback.format_exc(limit=4)}
        code = 1
    try:
        with os.fdopen(result_fd, "w") as pipe:
            json.dump(result, pipe)
    finally:
        os._exit(code)


def _read_result(fd: int, deadline: float) -> Dict[str, Any]:
    chunks = []
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            raise TimeoutError("no result before the deadline")
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        chunks.append(chunk)
    text = b"".join(chunks).decode()
    if not text:
        raise RuntimeError("the process died without a result")
    return json.loads(text)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _reap(pid: int, deadline: float) -> None:
    """Wait for a child until `deadline`, then kill it; never leaves a zombie."""
    while time.monotonic() < deadline:
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done:
            return
        time.sleep(0.005)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    os.waitpid(pid, 0)


def measure(variant: Variant, size: int, count: int, warmup: int, max_s: float) -> Dict[str, Any]:
    """One measurement: fork a server and a client on fresh transport ends; gather their figures."""
    folder = tempfile.mkdtemp(prefix="hopbench-")
    prepared: Dict[str, Any] = {}
    arena_path = Arena.create(size) if size > INLINE_MAX else None
    pids: List[int] = []
    parent = os.getpid()
    try:
        prepared = variant.prepare(folder)
        server_read, server_write = os.pipe()
        ready_read, ready_write = os.pipe()
        server_pid = os.fork()
        if server_pid == 0:
            os.close(server_read)
            os.close(ready_read)

            def run_server() -> Dict[str, Any]:
                endpoint = variant.open("server", prepared)
                endpoint.peer_alive = lambda: os.getppid() == parent
                os.write(ready_write, b"R")  # bound: the client's first connect succeeds, no 100 ms retry
                arena = Arena(arena_path, size) if arena_path else None
                try:
                    return serve(endpoint, arena)
                finally:
                    endpoint.close()

            _child(run_server, server_write)
        pids.append(server_pid)
        os.close(server_write)
        os.close(ready_write)
        deadline = time.monotonic() + 10.0
        try:
            if not select.select([ready_read], [], [], 10.0)[0] or os.read(ready_read, 1) != b"R":
                raise RuntimeError("the server did not open its end: " + str(_read_result(server_read, deadline)))
        finally:
            os.close(ready_read)
        client_read, client_write = os.pipe()
        client_pid = os.fork()
        if client_pid == 0:
            os.close(client_read)
            os.close(server_read)

            def run_client() -> Dict[str, Any]:
                endpoint = variant.open("client", prepared)
                endpoint.peer_alive = lambda: _pid_alive(server_pid)
                arena = Arena(arena_path, size) if arena_path else None
                try:
                    return drive(endpoint, arena, size, count, warmup, max_s)
                finally:
                    endpoint.close()

            _child(run_client, client_write)
        pids.append(client_pid)
        os.close(client_write)
        _close_inherited(prepared)  # the parent keeps no end open: EOF must reach a side whose peer died
        deadline = time.monotonic() + max_s + 10.0
        try:
            client = _read_result(client_read, deadline)
            server = _read_result(server_read, deadline) if "error" not in client else {}
        finally:
            os.close(client_read)
            os.close(server_read)
        result = dict(client)
        if "error" in server:
            result["error"] = "server: " + server["error"]
        elif server:
            result["cpu_server_s_per_10k"] = server["cpu_s"] / server["cpu_round_trips"] * 10_000
        return result
    except (TimeoutError, RuntimeError, OSError) as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}
    finally:
        for pid in pids:
            _reap(pid, time.monotonic() + 5.0)
        _close_inherited(prepared)
        for path in prepared.get("unlink", []) + ([arena_path] if arena_path else []):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
        shutil.rmtree(folder, ignore_errors=True)


def _close_inherited(prepared: Dict[str, Any]) -> None:
    for sock in prepared.get("fds", []):
        sock.close()
    for fd in prepared.pop("raw_fds", []):
        os.close(fd)


# --- load -----------------------------------------------------------------------------------------


def start_burners(count: int) -> List[int]:
    """Processes that spin on the CPU until killed (or until their parent is gone)."""
    parent = os.getpid()
    pids = []
    for _ in range(count):
        pid = os.fork()
        if pid == 0:
            try:
                while os.getppid() == parent:
                    for _ in range(200_000):
                        pass
            finally:
                os._exit(0)
        pids.append(pid)
    return pids


def stop_burners(pids: Sequence[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    for pid in pids:
        os.waitpid(pid, 0)


# --- report ---------------------------------------------------------------------------------------


def _size_label(size: int) -> str:
    if size >= 1 << 20:
        return f"{size >> 20} MiB (arena)"
    if size >= 1 << 10:
        return f"{size >> 10} KiB"
    return f"{size} B"


def markdown(results: Sequence[Dict[str, Any]], baseline: str = "zmq_dealer_ipc") -> str:
    """One table per (load, size): the figures, and the median as a ratio to ours (baseline)."""
    lines: List[str] = []
    keys = []
    for row in results:
        key = (row["load"], row["size"])
        if key not in keys:
            keys.append(key)
    for load, size in keys:
        rows = [r for r in results if r["load"] == load and r["size"] == size]
        base = next((r for r in rows if r["variant"] == baseline and "error" not in r), None)
        title = "idle" if load == 0 else f"{load} CPU burners running"
        lines.append(f"### {_size_label(size)}, {title}")
        lines.append("")
        lines.append("| variant | median µs | p90 µs | p99 µs | round trips/s | median ÷ ours | "
                     "CPU s/10k client | CPU s/10k server | n |")
        lines.append("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
        for r in rows:
            if "error" in r:
                first = r["error"].strip().splitlines()[-1]
                lines.append(f"| {r['variant']} | error: {first} | | | | | | | |")
                continue
            ratio = f"{r['median_us'] / base['median_us']:.2f}" if base else "-"
            lines.append(
                f"| {r['variant']} | {r['median_us']:.1f} | {r['p90_us']:.1f} | {r['p99_us']:.1f} | "
                f"{r['round_trips_per_s']:,.0f} | {ratio} | {r['cpu_client_s_per_10k']:.2f} | "
                f"{r.get('cpu_server_s_per_10k', float('nan')):.2f} | {r['count']} |"
            )
        lines.append("")
    return "\n".join(lines)


# --- command line ---------------------------------------------------------------------------------


def main(argv: Optional[Sequence[str]] = None) -> int:
    names = [v.name for v in variants()]
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="few round trips per case: a smoke run of seconds")
    parser.add_argument("--count", type=int, help="measured round trips per case (default 2500; 100 with --quick)")
    parser.add_argument("--warmup", type=int, help="round trips before measuring (default 200; 10 with --quick)")
    parser.add_argument("--max-s", type=float, help="stop a case after this many seconds (default 1.5; 0.1 quick)")
    parser.add_argument("--variants", nargs="+", choices=names, default=names, metavar="NAME",
                        help=f"which transports (default all: {', '.join(names)})")
    parser.add_argument("--sizes", nargs="+", type=int, default=list(SIZES), metavar="BYTES",
                        help="payload sizes; over 65536 they travel in the arena (default 64 65536 1048576)")
    parser.add_argument("--loads", nargs="+", type=int, default=[0, 2], metavar="N",
                        help="CPU burner processes per pass (default 0 2: idle, then contended)")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON to PATH ('-': stdout)")
    args = parser.parse_args(argv)
    count = args.count or (100 if args.quick else 2500)
    warmup = args.warmup if args.warmup is not None else (10 if args.quick else 200)
    max_s = args.max_s or (0.1 if args.quick else 1.5)
    for size in args.sizes:
        if size < 64 or size > 1 << 30:
            parser.error(f"--sizes: {size} is out of range; expected 64 to {1 << 30} bytes")
    chosen = [v for v in variants() if v.name in args.variants]
    results: List[Dict[str, Any]] = []
    started = time.monotonic()
    load_before = os.getloadavg()[0]  # other work on the box: these figures are only as quiet as it was
    for load in args.loads:
        burners = start_burners(load)
        try:
            for size in args.sizes:
                for variant in chosen:
                    row = {"variant": variant.name, "size": size, "load": load}
                    row.update(measure(variant, size, count, warmup, max_s))
                    results.append(row)
                    figure = row.get("error", "").strip().splitlines()[-1:] or [f"{row['median_us']:.1f} us"]
                    say(f"load {load} size {size:>8} {variant.name:<24} {figure[0]}")
        finally:
            stop_burners(burners)
    document = {
        "meta": {
            "python": platform.python_version(),
            "pyzmq": zmq.__version__,
            "libzmq": zmq.zmq_version(),
            "cpus": os.cpu_count(),
            "kernel": platform.release(),
            "count": count,
            "warmup": warmup,
            "max_s": max_s,
            "seconds": round(time.monotonic() - started, 1),
            "loadavg_1min_start_end": [load_before, os.getloadavg()[0]],
            "variants": {v.name: v.description for v in chosen},
        },
        "results": results,
    }
    if args.json == "-":
        print(json.dumps(document, indent=1))
    else:
        print(markdown(results))
        if args.json:
            with open(args.json, "w") as out:
                json.dump(document, out, indent=1)
    say(f"done in {document['meta']['seconds']} s; 1-minute load average {load_before:.2f} at the start, "
        f"{os.getloadavg()[0]:.2f} at the end")
    return 1 if any("error" in r for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
