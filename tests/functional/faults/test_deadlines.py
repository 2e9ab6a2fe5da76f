"""End-to-end deadlines: a request whose client stopped waiting is never handed to the callable."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from support import grpc_url, http_url, running_triton

from pytriton.client import FuturesModelClient, ModelClient
from pytriton.client.exceptions import PyTritonClientTimeoutError
from pytriton.decorators import batch
from pytriton.model_config import ModelConfig, Tensor

pytestmark = pytest.mark.functional


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_requests_whose_deadline_passed_in_the_queue_never_reach_the_callable(protocol):
    seen = []

    @batch
    def slow(value):
        seen.extend(int(v) for v in value.ravel())
        time.sleep(1.0)
        return {"value": value}

    with running_triton() as triton:
        triton.bind(
            "Slow", slow,
            inputs=[Tensor(name="value", dtype=np.int32, shape=(1,))],
            outputs=[Tensor(name="value", dtype=np.int32, shape=(1,))],
            config=ModelConfig(max_batch_size=1),
        )
        triton.run()
        url = http_url(triton._config) if protocol == "http" else grpc_url(triton._config)
        first = threading.Thread(target=lambda: ModelClient(url, "Slow", inference_timeout_s=30).infer_sample(
            value=np.array([0], dtype=np.int32)))
        first.start()
        time.sleep(0.3)  # the callable works on request 0 for a second

        expired = []
        with FuturesModelClient(url, "Slow", max_workers=5, inference_timeout_s=0.3) as client:
            futures = [client.infer_sample(value=np.array([v], dtype=np.int32)) for v in range(1, 6)]
            for future in futures:
                with pytest.raises(PyTritonClientTimeoutError):
                    future.result()
                expired.append(True)
        first.join(10)
        with ModelClient(url, "Slow", inference_timeout_s=30) as client:
            answer = client.infer_sample(value=np.array([9], dtype=np.int32))
        assert int(answer["value"][0]) == 9
    assert len(expired) == 5
    assert seen == [0, 9], f"the callable computed requests nobody waited for: {seen}"
