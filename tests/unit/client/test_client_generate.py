"""HTTP streaming without a server: SSE framing, request JSON, shapes and arrays of response events.

The shape rules are those measured against tritonserver 2.51's ``generate_stream`` endpoint
(the model echoed the shapes it received).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from pytriton.client.exceptions import (
    PyTritonClientInferenceServerError,
    PyTritonClientModelUnavailableError,
    PyTritonClientValueError,
)
from pytriton.client.generate import (
    ResponseDecoder,
    SseDecoder,
    check_streamable,
    encode_request,
    event_error,
    event_outputs,
    generate_stream_path,
    parse_event,
    request_shape,
    response_shape,
)
from pytriton.client.model_config import ClientModelConfig, TensorSpec


def spec(name, dims, dtype, triton_dtype):
    return TensorSpec(name, tuple(dims), np.dtype(dtype), triton_dtype)


COUNTDOWN = ClientModelConfig(
    model_name="Countdown",
    max_batch_size=0,
    inputs=(spec("COUNT", [1], np.int32, "INT32"), spec("TEXT", [-1], object, "BYTES")),
    outputs=(
        spec("INDEX", [1], np.int32, "INT32"),
        spec("WORD", [1], object, "BYTES"),
        spec("GRID", [2, 3], np.float32, "FP32"),
        spec("TOKENS", [-1], np.int64, "INT64"),
    ),
    decoupled=True,
)
BATCHING = ClientModelConfig(
    model_name="Batching",
    max_batch_size=4,
    inputs=(spec("X", [-1], np.float32, "FP32"), spec("FIXED", [1], np.int32, "INT32")),
    outputs=(spec("Y", [-1], np.float32, "FP32"), spec("ONE", [1], np.int32, "INT32")),
    decoupled=True,
)


# ---- SSE framing -------------------------------------------------------------------------------


def test_events_of_triton_in_one_chunk():
    body = b'data: {"INDEX":0}\n\ndata: {"INDEX":1}\n\n'
    decoder = SseDecoder()
    assert decoder.feed(body) == ['{"INDEX":0}', '{"INDEX":1}']
    decoder.finish()


@pytest.mark.parametrize("size", [1, 2, 3, 7])
def test_events_split_anywhere_between_chunks(size):
    body = b'data: {"A":1}\r\n\r\n: a comment\nevent: x\ndata: {"B":\ndata: 2}\r\rdata: {"C":3}\n\n'
    decoder = SseDecoder()
    events = [event for start in range(0, len(body), size) for event in decoder.feed(body[start : start + size])]
    assert events == ['{"A":1}', '{"B":\n2}', '{"C":3}']
    decoder.finish()


def test_a_stream_that_ends_inside_an_event_is_an_error():
    decoder = SseDecoder()
    assert decoder.feed(b'data: {"A":1}\n') == []
    with pytest.raises(PyTritonClientInferenceServerError, match="ended inside an event"):
        decoder.finish()


def test_bytes_that_are_not_utf8_survive_the_decoding():
    # Triton 2.51 writes BYTES outputs into its JSON unchecked, e.g. b"\xff\x00a" as "\xff\u0000a".
    (data,) = SseDecoder().feed(b'data: {"WORD":"\xff\\u0000a"}\n\n')
    outputs = event_outputs(COUNTDOWN, parse_event(data), 1)
    assert outputs["WORD"].tolist() == [b"\xff\x00a"]


# ---- shapes ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("dims", "batching", "size", "shape"),
    [
        ([-1], False, 3, (3,)),
        ([-1], False, 0, (0,)),
        ([1], False, 1, (1,)),
        ([2, 2], False, 4, (2, 2)),
        ([2, 2], False, 3, None),
        ([-1, -1], False, 4, (1, 4)),
        ([-1, 2], False, 4, (2, 2)),
        ([-1, 2], False, 3, None),
        ([2, -1], False, 6, (2, 3)),
        ([-1], True, 3, (1, 3)),
        ([-1], True, 0, (1, 0)),
        ([1], True, 2, (2, 1)),
        ([2], True, 4, (2, 2)),
        ([2, 2], True, 8, (2, 2, 2)),
        ([-1, -1], True, 4, (1, 1, 4)),
    ],
)
def test_request_shape_as_the_server_rebuilds_it(dims, batching, size, shape):
    assert request_shape(dims, batching, size) == shape


@pytest.mark.parametrize(
    ("dims", "batching", "batch_size", "size", "shape"),
    [
        ([-1], False, 1, 5, (5,)),
        ([2, 3], False, 1, 6, (2, 3)),
        ([1], True, 3, 3, (3, 1)),  # fixed dims: the batch axis comes from the count
        ([2, 3], True, 1, 12, (2, 2, 3)),
        ([-1], True, 2, 6, (2, 3)),  # variable dims: the batch axis is the request's
        ([-1], True, 1, 0, (1, 0)),
    ],
)
def test_response_shape_rebuilt_from_the_configuration(dims, batching, batch_size, size, shape):
    assert response_shape(spec("Y", dims, np.float32, "FP32"), batching, batch_size, size) == shape


@pytest.mark.parametrize(("dims", "size"), [([2, 3], 5), ([-1, 2], 3)])
def test_response_shape_refuses_counts_that_fit_nothing(dims, size):
    with pytest.raises(PyTritonClientInferenceServerError, match="fit no shape"):
        response_shape(spec("Y", dims, np.float32, "FP32"), False, 1, size)


# ---- requests ----------------------------------------------------------------------------------


def test_request_json_has_flat_lists_and_parameters():
    inputs = {"COUNT": np.array([3], np.int32), "TEXT": np.array([b"h\xc3\xa9", "x\x00"], dtype=object)}
    body = json.loads(encode_request(COUNTDOWN, inputs, {"temperature": 0.5, "greedy": True}))
    assert body == {
        "COUNT": [3],
        "TEXT": ["hé", "x\x00"],
        "parameters": {"temperature": 0.5, "greedy": True},
    }


def test_request_keeps_nan_and_infinity_which_the_server_takes():
    config = ClientModelConfig("F", 0, inputs=(spec("X", [-1], np.float32, "FP32"),))
    body = encode_request(config, {"X": np.array([np.nan, np.inf, 0.1], np.float32)})
    values = json.loads(body)["X"]
    assert np.isnan(values[0]) and values[1] == float("inf") and np.float32(values[2]) == np.float32(0.1)


def test_batch_of_fixed_dims_goes_whole():
    body = json.loads(encode_request(BATCHING, {"FIXED": np.array([[1], [2]], np.int32)}))
    assert body == {"FIXED": [1, 2]}


@pytest.mark.parametrize(
    ("inputs", "match"),
    [
        ({"X": np.zeros((2, 3), np.float32)}, r"shape \(2, 3\).*rebuild it as \(1, 6\).*grpc://"),
        ({"X": np.zeros((1, 3), np.float64)}, "dtype float64 .*takes FP32"),
        ({"X": np.zeros((1, 3), np.float16)}, "FP16, which HTTP streaming cannot carry"),
        ({"MISSING": np.zeros(1, np.float32)}, "has no input 'MISSING'.*take it for a parameter"),
    ],
)
def test_inputs_the_endpoint_cannot_carry_are_refused_before_sending(inputs, match):
    with pytest.raises(PyTritonClientValueError, match=match):
        encode_request(BATCHING, inputs)


def test_bytes_that_are_not_utf8_cannot_be_sent():
    with pytest.raises(PyTritonClientValueError, match="not valid UTF-8"):
        encode_request(COUNTDOWN, {"TEXT": np.array([b"\xff"], dtype=object)})


def test_parameters_must_be_json_scalars():
    with pytest.raises(PyTritonClientValueError, match="Parameter 'p'"):
        encode_request(COUNTDOWN, {"COUNT": np.array([1], np.int32)}, {"p": [1, 2]})


def test_path_quotes_name_and_version():
    assert generate_stream_path("My Model", "") == "/v2/models/My%20Model/generate_stream"
    assert generate_stream_path("m", "2") == "/v2/models/m/versions/2/generate_stream"


def test_models_with_outputs_json_cannot_bring_back_are_refused():
    check_streamable(COUNTDOWN)
    half = ClientModelConfig("H", 0, outputs=(spec("Y", [-1], np.float16, "FP16"),))
    with pytest.raises(PyTritonClientValueError, match="FP16 output 'Y'.*grpc://"):
        check_streamable(half)
    two_variable = ClientModelConfig("V", 0, outputs=(spec("Y", [-1, -1], np.float32, "FP32"),))
    with pytest.raises(PyTritonClientValueError, match="more than one variable dimension"):
        check_streamable(two_variable)


# ---- response events ---------------------------------------------------------------------------


def test_event_outputs_take_the_model_dtypes_and_shapes():
    event = parse_event(
        '{"INDEX":2,"WORD":"word-2","GRID":[0.5,1,2,3,4,NaN],"TOKENS":[9223372036854775807,-1],'
        '"model_name":"Countdown","model_version":"1","id":"7"}'
    )
    outputs = event_outputs(COUNTDOWN, event, 1)
    assert sorted(outputs) == ["GRID", "INDEX", "TOKENS", "WORD"]
    assert outputs["INDEX"].dtype == np.int32 and outputs["INDEX"].tolist() == [2]
    assert outputs["WORD"].dtype == np.object_ and outputs["WORD"].tolist() == [b"word-2"]
    assert outputs["GRID"].dtype == np.float32 and outputs["GRID"].shape == (2, 3) and np.isnan(outputs["GRID"][1, 2])
    assert outputs["TOKENS"].tolist() == [2**63 - 1, -1]


def test_event_with_values_of_another_type_is_a_server_error():
    with pytest.raises(PyTritonClientInferenceServerError, match="'INDEX' came with values that are not INT32"):
        event_outputs(COUNTDOWN, {"INDEX": "x"}, 1)


def test_error_events():
    assert event_error(COUNTDOWN, {"error": "boom"}) == "boom"
    assert event_error(COUNTDOWN, {"INDEX": 1}) is None
    with_error_output = ClientModelConfig("E", 0, outputs=(spec("error", [1], np.int32, "INT32"),))
    assert event_error(with_error_output, {"error": 1}) is None
    with pytest.raises(PyTritonClientInferenceServerError, match="not JSON"):
        parse_event("{")
    with pytest.raises(PyTritonClientInferenceServerError, match="not a JSON object"):
        parse_event("[1]")


def test_decoder_delivers_the_responses_before_an_error_of_the_same_chunk():
    decoder = ResponseDecoder(COUNTDOWN, 1, "http://localhost:8000")
    items = decoder.feed(b'data: {"INDEX":0}\n\ndata: {"INDEX":1}\n\ndata: {"error":"broke after 2"}\n\n')
    assert [item["INDEX"].tolist() for item in items[:2]] == [[0], [1]]
    assert isinstance(items[2], PyTritonClientInferenceServerError) and "broke after 2" in str(items[2])
    unknown = decoder.feed(b'data: {"error":"Request for unknown model: \'X\' is not found"}\n\n')
    assert isinstance(unknown[0], PyTritonClientModelUnavailableError)


@pytest.mark.parametrize("name", ["id", "parameters"])
def test_inputs_named_like_the_generate_endpoints_own_keys_are_refused(name):
    config = ClientModelConfig("R", 0, inputs=(spec(name, [1], np.int64, "INT64"),))
    with pytest.raises(PyTritonClientValueError, match=f"input named '{name}' cannot go over HTTP streaming"):
        encode_request(config, {name: np.array([1], np.int64)})
