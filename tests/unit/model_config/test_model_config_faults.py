"""`ModelConfig.isolate_failures` and `ModelConfig.execution_timeout_s`: defaults and validation."""

import numpy as np
import pytest

from pytriton.exceptions import PyTritonBadParameterError
from pytriton.model_config import ModelConfig


def test_both_are_off_by_default():
    config = ModelConfig()
    assert config.isolate_failures is False
    assert config.execution_timeout_s is None


@pytest.mark.parametrize("value, stored", [(1, 1.0), (0.25, 0.25), (np.float32(2.5), 2.5)])
def test_execution_timeout_is_stored_as_float(value, stored):
    config = ModelConfig(execution_timeout_s=value)
    assert config.execution_timeout_s == stored and type(config.execution_timeout_s) is float


@pytest.mark.parametrize("value", [0, -1, -0.5, "1", True, np.bool_(True), float("nan"), float("inf"), [1]])
def test_bad_execution_timeout_is_refused_naming_field_and_value(value):
    with pytest.raises(PyTritonBadParameterError) as info:
        ModelConfig(execution_timeout_s=value)
    message = str(info.value)
    assert "ModelConfig.execution_timeout_s" in message and repr(value) in message
    assert "positive number of seconds" in message


@pytest.mark.parametrize("value", ["yes", 1, None])
def test_isolate_failures_must_be_bool(value):
    with pytest.raises(PyTritonBadParameterError, match=r"ModelConfig.isolate_failures must be a bool"):
        ModelConfig(isolate_failures=value)


@pytest.mark.parametrize("options, field", [({"isolate_failures": True}, "isolate_failures"),
                                            ({"execution_timeout_s": 2}, "execution_timeout_s")])
def test_decoupled_models_refuse_them(options, field):
    with pytest.raises(PyTritonBadParameterError, match=rf"ModelConfig.{field}=.* cannot be combined with "
                                                        r"ModelConfig.decoupled=True"):
        ModelConfig(decoupled=True, **options)


def test_both_together_on_a_model_without_batching():
    config = ModelConfig(batching=False, isolate_failures=True, execution_timeout_s=3)
    assert config.isolate_failures and config.execution_timeout_s == 3.0
