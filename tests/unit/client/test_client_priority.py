"""A request's priority level: checked, judged against the model's levels, and carried (pure)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import tritonclient.grpc
import tritonclient.http

from pytriton.client._args import check_priority, client_args, priority_arg
from pytriton.client.codec import infer_call, to_stream_request
from pytriton.client.core_request import CoreRequest
from pytriton.client.exceptions import PyTritonClientValueError
from pytriton.client.generate import stream_post
from pytriton.client.infer_calls import call_priority
from pytriton.client.model_config import ClientModelConfig, TensorSpec
from pytriton.model_config import DynamicBatcher

X = TensorSpec("x", (1,), np.dtype(np.int64), "INT64")
LEVELS = ClientModelConfig("Queue", 1, inputs=(X,), outputs=(X,), backend="pytriton",
                           batcher=DynamicBatcher(priority_levels=2, default_priority_level=2))


@pytest.mark.parametrize("value", [0, 1, 7, 2**64 - 1])
def test_a_level_is_an_integer_from_0(value):
    assert priority_arg("priority", value) == value


@pytest.mark.parametrize("value", [-1, 2**64, True, 1.0, "1", None])
def test_anything_else_is_refused_naming_the_argument(value):
    with pytest.raises(PyTritonClientValueError, match=r"^priority must be a priority level: an integer >= 0"):
        priority_arg("priority", value)
    if value is not None:
        with pytest.raises(PyTritonClientValueError, match="priority must be"):
            client_args("localhost", "Queue", None, init_timeout_s=None, inference_timeout_s=None, priority=value)


def test_the_models_levels_bound_a_priority():
    for level in (0, 1, 2):
        check_priority(LEVELS, level)
    with pytest.raises(PyTritonClientValueError) as info:
        check_priority(LEVELS, 3)
    assert str(info.value) == ("Model 'Queue' has priority levels 1..2 (1 the highest; 0 for its default, 2), got "
                               "priority=3; Triton would take it for the default level")


def test_a_model_without_levels_refuses_a_priority_it_would_ignore():
    flat = dataclasses.replace(LEVELS, model_name="Flat", batcher=DynamicBatcher())
    unbatched = dataclasses.replace(LEVELS, model_name="Plain", batcher=None)
    for config in (flat, unbatched):
        check_priority(config, 0)
        expected = f"Model '{config.model_name}' has no priority levels, so priority=1 would be ignored: give the model"
        with pytest.raises(PyTritonClientValueError, match=expected):
            check_priority(config, 1)


def test_a_configuration_without_backend_or_batcher_is_not_judged():
    check_priority(ClientModelConfig("Ensemble", 8), 5)  # an ensemble: its steps queue it
    check_priority(None, 5)


def test_the_client_level_applies_unless_the_call_gives_its_own():
    args = client_args("localhost", "Queue", None, init_timeout_s=None, inference_timeout_s=None, priority=1)
    assert args.request({}, None, None, "r", config=LEVELS).priority == 1
    assert args.request({}, None, None, "r", priority=2, config=LEVELS).priority == 2
    assert args.request({}, None, None, "r", priority=0, config=LEVELS).priority == 0
    with pytest.raises(PyTritonClientValueError, match="has priority levels 1..2"):
        args.request({}, None, None, "r", priority=5, config=LEVELS)


def test_an_array_given_as_priority_is_the_models_input_of_that_name():
    named = {"x": np.ones(1)}
    values = np.array([3])
    assert call_priority(values, named) is None and named["priority"] is values
    assert call_priority(2, named) == 2 and call_priority(None, {}) is None
    with pytest.raises(PyTritonClientValueError):
        call_priority(-2, {})


REQUEST = CoreRequest("Queue", "", {"x": np.array([[9]], np.int64)}, timeout_s=5.0, priority=1)


@pytest.mark.parametrize("protocol", [tritonclient.http, tritonclient.grpc])
def test_tritonclients_infer_gets_the_level(protocol):
    _, keywords = infer_call(protocol, REQUEST)
    assert keywords["priority"] == 1
    assert infer_call(protocol, dataclasses.replace(REQUEST, priority=0))[1]["priority"] == 0


def test_a_grpc_stream_request_carries_the_level_where_tritonclient_puts_it():
    message = to_stream_request("Queue", "", REQUEST.inputs, priority=3)
    assert message.parameters["priority"].uint64_param == 3
    assert "priority" not in to_stream_request("Queue", "", REQUEST.inputs).parameters
    with pytest.raises(PyTritonClientValueError, match="'priority' is reserved by Triton"):
        to_stream_request("Queue", "", REQUEST.inputs, parameters={"priority": 1})


def test_http_streaming_refuses_a_level_it_cannot_carry():
    streaming = dataclasses.replace(LEVELS, decoupled=True)
    with pytest.raises(PyTritonClientValueError) as info:
        stream_post(REQUEST, streaming, "http://localhost:8000")
    assert str(info.value) == ("Model 'Queue': a priority (priority=1) cannot go over HTTP streaming, whose endpoint "
                               "(Triton's generate_stream) queues every request at the model's default level; use a "
                               "grpc:// URL")
    assert stream_post(dataclasses.replace(REQUEST, priority=0), streaming, "http://localhost:8000").path.endswith(
        "/generate_stream")
