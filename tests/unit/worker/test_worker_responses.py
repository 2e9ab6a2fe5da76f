"""pytriton.worker.responses.shape_response: one callable response -> the declared output arrays."""

from __future__ import annotations

import numpy as np
import pytest

from pytriton.exceptions import PyTritonValidationError
from pytriton.model_config import ModelConfig, Tensor
from pytriton.worker.context import TritonContext
from pytriton.worker.request import Request
from pytriton.worker.responses import shape_response


def _context(*outputs, batching=True):
    inputs = (Tensor(name="INPUT_1", shape=(-1,), dtype=np.float32),)
    return TritonContext(
        model_name="shaper",
        model_version=1,
        inputs=inputs,
        outputs=tuple(outputs),
        config=ModelConfig(batching=batching),
    )


FLOATS = Tensor(name="OUT_F", shape=(-1, 3), dtype=np.float32)
INTS = Tensor(name="OUT_I", shape=(2,), dtype=np.int64)
TEXT = Tensor(name="OUT_B", shape=(1,), dtype=np.bytes_)
OBJECTS = Tensor(name="OUT_O", shape=(-1,), dtype=object)


def _shape(context, response, *, strict, batch_size=None, request_index=0):
    return shape_response(context, response, request_index=request_index, batch_size=batch_size, strict=strict)


@pytest.mark.parametrize("response", [None, 3, [np.zeros(3)], np.zeros((1, 3)), "OUT_F"])
def test_not_a_mapping(response):
    with pytest.raises(PyTritonValidationError) as excinfo:
        _shape(_context(FLOATS), response, strict=False, request_index=4)
    message = str(excinfo.value)
    assert "Model 'shaper'" in message
    assert "request 4" in message
    assert "expected a mapping of output name to numpy array" in message


def test_not_a_mapping_describes_an_array():
    with pytest.raises(PyTritonValidationError, match=r"array of dtype float64 and shape \(1, 3\)"):
        _shape(_context(FLOATS), np.zeros((1, 3)), strict=False)


def test_declared_names_pass_through_unchanged():
    ints = np.array([[1, 2]], dtype=np.int64)
    floats = np.ones((1, 2, 3), dtype=np.float32)
    result = _shape(_context(FLOATS, INTS), {"OUT_I": ints, "OUT_F": floats}, strict=True, batch_size=1)
    assert list(result) == ["OUT_F", "OUT_I"]  # in declaration order
    assert result["OUT_F"] is floats
    assert result["OUT_I"] is ints


def test_identity_response_is_matched_by_position():
    """`lambda requests: requests` returns the input names; with one value per output they map in order."""
    floats = np.ones((1, 4, 3), dtype=np.float32)
    ints = np.array([[5, 6]], dtype=np.int64)
    request = Request({"INPUT_1": floats, "INPUT_2": ints})
    result = _shape(_context(FLOATS, INTS), request, strict=True, batch_size=1)
    assert list(result) == ["OUT_F", "OUT_I"]
    assert result["OUT_F"] is floats
    assert result["OUT_I"] is ints


def test_no_positional_matching_when_counts_differ():
    with pytest.raises(PyTritonValidationError, match=r"request 2 is missing output\(s\) \['OUT_F', 'OUT_I'\]"):
        _shape(_context(FLOATS, INTS), {"A": np.zeros((1, 3))}, strict=False, request_index=2)


def test_no_positional_matching_when_one_name_matches():
    response = {"OUT_F": np.zeros((1, 1, 3), np.float32), "OTHER": np.zeros(2, np.int64)}
    with pytest.raises(PyTritonValidationError) as excinfo:
        _shape(_context(FLOATS, INTS), response, strict=False)
    assert "is missing output(s) ['OUT_I']" in str(excinfo.value)
    assert "has output(s) ['OTHER'] that the model does not declare" in str(excinfo.value)


@pytest.mark.parametrize("strict", [True, False])
def test_a_dict_with_a_wrong_name_is_refused_not_renamed(strict):
    """One entry per output is no licence to rename: {"Y": ...} for output "y" is a mistake."""
    context = _context(Tensor(name="y", shape=(-1,), dtype=np.float32))
    with pytest.raises(PyTritonValidationError) as excinfo:
        _shape(context, {"Y": np.zeros((1, 2), np.float32)}, strict=strict, batch_size=1)
    assert str(excinfo.value) == (
        "Model 'shaper': the response to request 0 is missing output(s) ['y'] and has output(s) ['Y'] that "
        "the model does not declare; declared outputs: ['y'] (names are case-sensitive: 'Y' -> 'y')"
    )


@pytest.mark.parametrize("strict", [True, False])
def test_a_plain_dict_of_input_names_is_not_an_identity(strict):
    """Only the `Request` itself, returned unchanged, maps by position; a dict built by the callable does not."""
    with pytest.raises(PyTritonValidationError, match=r"missing output\(s\) \['OUT_F'\]"):
        _shape(_context(FLOATS), {"INPUT_1": np.zeros((1, 1, 3), np.float32)}, strict=strict, batch_size=1)


def test_extra_output_refused_when_strict():
    response = {"OUT_F": np.zeros((1, 1, 3), np.float32), "DEBUG": np.zeros(1)}
    with pytest.raises(PyTritonValidationError) as excinfo:
        _shape(_context(FLOATS), response, strict=True, batch_size=1, request_index=1)
    message = str(excinfo.value)
    assert "Model 'shaper'" in message
    assert "has output(s) ['DEBUG'] that the model does not declare" in message
    assert "declared outputs: ['OUT_F']" in message


def test_extra_output_dropped_when_not_strict():
    response = {"OUT_F": np.zeros((1, 1, 3), np.float32), "DEBUG": np.zeros(1)}
    result = _shape(_context(FLOATS), response, strict=False)
    assert list(result) == ["OUT_F"]


def test_non_strict_casts_numeric_dtypes():
    value = np.array([[[0.5, 1.5, 2.5]]], dtype=np.float64)
    result = _shape(_context(FLOATS), {"OUT_F": value}, strict=False)
    assert result["OUT_F"].dtype == np.float32
    np.testing.assert_array_equal(result["OUT_F"], value.astype(np.float32))


def test_non_strict_converts_lists_and_skips_shape_checks():
    result = _shape(_context(INTS), {"OUT_I": [1, 2, 3, 4, 5]}, strict=False, batch_size=1)
    assert result["OUT_I"].dtype == np.int64
    assert result["OUT_I"].tolist() == [1, 2, 3, 4, 5]


def test_strict_refuses_another_dtype_naming_model_output_and_expected():
    value = np.zeros((1, 1, 3), dtype=np.float64)
    with pytest.raises(PyTritonValidationError) as excinfo:
        _shape(_context(FLOATS), {"OUT_F": value}, strict=True, batch_size=1, request_index=3)
    assert str(excinfo.value) == ("Model 'shaper': output 'OUT_F' of request 3 has dtype float64; expected float32")


@pytest.mark.parametrize("strict", [True, False])
def test_numeric_output_refuses_text_even_when_not_strict(strict):
    with pytest.raises(PyTritonValidationError, match="output 'OUT_I' of request 0 has dtype <U1; expected int64"):
        _shape(_context(INTS), {"OUT_I": np.array([["a", "b"]])}, strict=strict, batch_size=1)


@pytest.mark.parametrize("strict", [True, False])
def test_bytes_output_refuses_numbers_even_when_not_strict(strict):
    with pytest.raises(PyTritonValidationError, match="output 'OUT_B' of request 0 has dtype int64; expected"):
        _shape(_context(TEXT), {"OUT_B": np.array([[1]], dtype=np.int64)}, strict=strict, batch_size=1)


@pytest.mark.parametrize(
    "value",
    [
        np.array([[b"ab\x00"]], dtype=object),
        np.array([[b"ab"]], dtype=np.bytes_),
        np.array([["text"]]),
        [[b"ab"]],
    ],
    ids=["object", "S", "U", "list"],
)
@pytest.mark.parametrize("tensor", [TEXT, OBJECTS], ids=["bytes_", "object"])
def test_bytes_outputs_accept_any_bytes_like_dtype_unchanged(tensor, value):
    result = _shape(_context(tensor), {tensor.name: value}, strict=False)
    array = result[tensor.name]
    assert array.dtype.kind in ("O", "S", "U")
    assert array.tolist() == np.asarray(value).tolist()
    if isinstance(value, np.ndarray):
        assert array is value  # no conversion: the codec serialises each kind


def test_strict_bytes_output_shape():
    result = _shape(_context(TEXT), {"OUT_B": np.array([[b"a"], [b"b"]], dtype=object)}, strict=True, batch_size=2)
    assert result["OUT_B"].shape == (2, 1)


@pytest.mark.parametrize(
    "shape, ok",
    [
        ((2, 5, 3), True),  # -1 matches any size
        ((2, 0, 3), True),
        ((2, 5, 4), False),  # fixed axis differs
        ((3, 5, 3), False),  # batch axis differs
        ((5, 3), False),  # missing batch axis
        ((2, 1, 5, 3), False),  # one axis too many
    ],
)
def test_strict_shape_includes_the_batch_axis(shape, ok):
    value = np.zeros(shape, dtype=np.float32)
    if ok:
        assert _shape(_context(FLOATS), {"OUT_F": value}, strict=True, batch_size=2)["OUT_F"] is value
    else:
        with pytest.raises(PyTritonValidationError) as excinfo:
            _shape(_context(FLOATS), {"OUT_F": value}, strict=True, batch_size=2, request_index=1)
        assert str(excinfo.value) == (
            f"Model 'shaper': output 'OUT_F' of request 1 has shape {shape}; expected (2, -1, 3) (-1 means any size)"
        )


def test_strict_shape_without_batching_has_no_batch_axis():
    context = _context(INTS, batching=False)
    value = np.array([1, 2], dtype=np.int64)
    assert _shape(context, {"OUT_I": value}, strict=True, batch_size=None)["OUT_I"] is value
    with pytest.raises(PyTritonValidationError, match=r"has shape \(1, 2\); expected \(2,\)"):
        _shape(context, {"OUT_I": value[None]}, strict=True, batch_size=None)


def test_non_strict_does_not_check_shapes():
    value = np.zeros((7,), dtype=np.float32)
    assert _shape(_context(FLOATS), {"OUT_F": value}, strict=False, batch_size=2)["OUT_F"] is value


class _Unconvertible:
    def __array__(self, *args, **kwargs):
        raise RuntimeError("no array for you")


def test_unconvertible_value():
    with pytest.raises(PyTritonValidationError) as excinfo:
        _shape(_context(FLOATS), {"OUT_F": _Unconvertible()}, strict=False, request_index=2)
    message = str(excinfo.value)
    assert "Model 'shaper': output 'OUT_F' of request 2 is not convertible to a numpy array" in message
    assert "_Unconvertible: no array for you" in message
    assert isinstance(excinfo.value.__cause__, RuntimeError)


def test_ragged_list_is_refused():
    with pytest.raises(PyTritonValidationError, match="output 'OUT_F' of request 0"):
        _shape(_context(FLOATS), {"OUT_F": [[1.0, 2.0], [3.0]]}, strict=False)


def test_a_plain_callable_that_returns_one_dict_is_asked_about_batch():
    from pytriton.worker.outcomes import Failure
    from pytriton.worker.responses import per_request

    (first, second) = per_request(_context(FLOATS), 2, {"OUT_F": np.zeros((2, 3), np.float32)})
    assert isinstance(first, Failure) and first is second
    assert "returned dict for a batch of 2 requests" in first.message
    assert "did you forget @batch?" in first.message


def _unnamed_context(count=2, strict_names=None):
    """Outputs declared without names, as bind resolves them: OUTPUT_1, OUTPUT_2, ..."""
    outputs = tuple(Tensor(name=f"OUTPUT_{n}", shape=(1,), dtype=np.float32) for n in range(1, count + 1))
    return TritonContext(model_name="shaper", model_version=1, inputs=(FLOATS,), outputs=outputs,
                         config=ModelConfig(), outputs_unnamed=True if strict_names is None else strict_names)


@pytest.mark.parametrize("strict", [True, False])
def test_unnamed_outputs_take_a_dict_of_other_names_by_position_in_its_order(strict):
    add, sub = np.full((1, 1), 3, np.float32), np.full((1, 1), -1, np.float32)
    result = _shape(_unnamed_context(), {"sub": sub, "add": add}, strict=strict, batch_size=1)
    assert list(result) == ["OUTPUT_1", "OUTPUT_2"]
    assert result["OUTPUT_1"] is sub and result["OUTPUT_2"] is add  # the dict's order, not the keys' spelling


def test_outputs_the_user_named_like_the_defaults_still_match_by_name():
    with pytest.raises(PyTritonValidationError, match=r"missing output\(s\) \['OUTPUT_1', 'OUTPUT_2'\]"):
        _shape(_unnamed_context(strict_names=False), {"add": np.zeros((1, 1), np.float32),
                                                     "sub": np.zeros((1, 1), np.float32)}, strict=False)


def test_unnamed_outputs_match_by_name_when_counts_differ_or_a_name_is_used():
    context = _unnamed_context()
    with pytest.raises(PyTritonValidationError, match=r"missing output\(s\) \['OUTPUT_1', 'OUTPUT_2'\]"):
        _shape(context, {"add": np.zeros((1, 1), np.float32)}, strict=False)
    with pytest.raises(PyTritonValidationError, match=r"missing output\(s\) \['OUTPUT_1'\]"):
        _shape(context, {"OUTPUT_2": np.zeros((1, 1), np.float32), "add": np.zeros((1, 1), np.float32)},
               strict=False)


def test_unnamed_outputs_of_a_batch_answer_are_sent_whole_by_position():
    from pytriton.worker.outcomes import Expected
    from pytriton.worker.request import BatchResponses
    from pytriton.worker.responses import batch_result

    context = _unnamed_context()
    whole = {"add": np.arange(3, dtype=np.float32).reshape(3, 1), "sub": -np.arange(3, dtype=np.float32).reshape(3, 1)}
    result, _ = batch_result(context, 7, 2, BatchResponses(whole, [1, 2]), Expected([1, 2]), False, None)
    assert result.errors == (None, None)
    assert [column.name for column in result.columns] == ["OUTPUT_1", "OUTPUT_2"]
