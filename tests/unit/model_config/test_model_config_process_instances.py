"""`ModelConfig.process_instances`: default, validation, and the CUDA check made at bind."""

import os
import sys
import types

import numpy as np
import pytest

from pytriton.exceptions import PyTritonBadParameterError, PyTritonModelConfigError
from pytriton.model_config import ModelConfig
from pytriton.worker.process_instance import check_forkable


def test_instances_are_threads_by_default():
    assert ModelConfig().process_instances is False


@pytest.mark.parametrize("value", [True, False, np.bool_(True)])
def test_a_bool_is_stored_as_a_plain_bool(value):
    config = ModelConfig(process_instances=value)
    assert config.process_instances is bool(value)


@pytest.mark.parametrize("value", [1, 0, "yes", "False", None, [True]])
def test_anything_but_a_bool_is_refused_naming_field_and_value(value):
    with pytest.raises(PyTritonBadParameterError) as info:
        ModelConfig(process_instances=value)
    message = str(info.value)
    assert "ModelConfig.process_instances" in message and repr(value) in message and "bool" in message


def _fake_torch(initialised: bool) -> types.SimpleNamespace:
    return types.SimpleNamespace(cuda=types.SimpleNamespace(is_initialized=lambda: initialised))


def test_forking_is_refused_once_cuda_is_initialised(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", _fake_torch(True))
    with pytest.raises(PyTritonModelConfigError) as info:
        check_forkable("Resnet")
    message = str(info.value)
    assert "model 'Resnet'" in message and "process_instances=True" in message
    assert "process_instances=False" in message and "inside the inference callable" in message


@pytest.mark.parametrize("torch", [None, _fake_torch(False), types.SimpleNamespace()])
def test_forking_is_allowed_without_cuda_in_use(monkeypatch, torch):
    if torch is None:
        monkeypatch.delitem(sys.modules, "torch", raising=False)
    else:
        monkeypatch.setitem(sys.modules, "torch", torch)
    check_forkable("Resnet")  # no error


def _probed_torch() -> types.SimpleNamespace:
    """torch after ``torch.cuda.is_available()`` on a GPU machine: not initialised, yet every
    fork is marked bad (torch's fork handler flags the child, not the parent)."""
    parent = os.getpid()
    return types.SimpleNamespace(cuda=types.SimpleNamespace(
        is_initialized=lambda: False, _is_in_bad_fork=lambda: os.getpid() != parent))


def test_forking_is_refused_when_torch_already_probed_cuda(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", _probed_torch())
    with pytest.raises(PyTritonModelConfigError) as info:
        check_forkable("Resnet")
    message = str(info.value)
    assert "model 'Resnet'" in message and "torch.cuda.is_available()" in message
    assert "PYTORCH_NVML_BASED_CUDA_CHECK=1" in message and "process_instances=False" in message


def test_forking_is_allowed_when_forks_keep_cuda_usable(monkeypatch):
    cuda = types.SimpleNamespace(is_initialized=lambda: False, _is_in_bad_fork=lambda: False)
    torch = types.SimpleNamespace(cuda=cuda)
    monkeypatch.setitem(sys.modules, "torch", torch)
    check_forkable("Resnet")  # no error
