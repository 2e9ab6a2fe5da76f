"""The client's view of a model configuration, from the JSON of either protocol."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from pytriton.client.exceptions import (
    PyTritonClientDecoupledMismatchError,
    PyTritonClientInferenceServerError,
    PyTritonClientValueError,
)
from pytriton.client.model_config import ClientModelConfig, TensorSpec, check_decoupled, parse_model_config

# Shapes taken from a real tritonserver 2.51: HTTP gives numbers, gRPC's JSON gives int64 as strings,
# wraps the config in "config" and omits fields at their default (max_batch_size 0).
HTTP_BATCH2 = {
    "name": "Batch2",
    "backend": "python",
    "max_batch_size": 2,
    "input": [{"name": "INPUT_1", "data_type": "TYPE_INT32", "format": "FORMAT_NONE", "dims": [1]}],
    "output": [{"name": "OUTPUT_1", "data_type": "TYPE_INT32", "dims": [1]}],
}
GRPC_ADDSUB = {
    "config": {
        "name": "AddSub",
        "input": [
            {"name": "INPUT_A", "data_type": "TYPE_FP32", "dims": ["-1"]},
            {"name": "INPUT_B", "data_type": "TYPE_STRING", "dims": ["-1", "3"]},
        ],
        "output": [{"name": "SUM", "data_type": "TYPE_FP32", "dims": ["-1"]}],
    }
}


def test_http_config():
    config = parse_model_config(HTTP_BATCH2)
    assert config == ClientModelConfig(
        model_name="Batch2",
        max_batch_size=2,
        inputs=(TensorSpec("INPUT_1", (1,), np.dtype(np.int32), "INT32"),),
        outputs=(TensorSpec("OUTPUT_1", (1,), np.dtype(np.int32), "INT32"),),
        backend="python",
    )
    assert config.batching


def test_grpc_config_without_batching_and_with_bytes():
    config = parse_model_config(GRPC_ADDSUB)
    assert config.model_name == "AddSub"
    assert config.max_batch_size == 0 and not config.batching
    assert [spec.name for spec in config.inputs] == ["INPUT_A", "INPUT_B"]
    assert config.inputs[1] == TensorSpec("INPUT_B", (-1, 3), np.dtype(np.object_), "BYTES")


def test_config_is_frozen():
    config = parse_model_config(HTTP_BATCH2)
    with pytest.raises(AttributeError):
        config.max_batch_size = 4  # type: ignore[misc]


def test_unknown_data_type_is_named():
    raw = dict(HTTP_BATCH2, input=[{"name": "X", "data_type": "TYPE_WEIRD", "dims": [1]}])
    with pytest.raises(PyTritonClientInferenceServerError, match="'X' with data type 'TYPE_WEIRD'"):
        parse_model_config(raw)


def test_config_without_name():
    with pytest.raises(PyTritonClientInferenceServerError, match="without a name"):
        parse_model_config({"max_batch_size": 1})


def test_decoupled_from_the_transaction_policy_of_either_protocol():
    # HTTP leaves the policy out for a model that is not decoupled; gRPC's JSON leaves out false fields.
    assert not parse_model_config(HTTP_BATCH2).decoupled
    assert not parse_model_config(dict(HTTP_BATCH2, model_transaction_policy={})).decoupled
    assert parse_model_config(dict(HTTP_BATCH2, model_transaction_policy={"decoupled": True})).decoupled
    grpc_decoupled = {"config": dict(GRPC_ADDSUB["config"], model_transaction_policy={"decoupled": True})}
    assert parse_model_config(grpc_decoupled).decoupled


def test_check_decoupled_names_the_clients_to_use():
    plain = parse_model_config(HTTP_BATCH2)
    decoupled = dataclasses.replace(plain, decoupled=True)
    assert check_decoupled(plain, streaming=False) is plain
    assert check_decoupled(decoupled, streaming=True) is decoupled
    with pytest.raises(PyTritonClientDecoupledMismatchError, match="'Batch2' is decoupled.*use DecoupledModelClient"):
        check_decoupled(decoupled, streaming=False)
    with pytest.raises(PyTritonClientDecoupledMismatchError, match="'Batch2' is not decoupled.*use ModelClient"):
        check_decoupled(plain, streaming=True)
    assert issubclass(PyTritonClientDecoupledMismatchError, PyTritonClientValueError)
