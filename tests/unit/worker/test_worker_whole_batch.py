"""The whole-batch path: each input of a batch as one array into `@batch`, each output as one buffer back.

It must give exactly what the per-request path gives, and step aside (to the per-request path,
with its per-request errors) whenever something is not uniform or was changed on the way.
"""

from __future__ import annotations

import json
import threading
import time

import numpy as np
import pytest

from pytriton.decorators import batch
from pytriton.ipc import codec, protocol
from pytriton.ipc.shm import SegmentReader
from pytriton.metrics import Registry
from pytriton.model_config import ModelConfig, Tensor
from pytriton.worker.batches import BatchCalls
from pytriton.worker.context import TritonContext, set_current_context
from pytriton.worker.instance import InstanceSpec
from pytriton.worker.measures import Measures
from pytriton.worker.outcomes import Expected
from pytriton.worker.request import BatchResponses, Requests
from pytriton.worker.responses import batch_result

INPUTS = (Tensor(name="a", shape=(-1,), dtype=np.float32), Tensor(name="b", shape=(2,), dtype=np.int64))
OUTPUTS = (Tensor(name="y", shape=(-1,), dtype=np.float32), Tensor(name="n", shape=(2,), dtype=np.int64))


def _context(strict_shapes=(-1,)):
    outputs = (Tensor(name="y", shape=strict_shapes, dtype=np.float32), OUTPUTS[1])
    return TritonContext("whole", 1, INPUTS, outputs, ModelConfig(max_batch_size=16))


def _wire(groups):
    """An InferBatch of these groups as the worker receives it: header fields and a read-only payload."""
    columns, segment, parts = codec.pack(groups, None)
    payload = memoryview(b"".join(memoryview(p).cast("B") for p in parts)).toreadonly()
    return protocol.InferBatch(batch_id=1, parameters=("",) * len(groups), columns=columns, segment=segment), payload


def _groups(rows=(1, 3, 2), width=4):
    rng = np.random.default_rng(0)
    return [{"a": rng.random((r, width), dtype=np.float32), "b": rng.integers(0, 9, (r, 2))} for r in rows]


@pytest.fixture
def reader():
    reader = SegmentReader()
    yield reader
    reader.close()


def _calls(context, func, strict=False):
    set_current_context(context)
    spec = InstanceSpec(context=context, infer_func=func, endpoint="", instance=0, shm_prefix="", strict=strict)
    return BatchCalls(spec, threading.Event(), Measures(Registry("m", 1, 0)))


def test_gathered_views_a_column_as_one_array_and_refuses_uneven_ones(reader):
    groups = _groups()
    batch, payload = _wire(groups)
    columns = {column.name: column for column in batch.columns}
    whole = codec.gathered(columns["a"], "", payload, reader)
    np.testing.assert_array_equal(whole, np.concatenate([g["a"] for g in groups]))
    assert not whole.flags.writeable
    uneven, payload = _wire([{"a": np.ones((1, 4), np.float32)}, {"a": np.ones((1, 5), np.float32)}])
    assert codec.gathered(uneven.columns[0], "", payload, reader) is None
    missing, payload = _wire([{"a": np.ones((1, 4), np.float32)}, {}])
    assert codec.gathered(missing.columns[0], "", payload, reader) is None
    text, payload = _wire([{"t": np.array([[b"x"]], object)}, {"t": np.array([[b"y"]], object)}])
    assert codec.gathered(text.columns[0], "", payload, reader) is None


def test_pack_rows_reads_back_as_each_groups_rows(reader):
    whole = {"y": np.arange(12, dtype=np.float32).reshape(6, 2), "n": np.arange(12).reshape(6, 2)}
    columns, segment, parts = codec.pack_rows(whole, [1, 3, 2], None)
    payload = memoryview(b"".join(memoryview(p).cast("B") for p in parts)).toreadonly()
    groups = codec.unpack(columns, segment, payload, reader, 3)
    for index, (start, stop) in enumerate([(0, 1), (1, 4), (4, 6)]):
        for name, array in whole.items():
            np.testing.assert_array_equal(groups[index][name], array[start:stop])
    assert len(parts) == 2  # one buffer per output (no padding needed here), however many groups


def test_batch_takes_the_whole_inputs_and_answers_like_the_per_request_path(reader):
    seen = []

    @batch
    def model(a, b):
        seen.append((a.copy(), a.flags.writeable))
        return {"y": a * 2, "n": b + 1}

    context = _context()
    calls = _calls(context, model)
    groups = _groups()
    wire, payload = _wire(groups)
    requests = calls.requests(wire, payload, reader)
    assert type(requests) is Requests and requests.whole is not None
    fast = model(requests)
    slow = model([dict(r) for r in requests])  # a plain list: the per-request path
    assert type(fast) is BatchResponses and type(slow) is BatchResponses
    np.testing.assert_array_equal(seen[0][0], seen[1][0])
    assert seen[0][1] is True  # writeable, as np.concatenate's result is
    for f, s in zip(fast, slow):
        for name in ("y", "n"):
            np.testing.assert_array_equal(f[name], s[name])

    result, parts = batch_result(context, 1, 3, fast, Expected([None] * 3), False, None)
    per_request, _ = batch_result(context, 1, 3, [dict(r) for r in fast], Expected([None] * 3), False, None)
    payload = memoryview(b"".join(memoryview(p).cast("B") for p in parts)).toreadonly()
    answers = codec.unpack(result.columns, result.segment, payload, reader, 3)
    assert result.errors == per_request.errors == (None,) * 3
    for answer, expected in zip(answers, slow):
        for name in ("y", "n"):
            np.testing.assert_array_equal(answer[name], expected[name])
    assert len(result.columns) == 2  # one column per output, each one buffer


def test_a_request_changed_before_batch_is_seen(reader):
    @batch
    def model(a, b):
        return {"y": a, "n": b}

    calls = _calls(_context(), model)
    wire, payload = _wire(_groups())
    requests = calls.requests(wire, payload, reader)
    requests[1]["a"] = np.full((3, 4), 7.0, np.float32)  # a user's own step, in place
    assert requests.whole_inputs() is None
    answers = model(requests)
    np.testing.assert_array_equal(answers[1]["y"], np.full((3, 4), 7.0, np.float32))


def test_a_response_changed_after_batch_goes_the_per_request_way(reader):
    @batch
    def model(a, b):
        return {"y": a, "n": b}

    context = _context()
    calls = _calls(context, model)
    wire, payload = _wire(_groups())
    answers = model(calls.requests(wire, payload, reader))
    answers[2]["y"] = np.zeros((2, 4), np.float32)
    assert answers.whole_outputs() is None
    result, parts = batch_result(context, 1, 3, answers, Expected([None] * 3), False, None)
    payload = memoryview(b"".join(memoryview(p).cast("B") for p in parts)).toreadonly()
    np.testing.assert_array_equal(codec.unpack(result.columns, "", payload, reader, 3)[2]["y"], np.zeros((2, 4)))


def test_strict_mismatches_leave_the_whole_path_and_fail_each_request_by_name(reader):
    @batch
    def model(a, b):
        return {"y": a.astype(np.float64), "n": b}

    context = _context()
    calls = _calls(context, model, strict=True)
    wire, payload = _wire(_groups())
    answers = model(calls.requests(wire, payload, reader))
    result, _ = batch_result(context, 1, 3, answers, Expected([1, 3, 2]), True, None)
    assert result.errors[1] == "Model 'whole': output 'y' of request 1 has dtype float64; expected float32"
    # not strict: cast once, for the whole batch
    result, _ = batch_result(context, 1, 3, answers, Expected([None] * 3), False, None)
    assert result.errors == (None,) * 3 and result.columns[0].dtype == "<f4"
    # strict shape: the declared trailing shape (3,) does not fit rows of 4
    answers = batch(lambda a, b: {"y": a, "n": b})(calls.requests(wire, payload, reader))
    result, _ = batch_result(_context(strict_shapes=(3,)), 1, 3, answers, Expected([1, 3, 2]), True, None)
    assert "output 'y' of request 0 has shape (1, 4); expected (1, 3)" in result.errors[0]


def test_only_live_deadlines_lets_pytritons_own_deadlines_through_and_nothing_else():
    from pytriton.worker.batches import only_live_deadlines

    ahead = json.dumps({"pytriton_deadline_ms": int(time.time() * 1000 + 60_000)})
    passed = json.dumps({"pytriton_deadline_ms": int(time.time() * 1000 - 1)})
    assert only_live_deadlines(("", ahead, ahead))
    assert not only_live_deadlines((ahead, passed))  # the general path answers the expired one
    assert not only_live_deadlines(('{"pytriton_deadline_ms": 1e30, "mode": "x"}',))  # the callable reads mode
    assert not only_live_deadlines(('{"mode": "x"}',))
    assert not only_live_deadlines(('{"pytriton_deadline_ms": "soon"}',))
    assert not only_live_deadlines(("not json",))


def test_lent_inputs_tell_whether_the_function_kept_an_array_or_a_view_of_one():
    from pytriton.worker.batches import LentInputs

    arrays = [np.ones(4), np.ones(4)]
    lent = LentInputs(arrays)
    assert lent.kept()
    view = arrays[1][1:]
    arrays.clear()
    assert lent.kept()  # the view holds its array
    del view
    assert not lent.kept()
