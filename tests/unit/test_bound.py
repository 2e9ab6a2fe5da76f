"""The bound models by name and version (`pytriton.facade.bound`), and the names of a version's sockets:
no process."""

import os

import numpy as np
import pytest

from pytriton.exceptions import PyTritonBadParameterError
from pytriton.facade.binding import check_socket_paths
from pytriton.facade.bound import BoundModel, BoundModels, ModelDeclaration
from pytriton.ipc import protocol
from pytriton.model_config import ModelConfig, Tensor
from pytriton.worker.context import TritonContext


def _model(name, version, sockets, instances=2):
    context = TritonContext(name, version, (Tensor(name="x", shape=(1,), dtype=np.float32),),
                            (Tensor(name="y", shape=(1,), dtype=np.float32),), ModelConfig())
    declaration = ModelDeclaration(context, [print] * instances, False, [False] * instances)
    name_endpoint = protocol.name_endpoint(sockets, name)
    return BoundModel(declaration, [], "", protocol.version_endpoint(name_endpoint, version), "", name_endpoint)


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


def test_the_configuration_names_each_version_s_sockets_with_the_version_left_open(tmp_path):
    name_endpoint = protocol.name_endpoint(tmp_path, "Model")
    assert name_endpoint == protocol.name_endpoint(str(tmp_path), "Model")
    one, two = _model("Model", 1, tmp_path), _model("Model", 2, tmp_path)
    patterns = protocol.data_socket_patterns(name_endpoint, 2)
    # What pytriton's backend connects to once it put its version in (backend.c, with_version)
    # is where that version's handlers listen: each version reaches its own workers.
    for model in (one, two):
        own = [protocol.instance_data_socket(model.endpoint, i) for i in range(2)]
        assert [p.replace(protocol.VERSION_TOKEN, str(model.version)) for p in patterns] == own
        assert all(path.startswith(str(tmp_path) + os.sep) for path in own)
    assert one.endpoint != two.endpoint
    assert protocol.model_shm_prefix("srv", "Model", 2) == f"srv-{protocol.model_key('Model', 2)}"


def test_a_version_whose_socket_paths_do_not_fit_is_refused_with_its_name(tmp_path):
    folder = tmp_path / ("s" * (80 - len(str(tmp_path)) - 1))  # the longest sockets folder a workspace takes
    endpoint = protocol.version_endpoint(protocol.name_endpoint(folder, "Model"), 1234567)
    check_socket_paths("Model", 1234567, endpoint, 9)  # seven digits and instance 8 fit
    endpoint = protocol.version_endpoint(protocol.name_endpoint(folder, "Model"), 2 ** 40)
    with pytest.raises(PyTritonBadParameterError, match=r"model 'Model' version 1099511627776: .* over the 107"):
        check_socket_paths("Model", 2 ** 40, endpoint, 2)
