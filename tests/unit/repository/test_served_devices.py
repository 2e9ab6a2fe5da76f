"""The config.pbtxt of a model whose process instances are placed on devices: pure, from the text.

The instances stay one ``KIND_CPU`` group of as many instances as callables (tritonserver refuses
``KIND_GPU`` on a host without GPUs, and the backend and the proxy find instance k's worker by the
``_<k>`` Triton ends each instance name of a group with); the placement is a parameter.
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
    groups = [(group.kind, group.count, list(group.gpus), group.name) for group in proto.instance_group]
    assert groups == [(proto.instance_group[0].KIND_CPU, 4, [], "")]


def test_uuids_are_written_as_listed():
    proto = _served(ModelConfig(process_instances=True, devices=["GPU-5f1c", "MIG-1a2b"]), 2)
    assert json.loads(proto.parameters[protocol.PARAM_DEVICES].string_value) == ["GPU-5f1c", "MIG-1a2b"]


@pytest.mark.parametrize("config", [ModelConfig(), ModelConfig(process_instances=True)])
def test_a_model_without_devices_has_no_devices_parameter(config):
    proto = _served(config, 2)
    assert protocol.PARAM_DEVICES not in proto.parameters
    assert [group.count for group in proto.instance_group] == [2]
