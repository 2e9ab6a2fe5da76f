"""The bound models by name and version, and the slot links (`pytriton.bound`): no process, only files."""

import os

import numpy as np
import pytest

from pytriton.bound import BoundModel, BoundModels, ModelDeclaration, point_slot, remove_slot
from pytriton.ipc import protocol
from pytriton.model_config import ModelConfig, Tensor
from pytriton.worker.context import TritonContext


def _model(name, version, sockets, instances=2):
    context = TritonContext(name, version, (Tensor(name="x", shape=(1,), dtype=np.float32),),
                            (Tensor(name="y", shape=(1,), dtype=np.float32),), ModelConfig())
    declaration = ModelDeclaration(context, [print] * instances, False, [False] * instances)
    slot = protocol.slot_endpoint(sockets, name)
    return BoundModel(declaration, [], "", protocol.version_endpoint(slot, name, version), "", slot)


def test_versions_are_kept_by_name_and_the_highest_answers_for_the_name(tmp_path):
    models = BoundModels()
    for name, version in (("A", 2), ("B", 1), ("A", 1)):
        models.add(_model(name, version, tmp_path))
    assert models.names() == ["A", "B"]
    assert models.versions("A") == [1, 2] and models.versions("C") == []
    assert models.get("A").version == 2 and models.get("A", 1).version == 1
    assert [(m.name, m.version) for m in models.all()] == [("A", 2), ("A", 1), ("B", 1)]
    assert [m.version for m in models.pop("A", 2)] == [2]
    assert "A" in models and models.versions("A") == [1]
    assert [m.version for m in models.pop("A", 1)] == [1]
    assert "A" not in models
    assert models.pop("A", 1) == []
    with pytest.raises(KeyError):
        models.get("A")


def test_names_of_a_version_and_of_its_slot_follow_one_contract(tmp_path):
    slot = protocol.slot_endpoint(tmp_path, "Model")
    assert slot == protocol.slot_endpoint(str(tmp_path), "Model")
    version_path = tmp_path / protocol.model_key("Model", 2)
    assert protocol.version_endpoint(slot, "Model", 2) == protocol.ipc_endpoint(version_path)
    assert protocol.slot_data_socket(tmp_path, "Model", 1) == protocol.data_socket_path(
        protocol.ipc_socket_path(protocol.instance_endpoint(slot, 1)))
    assert protocol.name_key("Model") != protocol.model_key("Model", 1)
    assert protocol.model_shm_prefix("srv", "Model", 2) == f"srv-{protocol.model_key('Model', 2)}"


def test_the_slot_leads_to_the_version_it_is_pointed_at_and_goes(tmp_path):
    one, two = _model("Model", 1, tmp_path), _model("Model", 2, tmp_path)
    point_slot(one)
    links = [protocol.slot_data_socket(tmp_path, "Model", index) for index in range(2)]
    target = [os.path.basename(protocol.data_socket_path(protocol.ipc_socket_path(
        protocol.instance_endpoint(one.endpoint, index)))) for index in range(2)]
    assert [os.readlink(link) for link in links] == target
    point_slot(two)
    assert all(protocol.model_key("Model", 2) in os.readlink(link) for link in links)
    assert sorted(os.listdir(tmp_path)) == sorted(os.path.basename(link) for link in links)  # no staged link left
    remove_slot(two)
    assert os.listdir(tmp_path) == []
