"""`bind` refuses the fault options for async callables, naming the model and the option; the
model is then not bound and nothing is left behind."""

from __future__ import annotations

import numpy as np
import pytest
from support import our_leftovers, server_config

from pytriton.exceptions import PyTritonModelConfigError
from pytriton.model_config import ModelConfig, Tensor
from pytriton.triton import Triton

pytestmark = pytest.mark.functional


async def _echo(requests):
    return requests


@pytest.mark.parametrize("options, named", [({"isolate_failures": True}, "isolate_failures=True"),
                                            ({"execution_timeout_s": 2}, "execution_timeout_s=2.0")])
def test_async_callable_refuses_fault_options_at_bind(options, named):
    io = {"inputs": [Tensor(name="x", dtype=np.float32, shape=(1,))],
          "outputs": [Tensor(name="x", dtype=np.float32, shape=(1,))]}
    with Triton(config=server_config()) as triton:
        with pytest.raises(PyTritonModelConfigError) as info:
            triton.bind("AsyncEcho", _echo, config=ModelConfig(**options), **io)
        message = str(info.value)
        assert "model 'AsyncEcho'" in message and f"ModelConfig({named})" in message and "async" in message
        triton.bind("AsyncEcho", _echo, **io)  # the refused bind left no half-bound model behind
    assert our_leftovers() == {"processes": [], "segments": [], "folders": []}
