"""Splitting a batch into chunks and joining the chunks' outputs (pure), and the joined future."""

from __future__ import annotations

import concurrent.futures

import numpy as np
import pytest

from pytriton.client.codec import concat_batches, split_batch
from pytriton.client.exceptions import PyTritonClientInferenceServerError, PyTritonClientValueError
from pytriton.client.futures import join_chunk_futures


def test_split_cuts_consecutive_chunks_of_at_most_the_size_and_concat_restores_the_batch():
    inputs = {"a": np.arange(10).reshape(5, 2), "b": np.array([b"x\x00", b"", b"y", b"z", b"\x00"], dtype=object)}
    chunks = split_batch(inputs, 2)
    assert [len(chunk["a"]) for chunk in chunks] == [2, 2, 1]
    joined = concat_batches(chunks)
    np.testing.assert_array_equal(joined["a"], inputs["a"])
    assert joined["b"].tolist() == inputs["b"].tolist()


def test_a_batch_that_fits_is_one_chunk():
    inputs = {"a": np.zeros((2, 1))}
    assert len(split_batch(inputs, 2)) == 1
    assert len(split_batch({"a": np.zeros((0, 1))}, 2)) == 1


@pytest.mark.parametrize(
    ("inputs", "match"),
    [({"a": np.zeros((3, 1)), "b": np.zeros((2, 1))}, "disagree"), ({"a": np.float32(1)}, "no batch axis")],
)
def test_split_refuses_inputs_without_a_common_batch_axis(inputs, match):
    with pytest.raises(PyTritonClientValueError, match=match):
        split_batch(inputs, 2)


def _done(result=None, error=None):
    future = concurrent.futures.Future()
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)
    return future


def test_joined_future_waits_for_all_chunks_and_keeps_their_order():
    first, second = concurrent.futures.Future(), concurrent.futures.Future()
    joined = join_chunk_futures([first, second])
    second.set_result({"y": np.array([[3], [4]])})
    assert not joined.done()
    first.set_result({"y": np.array([[1], [2]])})
    np.testing.assert_array_equal(joined.result(timeout=1)["y"], [[1], [2], [3], [4]])


def test_joined_future_holds_the_first_failed_chunks_error():
    error_one, error_two = PyTritonClientValueError("one"), PyTritonClientValueError("two")
    joined = join_chunk_futures([_done({"y": np.zeros((1, 1))}), _done(error=error_one), _done(error=error_two)])
    assert joined.exception(timeout=1) is error_one


def test_joined_future_reports_outputs_that_cannot_bejoin_chunk_futures():
    joined = join_chunk_futures([_done({"y": np.zeros((1, 2))}), _done({"y": np.zeros((1, 3))})])
    with pytest.raises(PyTritonClientInferenceServerError, match="cannot be joined"):
        joined.result(timeout=1)
