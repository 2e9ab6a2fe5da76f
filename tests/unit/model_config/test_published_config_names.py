"""The published PyTriton's configuration names: `TritonModelConfig` and `ModelConfigParser`.

``from_dict`` reads the JSON a server returns; ``from_file`` reads a ``config.pbtxt`` written by
our own repository writer, so the round trip declaration -> config.pbtxt -> description is checked.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import numpy as np
import pytest
from google.protobuf import text_format
from support import HTTP_MODEL_CONFIG as HTTP_FULL

from pytriton.client.model_config import ClientModelConfig, parse_model_config
from pytriton.exceptions import PyTritonModelConfigError
from pytriton.model_config import DeviceKind, DynamicBatcher, ModelConfig, QueuePolicy, Tensor, TimeoutAction
from pytriton.model_config.parser import ModelConfigParser
from pytriton.model_config.triton_model_config import ResponseCache, TensorSpec, TritonModelConfig
from pytriton.repository.pbtxt import model_config_proto


# As tritonserver 2.51 answers GET v2/models/Echo/config (HTTP gives every field, as numbers).
def _write_pbtxt(folder, model_name="Written", **kwargs):
    arguments = {
        "model_name": model_name,
        "inputs": [
            Tensor(name="image", shape=(224, 224, 3), dtype=np.uint8),
            Tensor(name="prompt", shape=(-1,), dtype=np.bytes_, optional=True),
        ],
        "outputs": [Tensor(name="scores", shape=(-1, 10), dtype=np.float32)],
        "config": ModelConfig(),
        "instance_count": 1,
    }
    arguments.update(kwargs)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "config.pbtxt"
    path.write_text(text_format.MessageToString(model_config_proto(**arguments)))
    return path


def test_the_published_names_are_the_class_clients_return():
    assert TritonModelConfig is ClientModelConfig
    assert isinstance(parse_model_config(HTTP_FULL), TritonModelConfig)
    assert dataclasses.is_dataclass(TritonModelConfig)
    assert {"model_name", "max_batch_size", "batcher", "decoupled", "instance_group", "backend_parameters",
            "inputs", "outputs", "response_cache"} <= {field.name for field in dataclasses.fields(TritonModelConfig)}
    assert not hasattr(TritonModelConfig, "model_version")  # the configuration names no version


@pytest.mark.parametrize(
    "statement",
    [
        "import pytriton.model_config.parser, pytriton.model_config.triton_model_config, pytriton.client",
        "import pytriton.client, pytriton.model_config.triton_model_config, pytriton.model_config.parser",
        "import pytriton.model_config, pytriton.model_config.parser",
        "from pytriton.model_config.triton_model_config import TritonModelConfig, TensorSpec, ResponseCache",
        "from pytriton.model_config.parser import ModelConfigParser; import pytriton.triton",
    ],
)
def test_the_modules_import_in_a_fresh_interpreter_in_any_order(statement):
    result = subprocess.run([sys.executable, "-c", statement], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr


def test_from_dict_describes_a_server_configuration():
    config = ModelConfigParser.from_dict(HTTP_FULL)

    assert isinstance(config, TritonModelConfig)
    assert (config.model_name, config.max_batch_size, config.batching, config.decoupled) == ("Echo", 8, True, False)
    assert config.inputs == (
        TensorSpec("x", (-1,), np.dtype(np.float32), "FP32"),
        TensorSpec("mask", (-1,), np.dtype(np.bool_), "BOOL", optional=True),
    )
    assert config.outputs == (TensorSpec("y", (-1,), np.dtype(np.float32), "FP32"),)
    assert config.batcher == DynamicBatcher(
        max_queue_delay_microseconds=100,
        preferred_batch_size=[2, 4],
        priority_levels=2,
        default_priority_level=1,
        default_queue_policy=QueuePolicy(max_queue_size=5),
        priority_queue_policy={
            2: QueuePolicy(
                timeout_action=TimeoutAction.DELAY,
                default_timeout_microseconds=7,
                allow_timeout_override=True,
                max_queue_size=3,
            )
        },
    )
    assert config.response_cache == ResponseCache(enable=True)
    assert config.instance_group == {DeviceKind.KIND_CPU: 3}
    assert config.backend_parameters == {"pytriton.protocol": "2"}
    assert config == parse_model_config(HTTP_FULL)  # the same path as the clients


def test_from_dict_accepts_the_grpc_wrapper():
    config = ModelConfigParser.from_dict({"config": {"name": "Plain", "input": [], "output": []}})

    assert (config.model_name, config.max_batch_size, config.batching, config.batcher) == ("Plain", 0, False, None)


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ({"max_batch_size": 2}, "without a name"),
        ({"name": "M", "input": [{"name": "x", "data_type": "TYPE_NOPE", "dims": [1]}]}, "no numpy equivalent"),
        ({"name": "M", "input": [{"data_type": "TYPE_FP32", "dims": [1]}]}, "missing field 'name'"),
        ({"name": "M", "max_batch_size": "eight"}, "ValueError"),
    ],
)
def test_from_dict_refuses_what_it_cannot_describe(raw, reason):
    with pytest.raises(PyTritonModelConfigError, match=reason):
        ModelConfigParser.from_dict(raw)


def test_from_file_round_trips_our_own_config_pbtxt(tmp_path):
    batcher = DynamicBatcher(
        max_queue_delay_microseconds=250,
        preferred_batch_size=[4, 8],
        preserve_ordering=True,
        priority_levels=2,
        default_priority_level=2,
        default_queue_policy=QueuePolicy(max_queue_size=16),
        priority_queue_policy={1: QueuePolicy(timeout_action=TimeoutAction.DELAY, default_timeout_microseconds=9)},
    )
    path = _write_pbtxt(
        tmp_path / "Written",
        config=ModelConfig(max_batch_size=16, batcher=batcher, decoupled=True),
        instance_count=3,
        parameters={"shared": "yes"},
    )

    config = ModelConfigParser.from_file(config_path=path)

    assert isinstance(config, TritonModelConfig)
    assert (config.model_name, config.max_batch_size, config.batching) == ("Written", 16, True)
    assert config.decoupled is True
    assert [(spec.name, spec.dtype, spec.shape, spec.optional) for spec in config.inputs] == [
        ("image", np.dtype(np.uint8), (224, 224, 3), False),
        ("prompt", np.dtype(object), (-1,), True),
    ]
    assert [(spec.name, spec.dtype, spec.triton_dtype, spec.shape) for spec in config.outputs] == [
        ("scores", np.dtype(np.float32), "FP32", (-1, 10)),
    ]
    assert config.batcher == batcher
    assert config.response_cache is None
    assert config.instance_group == {DeviceKind.KIND_CPU: 3}
    assert config.backend_parameters == {"shared": "yes"}
    assert config.backend == "python"


def test_from_file_without_batching_has_no_batcher_and_is_not_decoupled(tmp_path):
    path = _write_pbtxt(tmp_path / "Plain", model_name="Plain", config=ModelConfig(batching=False, response_cache=True))

    config = ModelConfigParser.from_file(str(path))  # a str path, positionally, works too

    assert (config.model_name, config.max_batch_size, config.batching) == ("Plain", 0, False)
    assert (config.batcher, config.decoupled) == (None, False)
    assert config.response_cache == ResponseCache(enable=True)


def test_from_file_names_an_unnamed_model_after_its_folder(tmp_path):
    path = tmp_path / "folder_name" / "config.pbtxt"
    path.parent.mkdir()
    path.write_text('max_batch_size: 2\ninput { name: "x" data_type: TYPE_INT64 dims: [ 3 ] }\n')

    config = ModelConfigParser.from_file(path)

    assert config.model_name == "folder_name"
    assert config.inputs == (TensorSpec("x", (3,), np.dtype(np.int64), "INT64"),)


def test_a_missing_file_is_refused_naming_the_path(tmp_path):
    path = tmp_path / "absent" / "config.pbtxt"

    with pytest.raises(PyTritonModelConfigError, match="Cannot read") as info:
        ModelConfigParser.from_file(config_path=path)

    assert str(path) in str(info.value)
    assert isinstance(info.value.__cause__, FileNotFoundError)


@pytest.mark.parametrize(
    "content",
    [b"this is { not a model config", b'name: "M"\nmax_batch_size: "four"\n', b"\xff\xfe\x00binary"],
    ids=["syntax", "wrong-type", "not-text"],
)
def test_a_garbage_file_is_refused_naming_the_path(tmp_path, content):
    path = tmp_path / "M" / "config.pbtxt"
    path.parent.mkdir()
    path.write_bytes(content)

    with pytest.raises(PyTritonModelConfigError) as info:
        ModelConfigParser.from_file(config_path=path)

    assert str(path) in str(info.value)


def test_a_valid_file_describing_an_unusable_model_is_refused_naming_the_path(tmp_path):
    path = tmp_path / "M" / "config.pbtxt"
    path.parent.mkdir()
    path.write_text('name: "M"\ninput { name: "x" data_type: TYPE_INVALID dims: [ 1 ] }\n')

    with pytest.raises(PyTritonModelConfigError, match="no numpy equivalent") as info:
        ModelConfigParser.from_file(config_path=path)

    assert str(path) in str(info.value)
