"""A stop leaves no copy of pytriton's stopping model in the temporary folder.

The stop makes the server not ready by loading a model that cannot load. Sent with its files,
that load made tritonserver copy them into a ``/tmp/folderXXXXXX`` it never removed: one more
folder for every stop. The model now goes into the server's repository and loads from there.
"""

from __future__ import annotations

import pathlib
import tempfile
import time

import numpy as np
import pytest
from support import server_config

from pytriton.model_config import ModelConfig, Tensor
from pytriton.triton import Triton

pytestmark = pytest.mark.functional


def _stopping_copies(since: float) -> list:
    found = []
    for folder in pathlib.Path(tempfile.gettempdir()).glob("folder??????"):
        try:
            if folder.stat().st_mtime >= since and "pytriton_stopping" in (folder / "config.pbtxt").read_text():
                found.append(folder)
        except OSError:
            continue
    return found


def test_a_stop_leaves_no_copy_of_its_stopping_model():
    started = time.time()
    triton = Triton(config=server_config())
    triton.bind("Echo", lambda requests: requests, inputs=[Tensor(dtype=np.float32, shape=(-1,))],
                outputs=[Tensor(dtype=np.float32, shape=(-1,))], config=ModelConfig(max_batch_size=4))
    triton.run()
    assert triton.is_alive()
    triton.stop()
    assert _stopping_copies(started) == []
