"""`ModelWarmup` -> ``model_warmup`` entries and data files (pure)."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from pytriton.exceptions import PyTritonBadParameterError, PyTritonModelConfigError
from pytriton.model_config import ModelConfig, ModelWarmup, Tensor
from pytriton.repository.pbtxt import model_config_proto, to_pbtxt, to_triton_data_type
from pytriton.repository.warmup import warmup_entries

INPUTS = (
    Tensor(name="ids", dtype=np.int64, shape=(-1, 2)),
    Tensor(name="text", dtype=np.bytes_, shape=(1,)),
    Tensor(name="mask", dtype=np.float32, shape=(-1,), optional=True),
)


def entries(config: ModelConfig):
    return warmup_entries("M", INPUTS, config, to_triton_data_type)


def test_left_out_inputs_are_zero_data_with_variable_axes_of_one_and_optional_ones_are_skipped():
    (message,), files = entries(ModelConfig(warmup=ModelWarmup(batch_size=2, count=3)))
    assert files == {}
    assert (message.name, message.batch_size, message.count) == ("warmup", 2, 3)
    assert sorted(message.inputs) == ["ids", "text"]
    assert list(message.inputs["ids"].dims) == [1, 2] and message.inputs["ids"].zero_data
    assert list(message.inputs["text"].dims) == [1] and message.inputs["text"].zero_data


def test_given_samples_become_files_in_the_tensor_dtype_and_bytes_in_triton_serialisation():
    warmup = ModelWarmup({"ids": [[1, 2], [3, 4], [5, 6]], "text": np.array(["hé"], dtype=object)}, name="w1")
    (message,), files = entries(ModelConfig(warmup=warmup))
    assert message.inputs["ids"].input_data_file == "w1-input0"
    assert list(message.inputs["ids"].dims) == [3, 2]
    assert np.frombuffer(files["w1-input0"], dtype=np.int64).tolist() == [1, 2, 3, 4, 5, 6]
    assert files["w1-input1"] == struct.pack("<I", 3) + "hé".encode()


def test_the_config_text_carries_the_warmup_block():
    text = to_pbtxt(model_config_proto("M", INPUTS, (Tensor(name="o", dtype=np.float32, shape=(1,)),),
                                       ModelConfig(warmup=ModelWarmup(name="z")), instance_count=1))
    assert 'model_warmup {\n  name: "z"\n  batch_size: 1' in text
    assert "zero_data: true" in text


@pytest.mark.parametrize(
    ("warmup", "config", "message"),
    [
        (ModelWarmup({"nope": [1]}), {}, r"gives inputs \['nope'\] that the model does not have"),
        (ModelWarmup({"ids": [1, 2]}), {}, r"input 'ids' has shape \(2,\); expected one sample of shape \(-1, 2\)"),
        (ModelWarmup({"ids": [[1.5, 2.0]]}), {}, r"dtype float64, which does not convert safely to the input's int64"),
        (ModelWarmup({"text": [1]}), {}, r"input 'text' has dtype int64; expected bytes or str items"),
        (ModelWarmup(batch_size=5), {"max_batch_size": 4}, r"batch_size=5 but max_batch_size is 4"),
        (ModelWarmup(batch_size=2), {"batching": False}, r"batch_size=2 but the model does not batch"),
    ],
)
def test_samples_that_do_not_fit_the_model_are_refused_naming_model_warmup_and_input(warmup, config, message):
    with pytest.raises(PyTritonModelConfigError, match=r"model 'M': ModelWarmup .*" + message):
        entries(ModelConfig(warmup=warmup, **config))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"batch_size": 0}, "ModelWarmup.batch_size must be an integer >= 1, got 0"),
        ({"count": True}, "ModelWarmup.count must be an integer >= 1, got True"),
        ({"name": "a/b"}, "ModelWarmup.name must be a non-empty name"),
        ({"inputs": [1, 2]}, "ModelWarmup.inputs must map input names to arrays"),
        ({"inputs": {"x": 3}}, r"ModelWarmup.inputs\['x'\] must have at least one axis"),
    ],
)
def test_model_warmup_validates_its_fields(kwargs, message):
    with pytest.raises(PyTritonBadParameterError, match=message):
        ModelWarmup(**kwargs)


def test_model_config_takes_one_warmup_or_a_sequence_with_distinct_names():
    one = ModelWarmup()
    assert ModelConfig(warmup=one).warmup == (one,)
    assert ModelConfig(warmup=[one, ModelWarmup(name="b")]).warmup[1].name == "b"
    with pytest.raises(PyTritonBadParameterError, match="distinct names"):
        ModelConfig(warmup=[one, ModelWarmup()])
    with pytest.raises(PyTritonBadParameterError, match="ModelConfig.warmup must be a ModelWarmup"):
        ModelConfig(warmup={"x": 1})
