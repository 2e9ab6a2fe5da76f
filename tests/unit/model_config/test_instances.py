"""`ModelConfig.devices`, `InstanceSetup` and the round robin of devices over instances: pure checks."""

from __future__ import annotations

import numpy as np
import pytest

from pytriton.exceptions import PyTritonBadParameterError
from pytriton.model_config import InstancePlacement, InstanceSetup, ModelConfig
from pytriton.model_config.common import rechecked
from pytriton.model_config.instances import instance_devices


def test_no_devices_by_default():
    assert ModelConfig().devices is None
    assert ModelConfig(process_instances=True).devices is None


@pytest.mark.parametrize("given,stored", [
    ([0, 1], (0, 1)),
    ((3,), (3,)),
    ([np.int64(2), 0, 0], (2, 0, 0)),  # numpy ints, and two instances on one device
    (["GPU-5f1c0a", " MIG-1a2b "], ("GPU-5f1c0a", "MIG-1a2b")),
])
def test_devices_are_stored_as_a_tuple_of_ordinals_or_uuids(given, stored):
    config = ModelConfig(process_instances=True, devices=given)
    assert config.devices == stored
    assert all(type(device) in (int, str) for device in config.devices)
    assert rechecked(config).devices == stored  # bind checks the config again: the same value


@pytest.mark.parametrize("value", [[], [-1], [True], [1.0], ["0,1"], [""], "0", 0, [[0]], {0: 1}])
def test_bad_devices_are_refused_naming_the_field_and_the_value(value):
    with pytest.raises(PyTritonBadParameterError) as info:
        ModelConfig(process_instances=True, devices=value)
    message = str(info.value)
    assert "ModelConfig.devices" in message and repr(value) in message and "ordinals" in message


def test_devices_need_process_instances():
    with pytest.raises(PyTritonBadParameterError, match=r"devices=\[0, 1\].*process_instances=True"):
        ModelConfig(devices=[0, 1])


def test_an_assigned_devices_value_is_checked_at_bind():
    config = ModelConfig(process_instances=True)
    config.devices = [-2]
    with pytest.raises(PyTritonBadParameterError, match="entry -2"):
        rechecked(config)


def test_instances_take_the_devices_in_turn():
    assert instance_devices((0, 1), 2) == [0, 1]
    assert instance_devices((0, 1), 5) == [0, 1, 0, 1, 0]
    assert instance_devices(("GPU-a",), 2) == ["GPU-a", "GPU-a"]
    assert instance_devices(None, 3) == [None, None, None]


def test_an_instance_setup_keeps_its_factory_and_defaults():
    def load(placement):
        return lambda requests: []

    setup = InstanceSetup(load)
    assert (setup.factory, setup.asynchronous, setup.timeout_s) == (load, False, 600.0)
    assert InstanceSetup(load, asynchronous=True, timeout_s=30).timeout_s == 30.0


@pytest.mark.parametrize("kwargs,field", [
    ({"factory": "model.pt"}, "InstanceSetup.factory"),
    ({"factory": print, "asynchronous": 1}, "InstanceSetup.asynchronous"),
    ({"factory": print, "timeout_s": 0}, "InstanceSetup.timeout_s"),
    ({"factory": print, "timeout_s": float("inf")}, "InstanceSetup.timeout_s"),
    ({"factory": print, "timeout_s": True}, "InstanceSetup.timeout_s"),
])
def test_a_bad_instance_setup_is_refused_naming_the_field(kwargs, field):
    with pytest.raises(PyTritonBadParameterError, match=field):
        InstanceSetup(**kwargs)


def test_a_placement_says_where_an_instance_runs():
    placement = InstancePlacement("Model", 1, 1, 1, "1")
    assert (placement.model_name, placement.instance, placement.device, placement.visible_devices) == (
        "Model", 1, 1, "1")
    assert InstancePlacement("Model", 1, 0).device is None
