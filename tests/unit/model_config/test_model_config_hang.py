"""`ModelConfig.hang_timeout_s`: checked like the other time limits."""

import pytest

from pytriton.exceptions import PyTritonBadParameterError
from pytriton.model_config import ModelConfig


def test_hang_timeout_takes_a_positive_number_of_seconds():
    assert ModelConfig().hang_timeout_s is None
    assert ModelConfig(hang_timeout_s=30).hang_timeout_s == 30.0
    for bad in (0, -1, float("inf"), "10", True):
        with pytest.raises(PyTritonBadParameterError, match=r"ModelConfig.hang_timeout_s must be None"):
            ModelConfig(hang_timeout_s=bad)
