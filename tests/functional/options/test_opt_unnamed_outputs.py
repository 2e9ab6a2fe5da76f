"""Outputs declared without names, as the deployment page's response-cache example declares them.

The page binds two `Tensor(shape=(1,), dtype=np.float32)` outputs (pytriton calls them
``OUTPUT_1``/``OUTPUT_2``) and its `@batch` callable returns ``{"add": ..., "sub": ...}``: the
answer is matched by position, in the dict's order. Beside it, a model whose output the user
named refuses a misspelt key, as before.
"""

from __future__ import annotations

import numpy as np
import pytest
from support import grpc_url, http_url, server_config

from pytriton.client import ModelClient
from pytriton.client.exceptions import PyTritonClientInferenceServerError
from pytriton.decorators import batch
from pytriton.model_config import ModelConfig, Tensor
from pytriton.triton import Triton

pytestmark = pytest.mark.functional


# The page's example, as written (only the ports are the test's own).
@batch
def _add_sub(**inputs):
    a_batch, b_batch = inputs.values()
    add_batch = a_batch + b_batch
    sub_batch = a_batch - b_batch
    return {"add": add_batch, "sub": sub_batch}


@batch
def _misspelt(x):
    return {"Y": x * 2}


@pytest.fixture(scope="module")
def server():
    triton_config = server_config(response_cache_byte_size=1024 * 1024)  # 1 MB, as on the page
    with Triton(config=triton_config) as triton:
        triton.bind(
            model_name="AddSub",
            infer_func=_add_sub,
            inputs=[Tensor(shape=(1,), dtype=np.float32), Tensor(shape=(1,), dtype=np.float32)],
            outputs=[Tensor(shape=(1,), dtype=np.float32), Tensor(shape=(1,), dtype=np.float32)],
            config=ModelConfig(max_batch_size=8, response_cache=True),
        )
        triton.bind(
            model_name="Named",
            infer_func=_misspelt,
            inputs=[Tensor(name="x", shape=(1,), dtype=np.float32)],
            outputs=[Tensor(name="y", shape=(1,), dtype=np.float32)],
            config=ModelConfig(max_batch_size=8),
        )
        triton.run()
        yield triton_config


@pytest.fixture(params=["http", "grpc"])
def url(request, server):
    return http_url(server) if request.param == "http" else grpc_url(server)


def test_the_pages_example_answers_by_position_in_the_dicts_order(url):
    a = np.array([[5.0], [1.5]], dtype=np.float32)
    b = np.array([[2.0], [4.0]], dtype=np.float32)
    with ModelClient(url, "AddSub") as client:
        result = client.infer_batch(a, b)
        again = client.infer_batch(a, b)  # the response cache answers the same request
    np.testing.assert_array_equal(result["OUTPUT_1"], a + b)
    np.testing.assert_array_equal(result["OUTPUT_2"], a - b)
    np.testing.assert_array_equal(again["OUTPUT_1"], a + b)


def test_a_misspelt_name_for_a_named_output_is_still_refused_beside_it(url):
    with ModelClient(url, "Named") as client:
        with pytest.raises(PyTritonClientInferenceServerError) as caught:
            client.infer_batch(x=np.ones((1, 1), np.float32))
    message = str(caught.value)
    assert "missing output(s) ['y']" in message and "has output(s) ['Y']" in message
    assert "'Y' -> 'y'" in message
