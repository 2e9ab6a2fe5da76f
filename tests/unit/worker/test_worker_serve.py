"""`BatchCalls.serve`: the blocking loop's one call per batch, the batch in and its answer out.

Whichever way the batch goes inside (the whole-batch lane, or request objects and the general
answer), it comes back as the answer to send (the `BatchResult` and its payload), or as what the call left running
(`Running`); the requests' cancellation probe lives exactly as long as someone may ask it.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

from pytriton.decorating.shaping import whole_batch
from pytriton.decorators import batch
from pytriton.ipc import codec, protocol
from pytriton.ipc.shm import SegmentReader
from pytriton.metrics import Registry
from pytriton.model_config import ModelConfig, Tensor
from pytriton.worker.batches import BatchCalls
from pytriton.worker.context import TritonContext, set_current_context
from pytriton.worker.instance import InstanceSpec
from pytriton.worker.measures import Measures
from pytriton.worker.outcomes import Running

X = (Tensor(name="x", shape=(-1,), dtype=np.float32),)


@pytest.fixture
def reader():
    reader = SegmentReader()
    yield reader
    reader.close()


def _calls(func):
    context = TritonContext("serve", 1, X, X, ModelConfig(max_batch_size=8))
    set_current_context(context)
    spec = InstanceSpec(context=context, infer_func=func, endpoint="", instance=0, shm_prefix="",
                        whole=whole_batch(func))
    return BatchCalls(spec, threading.Event(), Measures(Registry("serve", 1, 0)))


def _wire(rows=(1, 2)):
    groups = [{"x": np.full((r, 3), float(i), np.float32)} for i, r in enumerate(rows)]
    columns, segment, parts = codec.pack(groups, None)
    payload = memoryview(b"".join(memoryview(p).cast("B") for p in parts)).toreadonly()
    header = protocol.infer_batch_header(batch_id=5, parameters=("",) * len(rows), columns=columns, segment=segment)
    return protocol.decode(header), payload


def _answers(answer, reader, count):
    result, parts = answer
    result = protocol.decode(protocol.encode(result))  # as it crosses the wire
    payload = memoryview(b"".join(memoryview(p).cast("B") for p in parts)).toreadonly()
    return result, codec.unpack(result.columns, result.segment, payload, reader, count)


class Cancels:
    """The loop's reader of `Cancel` messages: counts its reads, none ever arrives."""

    def __init__(self) -> None:
        self.reads = 0

    def __call__(self):
        self.reads += 1
        return None


def test_a_general_batch_comes_back_answered_and_its_requests_learn_nothing_more(reader):
    kept = []

    def plain(requests):
        kept.extend(requests)
        assert not requests[0].is_cancelled()  # while it runs, a request reads the loop's cancellations
        return [{"x": request["x"] + 1} for request in requests]

    calls, cancels = _calls(plain), Cancels()
    batch_, payload = _wire()
    answer = calls.serve(batch_, payload, reader, None, None, cancels)
    assert type(answer) is not Running
    result, answers = _answers(answer, reader, 2)
    assert result.batch_id == 5 and result.errors == (None, None) and not result.inputs_kept
    np.testing.assert_array_equal(answers[1]["x"], np.full((2, 3), 2.0, np.float32))
    assert cancels.reads == 1
    assert calls.probe.requests == ()  # answered: the probe let the batch go (its arrays may view shared memory)
    assert kept[0].is_cancelled() is False


def test_a_generator_comes_back_running_and_its_requests_may_still_ask(reader):
    def steps(requests):
        yield [{"x": request["x"]} for request in requests]

    calls, cancels = _calls(steps), Cancels()
    batch_, payload = _wire()
    running = calls.serve(batch_, payload, reader, None, None, cancels)
    assert type(running) is Running
    first = next(running.outcome)
    assert len(first) == 2 and list(running.batch_sizes) == [None, None]
    assert not calls.probe.all_cancelled() and cancels.reads == 1  # the loop ends the probe once the stream ends
    calls.probe.end()


def test_the_whole_batch_lane_answers_from_the_same_call_and_reads_no_cancellations(reader):
    @batch
    def double(x):
        return {"x": x * 2}

    calls, cancels = _calls(double), Cancels()
    batch_, payload = _wire()
    answer = calls.serve(batch_, payload, reader, None, None, cancels)
    assert type(answer) is not Running
    result, answers = _answers(answer, reader, 2)
    assert result.errors == (None, None) and not result.inputs_kept
    np.testing.assert_array_equal(answers[1]["x"], np.full((2, 3), 2.0, np.float32))
    assert cancels.reads == 0 and calls.probe.requests == ()  # no request objects: nothing to ask about


def test_the_stamps_of_the_call_are_taken_whichever_way_the_batch_goes(reader):
    @batch
    def double(x):
        return {"x": x * 2}

    for func in (double, lambda requests: [{"x": request["x"]} for request in requests]):
        marks: list = []
        batch_, payload = _wire()
        _calls(func).serve(batch_, payload, reader, None, marks, Cancels())
        assert len(marks) == 2 and marks[0] <= marks[1]  # DECODED, then CALLED
