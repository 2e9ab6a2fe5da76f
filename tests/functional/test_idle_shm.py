"""An idle server gives its shared memory back (pytriton/ipc/shm.py, `IDLE_RELEASE_S`).

After a large answer, the worker in this process holds an output arena (a /dev/shm segment it
created) and maps the proxy's input arena, which the proxy in the stub owns. Once no message
came for `IDLE_RELEASE_S`, the worker unlinks its arenas and unmaps the proxies' segments, and
each proxy unlinks its own, so neither /dev/shm nor any RSS stays at the peak of one burst; the
next large request is served as before. The worker's wait is shortened here by patching the
constant in this process; the stub keeps its own.
"""

from __future__ import annotations

import contextlib
import os
import time
from typing import Iterator

import numpy as np
import pytest
from support import http_url, running_triton, shm_entries, wait_until

from pytriton.client import ModelClient
from pytriton.decorators import batch
from pytriton.ipc import shm
from pytriton.model_config import ModelConfig, Tensor
from pytriton.worker import blocking

pytestmark = pytest.mark.functional

IDLE_S = 1.0
PAYLOAD = np.arange(4 << 20, dtype=np.uint64).astype(np.uint8)  # 4 MiB: through the arenas, not inline
PREFIX = f"pytriton-{os.getpid()}-"
PROXY_IDLE_S = shm.IDLE_RELEASE_S  # the stub's value: the patch below reaches this process only


@batch
def echo(payload):
    return {"payload": payload}


def _ours_mapped(prefix: str) -> list:
    return [name for name in shm.mapped_segments() if name.startswith(prefix)]


@contextlib.contextmanager
def _serving(monkeypatch, name: str, infer_func) -> Iterator[ModelClient]:
    """A server with one echo model, the idle time shortened in the worker; a client of it, whose
    first large request has gone through the arenas (the worker mapped the proxy's)."""
    monkeypatch.setattr(shm, "IDLE_RELEASE_S", IDLE_S)
    monkeypatch.setattr(blocking, "IDLE_RELEASE_S", IDLE_S)
    io = [Tensor(name="payload", dtype=np.uint8, shape=(-1,))]
    with running_triton() as triton:
        triton.bind(name, infer_func, inputs=io, outputs=io, config=ModelConfig(max_batch_size=4))
        triton.run()
        with ModelClient(http_url(triton._config), name) as client:
            assert np.array_equal(client.infer_sample(payload=PAYLOAD)["payload"], PAYLOAD)
            assert any("-in-" in name for name in _ours_mapped(PREFIX)), "the worker did not map the input arena"
            yield client
            # What the worker released comes back on demand.
            assert np.array_equal(client.infer_sample(payload=PAYLOAD[::-1].copy())["payload"], PAYLOAD[::-1])


def test_an_idle_worker_unlinks_its_arenas_and_unmaps_the_proxies(monkeypatch):
    with _serving(monkeypatch, "Echo", echo):
        outputs = [name for name in shm_entries(PREFIX) if "-out-" in name]
        assert outputs, "the answer did not use an output arena"
        started = time.monotonic()
        assert wait_until(lambda: not _ours_mapped(PREFIX) and not set(outputs) & set(shm_entries(PREFIX)),
                          timeout_s=IDLE_S + 5), (_ours_mapped(PREFIX), shm_entries(PREFIX))
        assert time.monotonic() - started >= IDLE_S * 0.5  # released for idleness, not at once
        # The proxy's input arena goes too, by its own idle watch inside the stub (which runs
        # with the unpatched IDLE_RELEASE_S); what is left is Triton's own pool.
        assert wait_until(lambda: not [n for n in shm_entries(PREFIX) if "-in-" in n],
                          timeout_s=PROXY_IDLE_S + 4), shm_entries(PREFIX)

