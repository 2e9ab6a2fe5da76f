"""The worker's streaming and async paths over the real wire, the proxy played in-process.

The proxy's own `Link` greets the handler and opens the data channel; the test then sends what
the proxy would (`InferBatch`, `Cancel`) and reads what the worker answers (`StreamPart`,
`StreamEnd`, `BatchResult`), so each path is checked without a tritonserver: the functional
tests in tests/functional/streaming cover the server side.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time

import numpy as np
import pytest
import zmq

from pytriton.decorators import batch
from pytriton.ipc import codec, protocol
from pytriton.ipc.shm import SegmentReader
from pytriton.model_config import ModelConfig, Tensor
from pytriton.proxy.link import Link
from pytriton.worker.context import TritonContext
from pytriton.worker.handler import InstanceHandler, is_async_callable, is_generator_callable
from pytriton.worker.instance import InstanceSpec

pytestmark = pytest.mark.integration

INPUTS = (Tensor(name="x", shape=(1,), dtype=np.float32),)
OUTPUTS = (Tensor(name="y", shape=(1,), dtype=np.float32),)


class Peer:
    """A handler for one callable and the proxy's side of its socket."""

    def __init__(self, tmp_path, func, *, decoupled=True, asynchronous=False):
        self.zmq = zmq.Context()
        endpoint = f"ipc://{tmp_path}/sock-0"
        context = TritonContext("M", 1, INPUTS, OUTPUTS, ModelConfig(max_batch_size=8, decoupled=decoupled))
        spec = InstanceSpec(context=context, infer_func=func, endpoint=endpoint, instance=0,
                            shm_prefix=f"pytriton-{os.getpid()}-streams", asynchronous=asynchronous)
        self.handler = InstanceHandler(spec, zmq_context=self.zmq, on_unrecoverable=lambda name: None)
        self.handler.start()
        self.link = Link("M", endpoint, protocol.Hello(protocol.PROTOCOL_VERSION, 0, os.getpid()), os.getpid())
        self.channel = self.link.connect(5.0, 5.0)
        self.reader = SegmentReader()

    def send_batch(self, batch_id, values):
        groups = [{"x": np.array([[v]], np.float32)} for v in values]
        columns, segment, payload = codec.pack(groups, None)
        header = protocol.infer_batch_header(batch_id=batch_id, parameters=("",) * len(values), columns=columns,
                                             segment=segment)
        self.channel.send(header, payload)

    def send(self, message):
        self.channel.send(protocol.encode(message))

    def receive(self):
        received = self.channel.receive(keep=True)  # the receive timeout is 5 s
        assert received is not None, "the worker sent nothing"
        return protocol.decode(received[0]), received[1]

    def until_end(self, batch_id):
        """Values per request of every StreamPart of `batch_id`, then its StreamEnd."""
        steps = []
        while True:
            message, payload = self.receive()
            assert message.batch_id == batch_id
            if isinstance(message, protocol.StreamEnd):
                return steps, message
            groups = codec.unpack(message.columns, "", payload, self.reader, len(message.present))
            steps.append([float(g["y"][0, 0]) if present else None for g, present in zip(groups, message.present)])

    def close(self):
        self.handler.end_streams()
        assert self.handler.stop()
        self.link.close()
        self.reader.close()
        self.zmq.term()


@pytest.fixture
def peer(tmp_path):
    peers = []

    def make(func, **kwargs):
        peers.append(Peer(tmp_path, func, **kwargs))
        return peers[-1]

    yield make
    for made in peers:
        made.close()


def test_each_yield_is_one_part_and_none_skips_a_request(peer):
    def stream(requests):
        yield [{"y": r["x"]} for r in requests]
        yield [None, {"y": requests[1]["x"] + 1}]

    p = peer(stream)
    p.send_batch(1, [1.0, 5.0])
    steps, end = p.until_end(1)
    assert steps == [[1.0, 5.0], [None, 6.0]]
    assert end.errors == (None, None)


def test_an_exception_ends_the_stream_with_the_error_after_the_parts_sent(peer):
    def stream(requests):
        yield [{"y": r["x"]} for r in requests]
        raise RuntimeError("out of tokens")

    p = peer(stream)
    p.send_batch(7, [2.0])
    steps, end = p.until_end(7)
    assert steps == [[2.0]]
    assert end.errors == ("Model 'M' failed: RuntimeError: out of tokens",)


def test_cancel_closes_the_generator_between_steps(peer):
    closed = threading.Event()

    def stream(requests):
        try:
            for step in range(1000):
                time.sleep(0.01)
                yield [{"y": r["x"] + step} for r in requests]
        finally:
            closed.set()

    p = peer(stream)
    p.send_batch(3, [0.0])
    p.receive()
    p.send(protocol.Cancel(3))
    steps, end = p.until_end(3)
    assert closed.wait(2)
    assert len(steps) < 900 and end.errors == (None,)


def test_batches_that_arrive_during_a_stream_are_served_after_it(peer):
    def stream(requests):
        for step in range(3):
            time.sleep(0.05)
            yield [{"y": r["x"] * 10 + step} for r in requests]

    p = peer(stream)
    p.send_batch(1, [1.0])
    p.send_batch(2, [2.0])
    assert p.until_end(1)[0] == [[10.0], [11.0], [12.0]]
    assert p.until_end(2)[0] == [[20.0], [21.0], [22.0]]


def test_a_generator_on_a_model_that_is_not_decoupled_fails_saying_so(peer):
    def stream(requests):
        yield [{"y": r["x"]} for r in requests]

    p = peer(stream, decoupled=False)
    p.send_batch(1, [1.0])
    steps, end = p.until_end(1)
    assert steps == []
    assert "bind it with ModelConfig(decoupled=True)" in end.errors[0]


def test_coroutines_of_one_instance_overlap_and_answer_in_completion_order(peer):
    @batch
    async def slow(x):
        await asyncio.sleep(float(x[0, 0]))
        return {"y": x}

    assert is_async_callable(slow) and not is_generator_callable(slow)
    p = peer(slow, decoupled=False, asynchronous=True)
    p.send_batch(1, [0.6])
    p.send_batch(2, [0.1])
    first, _ = p.receive()
    second, _ = p.receive()
    assert (first.batch_id, second.batch_id) == (2, 1)  # the short one did not wait for the long one
    assert first.errors == second.errors == (None,)


def test_an_async_generator_is_cancelled_and_its_finally_runs(peer):
    closed = threading.Event()

    async def stream(requests):
        try:
            for step in range(1000):
                await asyncio.sleep(0.01)
                yield [{"y": r["x"] + step} for r in requests]
        finally:
            closed.set()

    assert is_async_callable(stream) and is_generator_callable(stream)
    p = peer(stream, asynchronous=True)
    p.send_batch(4, [0.0])
    p.receive()
    p.send(protocol.Cancel(4))
    steps, end = p.until_end(4)
    assert closed.wait(2) and end.errors == (None,)


def test_end_streams_cuts_open_streams_with_an_error(peer):
    def stream(requests):
        for step in range(1000):
            time.sleep(0.01)
            yield [{"y": r["x"] + step} for r in requests]

    p = peer(stream)
    p.send_batch(5, [0.0])
    p.receive()
    p.handler.end_streams()
    _, end = p.until_end(5)
    assert end.errors == ("Model 'M': the server is stopping; the stream was cut short",)


def test_a_coroutine_found_only_at_call_time_is_run_to_its_end(peer):
    async def answer(x):
        await asyncio.sleep(0.01)
        return [{"y": x + 1}]

    def plain(requests):  # looks synchronous to bind(); returns a coroutine
        return answer(requests[0]["x"])

    p = peer(plain, decoupled=False)
    p.send_batch(9, [1.0])
    message, payload = p.receive()
    assert isinstance(message, protocol.BatchResult) and message.errors == (None,)
    assert codec.unpack(message.columns, message.segment, payload, p.reader, 1)[0]["y"].tolist() == [[2.0]]
