"""A continuous-batching step's message (`responses.step_part`): the pieces that are dicts of the declared
arrays are packed at once, to the same bytes the per-piece checks give; anything else takes those checks,
whose errors name the piece and end its stream alone."""

from __future__ import annotations

import numpy as np
import pytest

from pytriton.ipc import codec, protocol
from pytriton.ipc.shm import SegmentReader
from pytriton.model_config import ModelConfig, Tensor
from pytriton.worker.context import TritonContext
from pytriton.worker.outcomes import WholeOutputs
from pytriton.worker.responses import Expected, Failure, _shape_all, _step_rows, step_outputs, step_part

TWO = TritonContext("M", 1, [Tensor(name="n", dtype=np.int32, shape=(1,))],
                    [Tensor(name="token", dtype=np.int32, shape=(1,)), Tensor(name="score", dtype=np.float32,
                                                                          shape=(-1,))],
                    ModelConfig(max_batch_size=8, decoupled=True))


def _general(entries, strict=False):
    """What the per-piece checks give for `entries`: the message's columns and payload bytes."""
    groups, errors, present = _shape_all(TWO, entries, Expected([None] * len(entries)), strict)
    columns, _, payload = codec.pack(groups, None)
    return columns, b"".join(bytes(memoryview(part)) for part in payload), errors, present


def _part(entries, strict=False, count=None):
    count = len(entries) if count is None else count
    message, payload = step_part(TWO, (7,) * count, tuple(range(count)), entries, Expected([None] * count), strict,
                                 (False,) * count)
    return message, b"".join(bytes(memoryview(part)) for part in payload)


def _piece(token, scores, dtype=np.float32):
    return {"token": np.array([[token]], np.int32), "score": np.array([scores], dtype)}


def test_declared_arrays_are_packed_at_once_to_the_bytes_the_checks_give():
    entries = [_piece(1, [0.5, 1.5]), _piece(2, [2.5, 3.5]), _piece(3, [4.5, 5.5])]
    assert _step_rows(TWO, entries, strict=True) is not None  # the one-pass packing takes them
    message, payload = _part(entries)
    columns, general_payload, errors, present = _general(entries)
    assert isinstance(message, protocol.StepPart)
    assert message.columns == columns and payload == general_payload
    assert message.present == (True,) * 3 and message.errors == (None,) * 3
    assert message.batch_ids == (7, 7, 7) and message.positions == (0, 1, 2)
    decoded = codec.unpack(message.columns, "", memoryview(payload), SegmentReader(), 3)
    assert [int(group["token"][0, 0]) for group in decoded] == [1, 2, 3]
    np.testing.assert_array_equal(decoded[2]["score"], [[4.5, 5.5]])


@pytest.mark.parametrize("entries, why", [
    ([_piece(1, [0.5]), None], "a stream with no piece"),
    ([_piece(1, [0.5]), Failure("bad")], "a failed stream"),
    ([_piece(1, [0.5]), {"token": np.array([[2]], np.int32)}], "a missing output"),
    ([_piece(1, [0.5]), {"token": [[2]], "score": np.array([[1.0]], np.float32)}], "a list, not an array"),
    ([_piece(1, [0.5]), _piece(2, [0.5], np.float64)], "a dtype that is not the declared one"),
])
def test_anything_else_takes_the_per_piece_checks(entries, why):
    assert _step_rows(TWO, entries, strict=False) is None, why
    message, payload = _part(entries)
    columns, general_payload, errors, present = _general(entries)
    assert message.columns == columns and payload == general_payload, why
    assert message.errors == tuple(errors) and message.present == tuple(present), why


def test_pieces_of_different_lengths_on_a_variable_axis_join_and_keep_their_own_lengths():
    entries = [_piece(1, [0.5]), _piece(2, [1.5, 2.5, 3.5])]
    message, payload = _part(entries)
    decoded = codec.unpack(message.columns, "", memoryview(payload), SegmentReader(), 2)
    # The fast path joins only what shares its trailing dims; these do not, so the checks pack them.
    assert decoded[1]["score"].shape == (1, 3) and message.errors == (None, None)


def test_a_piece_the_checks_refuse_fails_its_own_stream_only():
    entries = [_piece(1, [0.5]), {"token": np.array([[2]], np.int32), "score": "not an array"}]
    message, _ = _part(entries)
    assert message.errors[0] is None and "score" in message.errors[1] and message.present == (True, True)


def test_one_array_with_a_row_per_stream_is_sent_as_it_is_to_the_bytes_the_checks_give():
    tokens = np.array([[1], [2], [3]], np.int32)
    scores = np.array([[0.5, 1.5], [2.5, 3.5], [4.5, 5.5]], np.float32)
    whole = step_outputs(TWO, {"token": tokens, "score": scores}, 3)
    assert isinstance(whole, WholeOutputs) and whole.rows == [1, 1, 1]
    message, payload = _part(whole, strict=True, count=3)
    columns, general_payload, _, _ = _general([_piece(1, [0.5, 1.5]), _piece(2, [2.5, 3.5]), _piece(3, [4.5, 5.5])])
    assert message.columns == columns and payload == general_payload
    assert message.present == (True,) * 3 and message.errors == (None,) * 3


def test_one_array_the_fast_path_cannot_take_goes_through_the_per_piece_checks_row_by_row():
    # A float64 token under strict checks: each stream's row is refused on its own, naming the output.
    whole = step_outputs(TWO, {"token": np.array([[1], [2]], np.float64),
                               "score": np.array([[0.5], [1.5]], np.float32)}, 2)
    message, _ = _part(whole, strict=True, count=2)
    assert all(error is not None and "token" in error for error in message.errors), message.errors


@pytest.mark.parametrize("value, shown", [
    (np.zeros((3, 1), np.int32), "shape (3, 1) for a step of 2 stream(s)"),
    (np.int32(4), "a scalar for a step of 2 stream(s)"),
])
def test_an_array_whose_rows_are_not_the_streams_fails_every_stream_of_the_step_naming_it(value, shown):
    failure = step_outputs(TWO, {"token": value, "score": np.zeros((2, 1), np.float32)}, 2)
    assert isinstance(failure, Failure)
    assert "Model 'M'" in failure.message and "output 'token'" in failure.message and shown in failure.message
    assert "one row per stream" in failure.message


def test_a_model_without_a_batch_axis_gets_each_streams_row_without_it():
    flat = TritonContext("F", 1, TWO.inputs, [Tensor(name="token", dtype=np.int32, shape=(1,))],
                         ModelConfig(batching=False, decoupled=True))
    pieces = step_outputs(flat, {"token": np.array([[5], [6]], np.int32)}, 2)
    assert [piece["token"].tolist() for piece in pieces] == [[5], [6]]
