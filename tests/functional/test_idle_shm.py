"""An idle server gives its shared memory back (pytriton/ipc/shm.py, `IDLE_RELEASE_S`).

After a large answer, the worker in this process holds an output arena (a /dev/shm segment it
created) and maps the proxy's input arena. Once no message came for `IDLE_RELEASE_S`, the
worker unlinks its arenas and unmaps the proxies' segments, so neither /dev/shm nor this
process's RSS stays at the peak of one burst; the next large request is served as before. The
wait is shortened here by patching the constant in this process (the worker's side).
"""

from __future__ import annotations

import os
import time

import numpy as np
import pytest
from support import http_url, running_triton, shm_entries, wait_until

from pytriton.client import ModelClient
from pytriton.decorators import batch
from pytriton.ipc import shm
from pytriton.model_config import ModelConfig, Tensor
from pytriton.worker import handler

pytestmark = pytest.mark.functional

IDLE_S = 1.0
PAYLOAD = np.arange(4 << 20, dtype=np.uint64).astype(np.uint8)  # 4 MiB: through the arenas, not inline


@batch
def echo(payload):
    return {"payload": payload}


def _ours_mapped(prefix: str) -> list:
    return [name for name in shm.mapped_segments() if name.startswith(prefix)]


def test_an_idle_worker_unlinks_its_arenas_and_unmaps_the_proxies(monkeypatch):
    monkeypatch.setattr(shm, "IDLE_RELEASE_S", IDLE_S)
    monkeypatch.setattr(handler, "IDLE_RELEASE_S", IDLE_S)
    prefix = f"pytriton-{os.getpid()}-"
    io = [Tensor(name="payload", dtype=np.uint8, shape=(-1,))]
    with running_triton() as triton:
        triton.bind("Echo", echo, inputs=io, outputs=io, config=ModelConfig(max_batch_size=4))
        triton.run()
        with ModelClient(http_url(triton._config), "Echo") as client:
            assert np.array_equal(client.infer_sample(payload=PAYLOAD)["payload"], PAYLOAD)
            outputs = [name for name in shm_entries(prefix) if "-out-" in name]
            assert outputs, "the answer did not use an output arena"
            assert any("-in-" in name for name in _ours_mapped(prefix)), "the worker did not map the input arena"
            started = time.monotonic()
            assert wait_until(lambda: not _ours_mapped(prefix) and not set(outputs) & set(shm_entries(prefix)),
                              timeout_s=IDLE_S + 5), (_ours_mapped(prefix), shm_entries(prefix))
            assert time.monotonic() - started >= IDLE_S * 0.5  # released for idleness, not at once
            # What is left in /dev/shm is the proxy's input arena (its owner releases it at its next
            # message after a quiet spell) and Triton's own pool; the next large request works.
            assert np.array_equal(client.infer_sample(payload=PAYLOAD[::-1].copy())["payload"], PAYLOAD[::-1])
