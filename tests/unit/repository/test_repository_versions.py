"""A name's versions in its config.pbtxt: the version policy written, and the served differences
that keep a new version from serving beside a bound one (`pytriton.repository.versions`)."""

import importlib.util
import sys

import numpy as np
import pytest

from pytriton.model_config import DynamicBatcher, ModelConfig, Tensor
from pytriton.repository.pbtxt import model_config_proto, parse_pbtxt, to_pbtxt
from pytriton.repository.versions import refusal, served_difference, served_versions, with_versions
from pytriton.repository.writer import write_version

_IN = [Tensor(name="x", shape=(1,), dtype=np.float32)]
_OUT = [Tensor(name="y", shape=(1,), dtype=np.float32)]


def _text(inputs=_IN, outputs=_OUT, config=None, count=1, parameters=None):
    proto = model_config_proto("Model", inputs, outputs, config or ModelConfig(), instance_count=count,
                               parameters=parameters or {"pytriton.endpoint": "ipc:///s/n1"}, backend="pytriton")
    return to_pbtxt(proto)


def test_with_versions_writes_a_specific_policy_of_the_versions_sorted():
    text = with_versions(_text(), [3, 1, 3])
    assert "version_policy {\n  specific {\n    versions: 1\n    versions: 3\n  }\n}" in text
    assert list(parse_pbtxt(text).version_policy.specific.versions) == [1, 3]
    assert served_versions(text) == [1, 3]


def test_with_versions_replaces_the_policy_it_finds():
    text = with_versions(with_versions(_text(), [1, 2]), [2])
    assert served_versions(text) == [2]
    latest = _text() + "version_policy { latest { num_versions: 1 } }\n"
    assert served_versions(latest) == []
    assert served_versions(with_versions(latest, [4])) == [4]
    assert not parse_pbtxt(with_versions(latest, [4])).version_policy.HasField("latest")


def test_with_versions_needs_a_version():
    with pytest.raises(ValueError, match="at least one version"):
        with_versions(_text(), [])


def test_the_version_policy_alone_is_no_difference():
    assert served_difference(with_versions(_text(), [1]), with_versions(_text(), [1, 2])) is None
    assert served_difference(_text(), _text()) is None


@pytest.mark.parametrize(
    ("new", "field", "shown"),
    [
        ({"inputs": [Tensor(name="x", shape=(1,), dtype=np.int32)]}, "inputs", "TYPE_INT32"),
        ({"outputs": [Tensor(name="z", shape=(1,), dtype=np.float32)]}, "outputs", 'name: "z"'),
        ({"count": 2}, "the number of instances", "count: 2"),
        ({"config": ModelConfig(max_batch_size=16)}, "max_batch_size", "16"),
        ({"config": ModelConfig(batcher=DynamicBatcher(max_queue_delay_microseconds=500))}, "dynamic batcher",
         "max_queue_delay_microseconds: 500"),
        ({"config": ModelConfig(decoupled=True)}, "decoupled", "decoupled: true"),
        ({"parameters": {"pytriton.endpoint": "ipc:///s/n1", "pytriton.relayed": "1"}}, "coroutine", "1"),
    ],
)
def test_a_served_difference_names_the_field_and_both_values(new, field, shown):
    difference = served_difference(with_versions(_text(), [1]), _text(**new))
    assert difference is not None
    name, before, after = difference
    assert field in name
    assert shown in after and shown not in before


def test_the_refusal_names_the_model_both_versions_the_field_and_the_way_out():
    message = refusal("Ranker", 1, 2, ("inputs", "[{x FP32}]", "[{x INT32}]"))
    assert "model 'Ranker' version 2 cannot serve beside version 1" in message
    assert "they differ in inputs, [{x INT32}] where version 1 has [{x FP32}]" in message
    assert "unbind the served version first" in message and "another model name" in message


def test_a_long_value_is_clipped():
    many = [Tensor(name=f"input_with_a_long_name_{i}", shape=(1,), dtype=np.float32) for i in range(20)]
    _, before, after = served_difference(_text(), _text(inputs=many))
    assert len(after) <= 240 and after.endswith("...")


def test_a_version_folder_gets_no_bytecode(tmp_path, monkeypatch):
    """The stub's import of model.py must not change the folder of a version that serves."""
    folder = write_version(tmp_path, "Model", 3, ["/nowhere"])
    assert sorted(p.name for p in folder.iterdir()) == ["__pycache__", "model.py"]
    (folder / "probe.py").write_text("VALUE = 7\n")
    listing = sorted((p.name, p.stat().st_mtime_ns) for p in folder.iterdir())
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    spec = importlib.util.spec_from_file_location("pytriton_probe_module", folder / "probe.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.VALUE == 7
    assert sorted((p.name, p.stat().st_mtime_ns) for p in folder.iterdir()) == listing
    assert (folder / "__pycache__").is_file()
