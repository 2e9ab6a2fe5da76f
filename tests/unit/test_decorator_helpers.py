"""Unit tests of the helpers of pytriton.decorators: get_model_config and convert_output."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from pytriton.decorators import convert_output, get_model_config
from pytriton.exceptions import PyTritonInvalidOperationError, PyTritonValidationError
from pytriton.model_config import ModelConfig, Tensor
from pytriton.model_config.tensor import resolve_tensor_names
from pytriton.worker.context import TritonContext, set_current_context

CONFIG = ModelConfig(max_batch_size=3)


@pytest.fixture
def context() -> Iterator[TritonContext]:
    context = TritonContext(
        model_name="M",
        model_version=1,
        inputs=resolve_tensor_names([Tensor(dtype=np.float32, shape=(1,))], "INPUT"),
        outputs=resolve_tensor_names(
            [Tensor(name="score", dtype=np.float32, shape=(1,)), Tensor(name="label", dtype=object, shape=(1,))],
            "OUTPUT",
        ),
        config=CONFIG,
    )
    set_current_context(context)
    yield context
    set_current_context(None)


def test_get_model_config_returns_the_served_models_config(context: TritonContext) -> None:
    assert get_model_config() is CONFIG


def test_convert_output_maps_a_list_by_output_order_and_casts_to_declared_dtypes(context: TritonContext) -> None:
    result = convert_output([[[1], [2]], np.array([["a"], ["b"]])])
    assert sorted(result) == ["label", "score"]
    assert result["score"].dtype == np.float32
    assert result["score"].tolist() == [[1.0], [2.0]]
    assert result["label"].tolist() == [[b"a"], [b"b"]]


def test_convert_output_keeps_dicts_and_matching_arrays(context: TritonContext) -> None:
    score = np.zeros((1, 1), dtype=np.float32)
    labels = np.array([[b"x"]], dtype=object)
    result = convert_output({"score": score, "label": labels})
    assert result["score"] is score
    assert result["label"] is labels


def test_convert_output_with_a_wrong_length_names_the_outputs(context: TritonContext) -> None:
    with pytest.raises(PyTritonValidationError, match=r"returned 1 arrays but model 'M' declares 2 outputs"):
        convert_output([np.zeros((1, 1))])


@pytest.mark.parametrize("call", [get_model_config, lambda: convert_output({})])
def test_helpers_outside_a_callable_say_so(call) -> None:
    set_current_context(None)
    with pytest.raises(PyTritonInvalidOperationError, match="call it inside the inference callable"):
        call()
