"""Mapping user inputs to names, the batch axis, and numpy <-> tritonclient objects."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import tritonclient.grpc
import tritonclient.http
from tritonclient.grpc import service_pb2
from tritonclient.utils import deserialize_bytes_tensor

from pytriton.client.codec import (
    add_batch_axis,
    is_final_response,
    map_inputs,
    sample_request,
    strip_batch_axis,
    to_infer_inputs,
    to_stream_request,
)
from pytriton.client.exceptions import PyTritonClientValueError
from pytriton.client.model_config import ClientModelConfig, TensorSpec

F32 = np.dtype(np.float32)
CONFIG = ClientModelConfig(
    model_name="AddSub",
    max_batch_size=0,
    inputs=(TensorSpec("INPUT_A", (-1,), F32, "FP32"), TensorSpec("INPUT_B", (-1,), F32, "FP32")),
    outputs=(TensorSpec("SUM", (-1,), F32, "FP32"),),
)
A = np.array([1.0, 2.0], np.float32)
B = np.array([3.0, 4.0], np.float32)


def test_positional_inputs_follow_the_models_input_order():
    assert list(map_inputs(CONFIG, (A, B), {})) == ["INPUT_A", "INPUT_B"]
    assert map_inputs(CONFIG, (B, A), {})["INPUT_A"] is B


def test_fewer_positional_inputs_map_to_the_first_ones():
    assert list(map_inputs(CONFIG, (A,), {})) == ["INPUT_A"]


def test_named_inputs_are_kept_as_given():
    assert map_inputs(CONFIG, (), {"INPUT_B": B, "INPUT_A": A}) == {"INPUT_B": B, "INPUT_A": A}


def test_positional_and_named_together_are_refused():
    with pytest.raises(PyTritonClientValueError, match="either positionally or by name, not both"):
        map_inputs(CONFIG, (A,), {"INPUT_B": B})


def test_too_many_positional_inputs_name_the_models_inputs():
    with pytest.raises(PyTritonClientValueError, match=r"has 2 input\(s\) \['INPUT_A', 'INPUT_B'\], but 3"):
        map_inputs(CONFIG, (A, B, A), {})


@pytest.mark.parametrize("value", [[1.0, 2.0], 3.0, "text"])
def test_non_arrays_are_refused_with_the_inputs_name(value):
    with pytest.raises(PyTritonClientValueError, match="Input 'INPUT_A' must be a numpy.ndarray"):
        map_inputs(CONFIG, (), {"INPUT_A": value})


def test_batch_axis_round_trip():
    batched = add_batch_axis({"X": A})
    assert batched["X"].shape == (1, 2)
    assert np.array_equal(strip_batch_axis(batched)["X"], A)


@pytest.mark.parametrize("protocol", [tritonclient.http, tritonclient.grpc], ids=["http", "grpc"])
def test_infer_inputs_carry_shape_and_triton_dtype(protocol):
    (infer_input,) = to_infer_inputs(protocol, {"X": np.zeros((2, 3), np.int32)})
    assert (infer_input.name(), infer_input.datatype(), list(infer_input.shape())) == ("X", "INT32", [2, 3])


def _raw(infer_input):
    # http keeps the bytes in _get_binary_data(), grpc in _get_content(): read whichever exists.
    getter = getattr(infer_input, "_get_binary_data", None) or infer_input._get_content
    return getter()


@pytest.mark.parametrize("protocol", [tritonclient.http, tritonclient.grpc], ids=["http", "grpc"])
def test_object_arrays_go_as_bytes_with_trailing_nuls(protocol):
    data = np.array([b"ab\x00", b"\x00\x00", b""], dtype=object)
    (infer_input,) = to_infer_inputs(protocol, {"S": data})
    assert infer_input.datatype() == "BYTES"
    assert deserialize_bytes_tensor(_raw(infer_input)).tolist() == data.tolist()


def test_unicode_arrays_go_as_utf8_bytes():
    (infer_input,) = to_infer_inputs(tritonclient.http, {"S": np.array(["zaż", "x"])})
    assert infer_input.datatype() == "BYTES"
    assert deserialize_bytes_tensor(_raw(infer_input)).tolist() == ["zaż".encode(), b"x"]


def test_dtypes_triton_cannot_carry_are_named():
    with pytest.raises(PyTritonClientValueError, match="Input 'C' has dtype complex64"):
        to_infer_inputs(tritonclient.http, {"C": np.zeros(2, np.complex64)})


def test_stream_request_asks_for_the_empty_final_response_and_carries_tensors_in_binary():
    inputs = {"TEXT": np.array([b"a\x00", "b"], dtype=object), "COUNT": np.array([[3]], np.int32)}
    parameters = {"n": 1, "t": 0.5, "s": "x", "b": True}
    request = to_stream_request("Tokens", "2", inputs, parameters=parameters, request_id="9")
    assert (request.model_name, request.model_version, request.id) == ("Tokens", "2", "9")
    tensors = [(t.name, t.datatype, list(t.shape)) for t in request.inputs]
    assert tensors == [("TEXT", "BYTES", [2]), ("COUNT", "INT32", [1, 1])]
    assert request.raw_input_contents[0] == b"\x02\x00\x00\x00a\x00\x01\x00\x00\x00b"
    assert np.frombuffer(request.raw_input_contents[1], np.int32).tolist() == [3]
    parameters = request.parameters
    assert parameters["triton_enable_empty_final_response"].bool_param
    assert (parameters["n"].int64_param, parameters["t"].double_param) == (1, 0.5)
    assert (parameters["s"].string_param, parameters["b"].bool_param) == ("x", True)


@pytest.mark.parametrize("key", ["priority", "triton_anything"])
def test_stream_request_refuses_reserved_parameters(key):
    with pytest.raises(PyTritonClientValueError, match=f"'{key}' is reserved"):
        to_stream_request("M", "", {}, parameters={key: 1})


def test_stream_request_carries_a_sequence_as_tritons_own_parameters():
    # The streaming clients put the checked sequence among the parameters (with_sequence).
    request = to_stream_request("M", "", {}, parameters={"sequence_id": "s-1", "sequence_start": True, "a": 2})
    assert request.parameters["sequence_id"].string_param == "s-1"
    assert request.parameters["sequence_start"].bool_param is True
    assert request.parameters["a"].int64_param == 2
    numbered = to_stream_request("M", "", {}, parameters={"sequence_id": 7, "sequence_end": True})
    assert numbered.parameters["sequence_id"].int64_param == 7


def test_final_response_flag():
    response = service_pb2.ModelInferResponse()
    assert not is_final_response(response)
    response.parameters["triton_final_response"].bool_param = False
    assert not is_final_response(response)
    response.parameters["triton_final_response"].bool_param = True
    assert is_final_response(response)


# --- what the client refuses before sending, and the fix it names ------------------------------------------------

TEXT = ClientModelConfig(
    model_name="Tag",
    max_batch_size=8,
    inputs=(TensorSpec("text", (1,), np.dtype(object), "BYTES"), TensorSpec("n", (2, 3), np.dtype(np.int64), "INT64")),
    outputs=(),
)


def test_a_float64_array_for_a_float32_input_names_the_cast():
    with pytest.raises(PyTritonClientValueError) as info:
        map_inputs(CONFIG, [], {"INPUT_A": np.ones(2), "INPUT_B": np.ones(2, F32)})
    assert str(info.value) == (
        "Model 'AddSub': input 'INPUT_A' is an array of float64, but the model declares FP32 (float32); "
        "cast it with .astype(np.float32)"
    )


def test_bytes_inputs_take_any_bytes_array_and_refuse_numbers_saying_what_they_take():
    map_inputs(TEXT, [], {"text": np.array([b"a"]), "n": np.zeros((2, 3), np.int64)})  # S dtype: fine
    with pytest.raises(PyTritonClientValueError, match="input 'text' is an array of int64.*it takes bytes"):
        map_inputs(TEXT, [], {"text": np.array([1]), "n": np.zeros((2, 3), np.int64)})
    with pytest.raises(PyTritonClientValueError, match=r"it takes numbers: convert the array with .astype\(np.int64\)"):
        map_inputs(TEXT, [], {"text": np.array([b"a"]), "n": np.array([["1"] * 3] * 2)})


def test_an_input_the_model_does_not_have_is_named_with_the_ones_it_has():
    expected = r"Model 'AddSub' has no input 'INPUT_C'; its inputs are \['INPUT_A', 'INPUT_B'\]"
    with pytest.raises(PyTritonClientValueError, match=expected):
        map_inputs(CONFIG, [], {"INPUT_C": np.ones(2, F32)})


def test_infer_sample_with_a_batch_axis_points_to_infer_batch():
    batching = dataclasses.replace(CONFIG, max_batch_size=8)
    with pytest.raises(PyTritonClientValueError) as info:
        sample_request(batching, [np.ones((4, 2), F32), np.ones(2, F32)], {})
    message = str(info.value)
    assert "input 'INPUT_A' has shape (4, 2), one axis more than the model declares for one sample (-1,)" in message
    assert "use infer_batch" in message
    assert sample_request(batching, [np.ones(2, F32), np.ones(2, F32)], {})["INPUT_A"].shape == (1, 2)


def test_a_batch_over_max_batch_size_is_refused_before_sending_with_tritons_words_and_the_way_out():
    from pytriton.client.codec import batch_request
    from pytriton.client.exceptions import PyTritonClientInferenceServerError

    batched = dataclasses.replace(CONFIG, model_name="Scale", max_batch_size=8)
    fits = np.ones((8, 2), np.float32)
    assert batch_request(batched, (fits, fits), {})["INPUT_A"] is fits
    big = np.ones((9, 2), np.float32)
    with pytest.raises(PyTritonClientInferenceServerError) as info:
        batch_request(batched, (), {"INPUT_A": big, "INPUT_B": big})
    assert str(info.value).startswith(
        "Error occurred during inference request. Message: inference request batch-size must be <= 8 for 'Scale'. "
        "infer_batch_chunked(...) of ModelClient, FuturesModelClient and AsyncioModelClient sends a larger batch")
    # What will be cut into chunks is not refused.
    assert batch_request(batched, (big, big), {}, whole=False)["INPUT_B"] is big


# --- shapes: the model's dims, checked before sending (-1: any size) ----------------------------------------------

SCALE = ClientModelConfig(
    model_name="Scale",
    max_batch_size=8,
    inputs=(TensorSpec("values", (-1,), F32, "FP32"), TensorSpec("factor", (1,), F32, "FP32")),
    outputs=(TensorSpec("scaled", (-1,), F32, "FP32"),),
)


def test_a_wrong_fixed_size_of_one_sample_names_the_input_and_both_shapes():
    with pytest.raises(PyTritonClientValueError) as info:
        sample_request(SCALE, [], {"values": np.ones(3, F32), "factor": np.ones(2, F32)})
    assert str(info.value) == (
        "Model 'Scale': input 'factor' has shape (2,), but the model declares shape (1,) for one sample (-1: any size)")
    assert sample_request(SCALE, [], {"values": np.ones(5, F32), "factor": np.ones(1, F32)})["factor"].shape == (1, 1)


def test_a_batch_is_checked_sample_by_sample_after_its_first_axis():
    from pytriton.client.codec import batch_request, chunked_request

    with pytest.raises(PyTritonClientValueError, match=r"has samples of shape \(2,\) \(the batch of 4 first\)"):
        batch_request(SCALE, [np.ones((4, 3), F32), np.ones((4, 2), F32)], {})
    with pytest.raises(PyTritonClientValueError, match=r"input 'factor' has samples of shape \(\)"):
        chunked_request(SCALE, [np.ones((20, 3), F32), np.ones(20, F32)], {}, None)
    with pytest.raises(PyTritonClientValueError, match=r"input 'values' is a 0-d array, with no batch axis"):
        batch_request(SCALE, [np.ones((), F32), np.ones((1, 1), F32)], {})
    assert batch_request(SCALE, [np.ones((4, 7), F32), np.ones((4, 1), F32)], {})["values"].shape == (4, 7)


def test_a_model_without_batching_checks_the_whole_shape():
    plain = ClientModelConfig("Grid", 0, inputs=(TensorSpec("grid", (2, -1), F32, "FP32"),))
    assert sample_request(plain, [np.ones((2, 9), F32)], {})["grid"].shape == (2, 9)
    with pytest.raises(PyTritonClientValueError, match=r"has shape \(3, 9\), but the model declares shape \(2, -1\)"):
        sample_request(plain, [np.ones((3, 9), F32)], {})
    with pytest.raises(PyTritonClientValueError, match=r"has shape \(18,\), but the model declares shape \(2, -1\)"):
        sample_request(plain, [np.ones(18, F32)], {})


def test_shape_tensors_and_configurations_without_tensors_are_left_to_the_server():
    shaped = ClientModelConfig("Trt", 8, inputs=(TensorSpec("dims", (2,), np.dtype(np.int32), "INT32",
                                                            shape_tensor=True),))
    assert sample_request(shaped, [np.array([1, 2, 3], np.int32)], {})["dims"].shape == (1, 3)
    bare = ClientModelConfig("Given", 8)
    assert sample_request(bare, [], {"anything": np.ones((5, 5), F32)})["anything"].shape == (1, 5, 5)


def test_the_server_configuration_marks_shape_tensors():
    from pytriton.model_config.triton_model_config import parse_model_config

    raw = {"name": "Trt", "max_batch_size": 8, "input": [
        {"name": "dims", "data_type": "TYPE_INT32", "dims": ["2"], "is_shape_tensor": True},
        {"name": "x", "data_type": "TYPE_FP32", "dims": [-1]}]}
    assert [spec.shape_tensor for spec in parse_model_config(raw).inputs] == [True, False]
