"""A start and a stop leave no copy of pytriton's own models in the temporary folder.

The stop makes the server not ready by loading a model that cannot load, and the start opens
the readiness gate by loading its open model. Sent with their files, those loads made
tritonserver copy them into a ``/tmp/folderXXXXXX`` it never removed: two more folders for every
start and stop. The models now go into the server's repository and load from there.
"""

from __future__ import annotations

import pathlib
import tempfile
import time

import numpy as np
import pytest
from support import http_status, server_config, wait_until

from pytriton.model_config import ModelConfig, Tensor
from pytriton.triton import Triton

pytestmark = pytest.mark.functional


def _copies(since: float, model: str) -> list:
    found = []
    for folder in pathlib.Path(tempfile.gettempdir()).glob("folder??????"):
        try:
            if folder.stat().st_mtime >= since and model in (folder / "config.pbtxt").read_text():
                found.append(folder)
        except OSError:
            continue
    return found


@pytest.mark.parametrize("backend", ["pytriton", "python"])
def test_a_start_and_a_stop_leave_no_copy_of_the_gate_or_the_stopping_model(backend):
    started = time.time()
    with Triton(config=server_config(model_backend=backend)) as triton:  # started here: the gate holds readiness
        triton.bind("Echo", lambda requests: requests, inputs=[Tensor(dtype=np.float32, shape=(-1,))],
                    outputs=[Tensor(dtype=np.float32, shape=(-1,))], config=ModelConfig(max_batch_size=4))
        triton.run()  # opens the gate
        assert triton.is_alive()
        ready = f"http://127.0.0.1:{triton._config.http_port}/v2/health/ready"
        assert wait_until(lambda: http_status(ready) == 200, timeout_s=10)
    assert _copies(started, "pytriton_stopping") == []
    assert _copies(started, "pytriton_readiness_gate") == []
