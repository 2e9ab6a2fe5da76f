"""pytriton.ipc.channel: whole messages over a SEQPACKET connection, in one process (a socket pair)."""

from __future__ import annotations

import os
import socket
import stat
import threading

import numpy as np
import pytest

from pytriton.ipc import channel
from pytriton.ipc.channel import DATAGRAM_BYTES, Channel, ChannelClosed


@pytest.fixture
def pair():
    left, right = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    a, b = Channel(left), Channel(right)
    yield a, b
    a.close()
    b.close()


def test_a_message_arrives_whole_with_read_only_views(pair):
    a, b = pair
    array = np.arange(16, dtype=np.float32)
    a.send(b"header", [array, b"tail"])
    header, payload = b.receive()
    assert bytes(header) == b"header"
    assert bytes(payload) == array.tobytes() + b"tail"
    assert payload.readonly
    assert np.frombuffer(payload, np.float32, 16).tolist() == array.tolist()


def test_a_message_larger_than_a_datagram_arrives_in_one_piece(pair):
    a, b = pair
    big = np.random.default_rng(0).integers(0, 255, 5 * DATAGRAM_BYTES + 123, dtype=np.uint8)
    sender = threading.Thread(target=a.send, args=(b"h", [big]))  # blocks until the reader drains the queue
    sender.start()
    header, payload = b.receive()
    sender.join(10)
    assert bytes(header) == b"h"
    assert np.array_equal(np.frombuffer(payload, np.uint8), big)


def test_the_buffer_is_reused_unless_a_message_is_kept(pair):
    a, b = pair
    a.send(b"1", [b"first"])
    a.send(b"2", [b"second"])
    _, first = b.receive()
    _, second = b.receive()
    assert bytes(second) == b"second"
    assert bytes(first) != b"first"  # the same buffer: valid only until the next receive
    a.send(b"1", [b"first"])
    a.send(b"2", [b"second"])
    _, kept = b.receive(keep=True)
    b.receive()
    assert bytes(kept) == b"first"


def test_no_message_gives_none_without_waiting_or_after_the_timeout(pair):
    a, b = pair
    assert b.receive(wait=False) is None
    b.set_timeouts(0.05)
    assert b.receive() is None


def test_a_peer_that_closed_shows_on_receive_and_on_send(pair):
    a, b = pair
    a.close()
    with pytest.raises(ChannelClosed):
        b.receive()
    with pytest.raises(ChannelClosed):
        b.send(b"x")


def test_a_datagram_of_another_protocol_is_refused(pair):
    a, b = pair
    a.sock.send(b"\x00" * 40)
    with pytest.raises(ChannelClosed, match="not of the pytriton wire"):
        b.receive()


def test_listen_connect_accept(tmp_path):
    path = str(tmp_path / "data.sock")
    listener = channel.listen(path)
    listener.setblocking(False)
    try:
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        assert channel.accept(listener) is None  # nobody waits
        client = channel.connect(path)
        server = channel.accept(listener)
        assert server is not None
        assert server.peer_pid() == os.getpid()
        client.send(b"hello")
        assert bytes(server.receive()[0]) == b"hello"
        client.close()
        server.close()
    finally:
        listener.close()
    with pytest.raises(OSError):
        channel.connect(str(tmp_path / "nobody.sock"))


def test_pid_alive():
    assert channel.pid_alive(os.getpid())
    assert not channel.pid_alive(2**22 + 12345)  # above pid_max's default ceiling


def test_a_full_queue_makes_a_send_time_out_and_the_next_send_goes_once_drained(pair):
    """The peer stopped reading: the kernel queue fills, a send waits its timeout and says so;
    nothing is lost once the peer reads again."""
    a, b = pair
    a.set_timeouts(None, 0.05)
    sent = 0
    with pytest.raises(BlockingIOError):
        for _ in range(10_000):
            a.send(b"m", [sent.to_bytes(4, "little") * 1000])
            sent += 1
    assert sent >= 1
    got = [int.from_bytes(bytes(b.receive()[1][:4]), "little") for _ in range(sent)]
    assert got == list(range(sent))  # every message that went, in order, none half-sent
    a.send(b"after")
    assert bytes(b.receive()[0]) == b"after"


def test_a_peer_that_dies_in_the_middle_of_a_long_message_ends_the_receive(pair):
    a, b = pair
    prefix = channel._PREFIX.pack(channel._MAGIC, 1, 3 * DATAGRAM_BYTES)  # promises more than comes
    a.sock.send(prefix + b"h" + bytes(DATAGRAM_BYTES - len(prefix) - 1))
    a.close()
    with pytest.raises(ChannelClosed, match="in the middle of a message"):
        b.receive()
