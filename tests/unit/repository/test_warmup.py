"""`ModelWarmup` / `WarmupInput` validation and their ``model_warmup`` entries and data files (pure,
except for the user data files, which live in pytest's tmp_path)."""

from __future__ import annotations

import dataclasses
import pathlib
import struct
import warnings

import numpy as np
import pytest

from pytriton import model_config
from pytriton.exceptions import PyTritonBadParameterError, PyTritonModelConfigError
from pytriton.model_config import ModelConfig, ModelWarmup, Tensor, WarmupInput, common
from pytriton.repository.pbtxt import model_config_proto, to_pbtxt, to_triton_data_type
from pytriton.repository.warmup import plan_warmups

INPUTS = (
    Tensor(name="ids", dtype=np.int64, shape=(-1, 2)),
    Tensor(name="text", dtype=np.bytes_, shape=(1,)),
    Tensor(name="mask", dtype=np.float32, shape=(-1,), optional=True),
)


def entries(config: ModelConfig):
    """What Triton gets of the model's warm-ups: the ``model_warmup`` messages and the files they read."""
    plan = plan_warmups("M", INPUTS, config)
    return list(plan.entries), dict(plan.files)


def test_one_class_importable_from_the_published_module_and_the_package():
    assert model_config.ModelWarmup is common.ModelWarmup
    assert model_config.WarmupInput is common.WarmupInput
    assert {"ModelWarmup", "WarmupInput"} <= set(model_config.__all__)


def test_published_positional_forms_are_accepted():
    spec = WarmupInput(np.int64, (3, 2), random_data=True)
    warmup = ModelWarmup("bs2", 2, {"ids": spec}, 5)
    assert (warmup.name, warmup.batch_size, warmup.count) == ("bs2", 2, 5)
    assert warmup.inputs["ids"] is spec
    assert (spec.dtype, spec.shape, spec.zero_data, spec.random_data, spec.input_data_file) == (
        np.dtype(np.int64), (3, 2), False, True, None)
    assert ModelConfig(model_warmup=[warmup]).model_warmup == (warmup,)


def test_a_warmup_input_with_no_source_is_zero_data():
    assert WarmupInput(np.float32, [4]).zero_data is True
    assert WarmupInput(np.float32, [4], zero_data=None, random_data=None).zero_data is True
    assert WarmupInput(object, (1,)).dtype == np.dtype(object)
    assert WarmupInput(bytes, (1,)).dtype == np.dtype("S")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"zero_data": True, "random_data": True},
         "WarmupInput takes one of zero_data, random_data and input_data_file, got zero_data=True, random_data=True"),
        ({"random_data": True, "input_data_file": "a.bin"},
         "got random_data=True, input_data_file='a.bin'"),
        ({"zero_data": "yes"}, "WarmupInput.zero_data must be a bool"),
        ({"input_data_file": ""}, "WarmupInput.input_data_file must be a path to a file"),
        ({"input_data_file": 3}, "WarmupInput.input_data_file must be a path to a file"),
        ({"shape": ()}, r"WarmupInput.shape must be a non-empty sequence of integers >= 0"),
        ({"shape": (-1,)}, r"WarmupInput.shape .* \(bad axis -1\)"),
        ({"shape": 3}, r"WarmupInput.shape must be .*, got 3"),
        ({"dtype": None}, "WarmupInput.dtype is required"),
        ({"dtype": "nonsense"}, "WarmupInput.dtype must be a numpy dtype"),
    ],
)
def test_warmup_input_validates_its_fields(kwargs, message):
    arguments = {"dtype": np.float32, "shape": (2,), **kwargs}
    with pytest.raises(PyTritonBadParameterError, match=message):
        WarmupInput(**arguments)


def test_left_out_inputs_are_zero_data_with_variable_axes_of_one_and_optional_ones_are_skipped():
    (message,), files = entries(ModelConfig(model_warmup=[ModelWarmup(batch_size=2, count=3)]))
    assert files == {}
    assert (message.name, message.batch_size, message.count) == ("warmup", 2, 3)
    assert sorted(message.inputs) == ["ids", "text"]
    assert list(message.inputs["ids"].dims) == [1, 2] and message.inputs["ids"].zero_data
    assert list(message.inputs["text"].dims) == [1] and message.inputs["text"].zero_data


def test_given_samples_become_files_in_the_tensor_dtype_and_bytes_in_triton_serialisation():
    warmup = ModelWarmup(name="w1", inputs={"ids": [[1, 2], [3, 4], [5, 6]], "text": np.array(["hé"], dtype=object)})
    (message,), files = entries(ModelConfig(model_warmup=warmup))
    assert message.inputs["ids"].input_data_file == "w1-input0"
    assert list(message.inputs["ids"].dims) == [3, 2]
    assert np.frombuffer(files["w1-input0"], dtype=np.int64).tolist() == [1, 2, 3, 4, 5, 6]
    assert files["w1-input1"] == struct.pack("<I", 3) + "hé".encode()


def test_sample_arrays_are_copied_so_later_changes_do_not_reach_the_config():
    sample = np.array([[1, 2]])
    warmup = ModelWarmup(inputs={"ids": sample})
    sample[0, 0] = 99
    assert warmup.inputs["ids"].tolist() == [[1, 2]]


def test_declared_inputs_become_zero_random_and_file_entries(tmp_path, monkeypatch):
    (tmp_path / "ids.bin").write_bytes(np.arange(6, dtype=np.int64).tobytes())
    monkeypatch.chdir(tmp_path)
    warmups = [
        ModelWarmup("z", 2, {"ids": WarmupInput(np.int64, (4, 2), zero_data=True),
                             "mask": WarmupInput(np.float32, (3,), random_data=True)}, 1),
        ModelWarmup("f", 1, {"ids": WarmupInput(np.int64, (3, 2), input_data_file="ids.bin"),
                             "text": WarmupInput(object, (1,), random_data=True)}, 2),
    ]
    (zeros, from_file), files = entries(ModelConfig(model_warmup=warmups))
    assert list(zeros.inputs["ids"].dims) == [4, 2] and zeros.inputs["ids"].zero_data
    assert list(zeros.inputs["mask"].dims) == [3] and zeros.inputs["mask"].random_data
    assert zeros.inputs["mask"].data_type == to_triton_data_type(np.dtype(np.float32), "mask")
    assert zeros.inputs["text"].zero_data  # left out
    assert from_file.inputs["ids"].input_data_file == "f-input0"
    assert files == {"f-input0": pathlib.Path(tmp_path / "ids.bin")}  # relative to the current directory
    assert from_file.inputs["text"].random_data and from_file.count == 2


def test_the_config_text_carries_the_warmup_block():
    config = ModelConfig(model_warmup=[ModelWarmup(name="z")])
    text = to_pbtxt(model_config_proto("M", INPUTS, (Tensor(name="o", dtype=np.float32, shape=(1,)),), config,
                                       instance_count=1, warmups=plan_warmups("M", INPUTS, config).entries))
    assert 'model_warmup {\n  name: "z"\n  batch_size: 1' in text
    assert "zero_data: true" in text


@pytest.mark.parametrize(
    ("warmup", "config", "message"),
    [
        (ModelWarmup(inputs={"nope": [1]}), {}, r"gives inputs \['nope'\] that the model does not have"),
        (ModelWarmup(inputs={"ids": [1, 2]}), {},
         r"input 'ids' has shape \(2,\); expected one sample of shape \(-1, 2\)"),
        (ModelWarmup(inputs={"ids": [[1.5, 2.0]]}), {},
         r"dtype float64, which does not convert safely to the input's int64"),
        (ModelWarmup(inputs={"text": [1]}), {}, r"input 'text' has dtype int64; expected bytes or str items"),
        (ModelWarmup(inputs={"ids": WarmupInput(np.int32, (1, 2))}), {},
         r"input 'ids' has dtype int32; the model's input has dtype int64"),
        (ModelWarmup(inputs={"ids": WarmupInput(np.int64, (1, 3))}), {},
         r"input 'ids' has shape \(1, 3\); expected one sample of shape \(-1, 2\)"),
        (ModelWarmup(inputs={"ids": WarmupInput(np.int64, (1, 2), input_data_file="/no/such.bin")}), {},
         r"input 'ids': input_data_file '/no/such.bin' is not a file"),
        (ModelWarmup(batch_size=5), {"max_batch_size": 4}, r"batch_size=5 but max_batch_size is 4"),
        (ModelWarmup(batch_size=2), {"batching": False}, r"batch_size=2 but the model does not batch"),
    ],
)
def test_warmups_that_do_not_fit_the_model_are_refused_naming_model_warmup_and_input(warmup, config, message):
    with pytest.raises(PyTritonModelConfigError, match=r"model 'M': ModelWarmup 'warmup'.*" + message):
        entries(ModelConfig(model_warmup=[warmup], **config))


def test_a_data_file_shorter_than_one_sample_is_refused(tmp_path):
    short = tmp_path / "short.bin"
    short.write_bytes(b"\0" * 15)
    warmup = ModelWarmup(inputs={"ids": WarmupInput(np.int64, (1, 2), input_data_file=short)})
    with pytest.raises(PyTritonModelConfigError, match=r"'ids': input_data_file .* holds 15 bytes; .* needs 16"):
        entries(ModelConfig(model_warmup=[warmup]))


def test_a_npy_data_file_is_read_as_the_published_library_reads_it(tmp_path):
    # The published PyTriton loads .npy files with np.load; the raw file would send its header as data.
    sample = np.array([[-1, -100]], np.int64)
    for name, stored in (("one.npy", sample), ("rows.npy", np.stack([sample, sample, sample]))):
        np.save(tmp_path / name, stored)
        spec = WarmupInput(np.int64, (1, 2), input_data_file=tmp_path / name)
        warmup = ModelWarmup(batch_size=3, inputs={"ids": spec})
        messages, files = entries(ModelConfig(model_warmup=[warmup]))
        entry = messages[0].inputs["ids"]
        assert files[entry.input_data_file] == sample.tobytes() and list(entry.dims) == [1, 2]


def test_a_npy_file_of_different_rows_makes_pytriton_run_every_warmup_itself(tmp_path):
    # Triton's warm-up repeats one sample; rows that differ are sent by pytriton (as published).
    rows = np.array([[[1, 2]], [[3, 4]]], np.int64)
    np.save(tmp_path / "rows.npy", rows)
    first = ModelWarmup(name="zeros", batch_size=1, inputs={"ids": WarmupInput(np.int64, (1, 2), zero_data=True)})
    second = ModelWarmup(name="rows", batch_size=3, count=2,
                         inputs={"ids": WarmupInput(np.int64, (1, 2), input_data_file=tmp_path / "rows.npy")})
    config = ModelConfig(max_batch_size=4, model_warmup=[first, second])
    assert entries(config) == ([], {})  # none for Triton
    plans = plan_warmups("M", INPUTS, config).local
    assert [(plan.name, plan.count) for plan in plans] == [("zeros", 1), ("rows", 2)]  # all, in order
    assert plans[0].inputs["ids"].tolist() == [[[0, 0]]] and plans[0].inputs["text"].tolist() == [[b""]]
    assert plans[1].inputs["ids"].tolist() == [[[1, 2]], [[3, 4]], [[1, 2]]]  # repeated to the batch
    assert "mask" not in plans[1].inputs  # optional and not given
    assert plan_warmups("M", INPUTS, ModelConfig(model_warmup=[first])).local == ()  # Triton runs that one


def test_a_npy_data_file_of_another_shape_or_unreadable_is_refused(tmp_path):
    np.save(tmp_path / "wide.npy", np.zeros((1, 3), np.int64))
    (tmp_path / "broken.npy").write_bytes(b"not numpy")
    for name, message in (("wide.npy", r"holds an array of shape \(1, 3\); expected one sample of shape \(1, 2\)"),
                          ("broken.npy", r"is not a readable .npy file")):
        spec = WarmupInput(np.int64, (1, 2), input_data_file=tmp_path / name)
        warmup = ModelWarmup(batch_size=2, inputs={"ids": spec})
        with pytest.raises(PyTritonModelConfigError, match=message) as info:
            entries(ModelConfig(model_warmup=[warmup]))
        assert "'ids'" in str(info.value) and name in str(info.value)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"batch_size": 0}, r"ModelWarmup\('warmup'\).batch_size must be an integer >= 1, got 0"),
        ({"count": True}, r"ModelWarmup\('warmup'\).count must be an integer >= 1, got True"),
        ({"name": "a/b"}, "ModelWarmup.name must be a non-empty name"),
        ({"inputs": [1, 2]}, r"ModelWarmup\('warmup'\).inputs must map input names to WarmupInput or sample arrays"),
        ({"inputs": {"x": 3}}, r"ModelWarmup\('warmup'\).inputs\['x'\] must be a WarmupInput or a sample array"),
    ],
)
def test_model_warmup_validates_its_fields(kwargs, message):
    with pytest.raises(PyTritonBadParameterError, match=message):
        ModelWarmup(**kwargs)


def test_model_config_takes_a_list_of_warmups_with_distinct_names_or_one():
    one = ModelWarmup()
    assert ModelConfig().model_warmup is None  # the published default
    assert ModelConfig(model_warmup=one).model_warmup == (one,)
    assert ModelConfig(model_warmup=[one, ModelWarmup(name="b")]).model_warmup[1].name == "b"
    with pytest.raises(PyTritonBadParameterError, match="ModelConfig.model_warmup entries need distinct names"):
        ModelConfig(model_warmup=[one, ModelWarmup()])
    with pytest.raises(PyTritonBadParameterError, match="ModelConfig.model_warmup must be a list of ModelWarmup"):
        ModelConfig(model_warmup={"x": 1})


def test_the_old_warmup_keyword_still_works_with_a_deprecation_warning():
    one = ModelWarmup()
    with pytest.warns(DeprecationWarning, match=r"ModelConfig\(warmup=...\) is deprecated") as caught:
        config = ModelConfig(warmup=one)
    assert caught[0].filename == __file__  # points at the user's line
    assert config.model_warmup == (one,) and config.warmup is None
    with pytest.raises(PyTritonBadParameterError, match="both model_warmup and its deprecated alias warmup"):
        ModelConfig(warmup=one, model_warmup=[one])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # replace() passes warmup=None: no warning, no conflict
        assert dataclasses.replace(config, max_batch_size=8).model_warmup == (one,)
