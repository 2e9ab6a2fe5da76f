"""An asyncio client's finished gRPC streams leave no call open to hold the server's stop.

Triton's stop waits for the gRPC calls left open: a pytriton server with one idle
``ModelStreamInfer`` call of a client took 3.2 s to stop, against 0.3 s without (measured). The
asyncio streaming client shares its gRPC speaker with the OpenAI front (`pytriton.client_grpc`),
which can keep calls open between requests; the client keeps none.
"""

from __future__ import annotations

import asyncio
import threading
import time

import numpy as np
import pytest
from support import server_config

from pytriton.client import AsyncioDecoupledModelClient
from pytriton.decorators import batch
from pytriton.model_config import ModelConfig, Tensor
from pytriton.triton import Triton

pytestmark = pytest.mark.functional


@batch
def two(x):
    for step in range(2):
        yield {"y": x + step}


def test_a_server_with_an_asyncio_client_whose_streams_ended_stops_at_once():
    config = server_config(exit_timeout_secs=10)
    triton = Triton(config=config)
    triton.bind("Two", two, [Tensor(name="x", dtype=np.int64, shape=(1,))],
                [Tensor(name="y", dtype=np.int64, shape=(1,))], config=ModelConfig(decoupled=True))
    triton.run()
    loop = asyncio.new_event_loop()
    client = AsyncioDecoupledModelClient(f"grpc://127.0.0.1:{config.grpc_port}", "Two")
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    try:

        async def stream(value: int) -> list:
            return [int(outputs["y"][0]) async for outputs in client.infer_sample(x=np.array([value], np.int64))]

        answers = [loop.run_until_complete(stream(value)) for value in (1, 5)]
        thread.start()  # the client's loop goes on, and its channel stays open, while the server stops
        started = time.monotonic()
        triton.stop()
        took = time.monotonic() - started
    finally:
        triton.stop()
        if thread.is_alive():
            loop.call_soon_threadsafe(loop.stop)
            thread.join(10)
        loop.run_until_complete(client.close())
        loop.close()
    assert answers == [[1, 2], [5, 6]]
    assert took < 2.0, f"stop took {took:.1f} s with an asyncio client's finished streams behind"
