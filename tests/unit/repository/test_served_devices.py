"""The config.pbtxt of a model whose process instances are placed on devices: pure, from the text.

The instances are grouped by device, one ``KIND_CPU`` group named after each (tritonserver
refuses ``KIND_GPU`` on a host without GPUs), so Triton's instance names say the device; those
names, in worker order, tell the backend and the proxy which handler each instance relays to.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from pytriton.ipc import protocol
from pytriton.model_config import ModelConfig, Tensor
from pytriton.repository.pbtxt import parse_pbtxt
from pytriton.repository.served import served_config_text

X = [Tensor(name="x", dtype=np.float32, shape=(-1,))]


def _served(config, count, backend="pytriton"):
    text = served_config_text("Placed", X, X, config, count, coroutines=False, endpoint="ipc:///tmp/s/m",
                              shm_prefix="p", backend=backend, parameters={})
    return parse_pbtxt(text)


@pytest.mark.parametrize("backend", ["pytriton", "python"])
def test_the_devices_of_the_instances_are_written_in_instance_order(backend):
    proto = _served(ModelConfig(process_instances=True, devices=[0, 1]), 4, backend)
    assert json.loads(proto.parameters[protocol.PARAM_DEVICES].string_value) == [0, 1, 0, 1]
    assert proto.parameters[protocol.PARAM_HANDLERS].string_value == "4"
    cpu = proto.instance_group[0].KIND_CPU
    groups = [(group.kind, group.count, list(group.gpus), group.name) for group in proto.instance_group]
    assert groups == [(cpu, 2, [], "Placed_gpu0"), (cpu, 2, [], "Placed_gpu1")]
    names = json.loads(proto.parameters[protocol.PARAM_INSTANCE_NAMES].string_value)
    assert names == ["Placed_gpu0_0", "Placed_gpu1_0", "Placed_gpu0_1", "Placed_gpu1_1"]  # worker order
    assert [protocol.instance_index(name, names) for name in names] == [0, 1, 2, 3]


def test_uuids_are_written_as_listed_and_name_their_groups():
    proto = _served(ModelConfig(process_instances=True, devices=["GPU-5f1c", "MIG-GPU-1a2b/1/0"]), 2)
    assert json.loads(proto.parameters[protocol.PARAM_DEVICES].string_value) == ["GPU-5f1c", "MIG-GPU-1a2b/1/0"]
    assert [group.name for group in proto.instance_group] == ["Placed_GPU-5f1c", "Placed_MIG-GPU-1a2b-1-0"]


def test_an_instance_name_outside_the_list_is_refused_and_without_a_list_k_counts():
    with pytest.raises(ValueError, match="'Placed_gpu9_0' is not one of"):
        protocol.instance_index("Placed_gpu9_0", ["Placed_gpu0_0"])
    assert protocol.instance_index("Placed_3") == 3


@pytest.mark.parametrize("config", [ModelConfig(), ModelConfig(process_instances=True)])
def test_a_model_without_devices_has_no_devices_parameter(config):
    proto = _served(config, 2)
    assert protocol.PARAM_DEVICES not in proto.parameters
    assert protocol.PARAM_INSTANCE_NAMES not in proto.parameters
    assert [group.count for group in proto.instance_group] == [2]


@pytest.mark.parametrize("backend, devices, count",
                         [("pytriton", None, 4), ("python", None, 2), ("pytriton", [0, 1], 2)])
def test_dispatchers_are_added_on_pytritons_backend_without_devices(backend, devices, count):
    text = served_config_text("Routed", X, X, ModelConfig(process_instances=True, devices=devices), 2,
                              coroutines=False, endpoint="ipc:///tmp/s/m", shm_prefix="p", backend=backend,
                              parameters={}, dispatchers=2)
    proto = parse_pbtxt(text)
    assert sum(group.count for group in proto.instance_group) == count
    assert proto.parameters[protocol.PARAM_HANDLERS].string_value == "2"  # the workers: the rest only dispatch
