"""The whole-batch lane (`pytriton.worker.batches.WholeLane`): what it packs itself, and what it leaves to the
general steps, which must then answer exactly as before.

Each test sends a batch as the wire carries it through `WholeLane.serve` and the loop's next step
(`BatchCalls.result`), reads the answer back, and compares it with what the request-by-request
path answers for the same callable.
"""

from __future__ import annotations

import json
import threading
import time

import numpy as np
import pytest

from pytriton.decorating.shaping import whole_batch
from pytriton.decorators import batch
from pytriton.ipc import codec, protocol
from pytriton.ipc.shm import Arena, SegmentReader
from pytriton.metrics import Registry
from pytriton.model_config import ModelConfig, Tensor
from pytriton.worker.batches import BatchCalls, WholeLane
from pytriton.worker.context import TritonContext, set_current_context
from pytriton.worker.instance import InstanceSpec
from pytriton.worker.measures import CALLABLE_SECONDS, Measures
from pytriton.worker.outcomes import Failure, Packed, WholeOutputs

X = (Tensor(name="x", shape=(-1,), dtype=np.float32),)
Y = (Tensor(name="y", shape=(-1,), dtype=np.float32),)


@pytest.fixture
def reader():
    reader = SegmentReader()
    yield reader
    reader.close()


def _lane(func, outputs=Y, strict=False):
    context = TritonContext("lane", 1, X, outputs, ModelConfig(max_batch_size=64))
    set_current_context(context)
    spec = InstanceSpec(context=context, infer_func=func, endpoint="", instance=0, shm_prefix="", strict=strict,
                        whole=whole_batch(func))
    calls = BatchCalls(spec, threading.Event(), Measures(Registry("lane", 1, 0)))
    return WholeLane(calls), calls


def _wire(rows=(1, 3, 2), parameters=None):
    groups = [{"x": np.arange(r * 4, dtype=np.float32).reshape(r, 4) + 10 * i} for i, r in enumerate(rows)]
    columns, segment, parts = codec.pack(groups, None)
    payload = memoryview(b"".join(memoryview(p).cast("B") for p in parts)).toreadonly()
    header = protocol.infer_batch_header(batch_id=7, parameters=parameters or ("",) * len(rows), columns=columns,
                                         segment=segment)
    return protocol.decode(header), payload, groups


def _answer(lane, calls, reader, arena=None, **wire):
    """The outcome the lane gave, and the answer as the proxy reads it back: errors and groups."""
    batch, payload, groups = _wire(**wire)
    served = lane.serve(batch, payload, reader, arena, None)
    assert served is not None, "the lane refused a batch it should take"
    sizes, outcome = served
    result, parts = calls.result(batch.batch_id, len(groups), outcome, sizes, arena)
    result = protocol.decode(protocol.encode(result))  # as it crosses the wire
    answer = memoryview(b"".join(memoryview(p).cast("B") for p in parts)).toreadonly()
    return outcome, result, codec.unpack(result.columns, result.segment, answer, reader, len(groups)), groups


def test_a_dict_of_declared_arrays_is_packed_by_the_lane_and_reads_back_per_request(reader):
    @batch
    def double(x):
        return {"y": x * 2}

    lane, calls = _lane(double)
    outcome, result, answers, groups = _answer(lane, calls, reader)
    assert type(outcome) is Packed
    assert result.batch_id == 7 and result.errors == (None, None, None) and result.segment == ""
    for answer, group in zip(answers, groups):
        np.testing.assert_array_equal(answer["y"], group["x"] * 2)
    assert calls.measures.registry.series(CALLABLE_SECONDS)[-1] == 1  # the call was measured once


@pytest.mark.parametrize(
    "returns, why",
    [
        (lambda x: {"y": x.astype(np.float64)}, "a cast to the declared dtype"),
        (lambda x: [x], "a list in output order"),
        (lambda x: {"y": x, "extra": x}, "an output the model does not declare"),
        (lambda x: {"y": np.asfortranarray(np.repeat(x, 2, axis=1))[:, ::2]}, "an array that is not C-ordered"),
    ],
)
def test_what_needs_more_than_a_look_goes_through_batchs_checks_and_answers_the_same(reader, returns, why):
    func = batch(lambda x: returns(x))
    lane, calls = _lane(func)
    outcome, result, answers, groups = _answer(lane, calls, reader)
    assert type(outcome) is WholeOutputs, why
    assert result.errors == (None, None, None), why
    for answer, group in zip(answers, groups):
        np.testing.assert_array_equal(answer["y"], group["x"])
        assert answer["y"].dtype == np.float32, why


def test_a_wrong_leading_dim_gets_batchs_own_error_for_every_requester(reader):
    lane, calls = _lane(batch(lambda x: {"y": x[:1]}))
    outcome, result, _, _ = _answer(lane, calls, reader)
    assert type(outcome) is Failure
    assert len(set(result.errors)) == 1 and "leading dim must be the batch size 6" in result.errors[0]


def test_the_callables_exception_reaches_each_requester_and_counts_as_failed(reader):
    def fail(x):
        raise ValueError("no such thing")

    lane, calls = _lane(batch(fail))
    outcome, result, _, _ = _answer(lane, calls, reader)
    assert type(outcome) is Failure
    assert all("ValueError" in error and "no such thing" in error for error in result.errors)


def test_strict_shapes_are_checked_by_the_lane_and_refused_per_request(reader):
    lane, calls = _lane(batch(lambda x: {"y": x}), outputs=(Tensor(name="y", shape=(3,), dtype=np.float32),),
                        strict=True)
    outcome, result, _, _ = _answer(lane, calls, reader)
    assert type(outcome) is WholeOutputs  # rows of 4 do not fit (3,): the general checks name it
    assert "output 'y' of request 0 has shape (1, 4); expected (1, 3)" in result.errors[0]
    fitting, fitting_calls = _lane(batch(lambda x: {"y": x}), strict=True)
    outcome, result, _, _ = _answer(fitting, fitting_calls, reader)
    assert type(outcome) is Packed and result.errors == (None, None, None)


def test_large_outputs_and_a_held_arena_are_left_to_the_general_packing(reader):
    big = batch(lambda x: {"y": np.zeros((x.shape[0], 5000), np.float32)})  # 6 rows: 120 KB, over the inline limit
    lane, calls = _lane(big)
    arena = Arena(lambda generation: f"/pytriton-test-lane-{id(arena)}-{generation}")
    try:
        outcome, result, answers, _ = _answer(lane, calls, reader, arena=arena)
        assert type(outcome) is WholeOutputs and result.segment == arena.name  # in the arena
        assert answers[1]["y"].shape == (3, 5000)
        small, small_calls = _lane(batch(lambda x: {"y": x}))
        outcome, result, _, _ = _answer(small, small_calls, reader, arena=arena)
        assert type(outcome) is WholeOutputs  # the arena still holds a segment: its window counts this message
        assert result.segment == ""
    finally:
        arena.close()


def test_bytes_outputs_are_never_packed_by_the_lane(reader):
    func = batch(lambda x: {"t": np.array([[b"ab"]] * x.shape[0], dtype=object)})
    lane, calls = _lane(func, outputs=(Tensor(name="t", shape=(1,), dtype=bytes),))
    outcome, result, answers, _ = _answer(lane, calls, reader)
    assert type(outcome) is WholeOutputs and result.errors == (None, None, None)
    assert answers[1]["t"].tolist() == [[b"ab"]] * 3


def test_batches_the_lane_does_not_take_are_left_untouched(reader):
    called = []
    lane, _ = _lane(batch(lambda x: called.append(1) or {"y": x}))
    with_parameter = json.dumps({"mode": "fast"})
    batch_, payload, _ = _wire(parameters=(with_parameter, "", ""))
    assert lane.serve(batch_, payload, reader, None, None) is None
    passed = json.dumps({protocol.DEADLINE_PARAMETER: int(time.time() * 1000 - 1)})
    batch_, payload, _ = _wire(parameters=(passed, "", ""))
    assert lane.serve(batch_, payload, reader, None, None) is None
    batch_, payload, _ = _wire()
    traced = batch_._replace(traces=("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "", ""))
    assert lane.serve(traced, payload, reader, None, None) is None
    assert called == []  # nothing was called for a batch the lane left
    ahead = json.dumps({protocol.DEADLINE_PARAMETER: int(time.time() * 1000 + 60_000)})
    batch_, payload, _ = _wire(parameters=(ahead, ahead, ""))
    assert lane.serve(batch_, payload, reader, None, None) is not None and called == [1]


def _loop(func):
    """A blocking loop serving `func` over a socket pair: (loop, connection, the sender's end)."""
    import os
    import socket

    from pytriton.ipc.channel import Channel
    from pytriton.worker.blocking import BlockingLoop
    from pytriton.worker.endpoint import Connection
    from pytriton.worker.instance import BusySince

    class Endpoint:  # the one method of HandlerEndpoint the loop calls for a batch
        @staticmethod
        def send(connection, header, payload=()):
            connection.channel.send(header, payload)
            return True

    lane, calls = _lane(func)
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    spec = InstanceSpec(context=calls.context, infer_func=func, endpoint="", instance=0,
                        shm_prefix=f"/pytriton-test-lane-{os.getpid()}", whole=whole_batch(func))
    loop = BlockingLoop(Endpoint(), calls, spec=spec, use_arenas=True, stop=threading.Event(),
                        ending_streams=threading.Event(), on_unrecoverable=lambda name: None, stamp_log=None,
                        busy_since=BusySince())
    return loop, Connection(Channel(ours), os.getpid()), Channel(theirs)


@pytest.mark.parametrize("keeps", [False, True])
def test_an_answer_says_the_inputs_were_kept_only_when_the_function_kept_one(keeps):
    """A large input reaches the function as a view of the sender's arena; the answer tells the
    sender to lay the next batch out elsewhere only when the function kept such a view, else every
    large batch would cost a new segment."""
    kept = []

    @batch
    def identity(x):
        if keeps:
            kept.append(x)
        return {"y": x}

    import os

    loop, connection, sender = _loop(identity)
    arena = Arena(lambda generation: f"/pytriton-test-lane-in-{os.getpid()}-{generation}")
    try:
        groups = [{"x": np.full((1, 20_000), float(i), np.float32)} for i in range(2)]  # 80 KB each: the arena
        columns, segment, parts = codec.pack(groups, arena)
        assert segment == arena.name and all(column.in_shm == (True, True) for column in columns)
        header = protocol.infer_batch_header(batch_id=3, parameters=("", ""), columns=columns, segment=segment)
        payload = memoryview(b"".join(memoryview(p).cast("B") for p in parts)).toreadonly()
        loop._on_message(connection, memoryview(header), payload)
        received = sender.receive()
        assert received is not None
        result = protocol.decode(received[0])
        assert result.errors == (None, None)
        assert result.inputs_kept is keeps
    finally:
        kept.clear()
        loop.close()
        arena.close()
