"""Unit tests of pytriton.decorators written the way the published PyTriton 0.7.0 documents them.

Covers the published forms that were once missing here: `@group_by_values` below `@batch` (rows of one batch),
`@first_value` on a callable that takes the list of requests, ``triton_context.model_configs``,
and the helpers for users' own decorators (`get_model_config(wrapped, instance)`,
`convert_output(outputs, wrapped, instance, model_config)`, `get_triton_context`, ...).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import wrapt

from pytriton.decorators import (
    ConstantPadder,
    InferenceRequest,
    InferenceRequests,
    InferenceResult,
    InferenceResults,
    InputNames,
    ModelConfigDict,
    ServedModelConfig,
    TritonContext,
    batch,
    convert_output,
    fill_optionals,
    first_value,
    get_inference_request_batch_size,
    get_model_config,
    get_triton_context,
    group_by_keys,
    group_by_values,
    triton_context,
)
from pytriton.exceptions import PyTritonBadParameterError, PyTritonInvalidOperationError, PyTritonValidationError
from pytriton.model_config import DynamicBatcher, ModelConfig, Tensor
from pytriton.model_config.tensor import resolve_tensor_names
from pytriton.worker import context as worker_context
from pytriton.worker.request import Request

CONFIG = ModelConfig(max_batch_size=8, batcher=DynamicBatcher(preferred_batch_size=[4]))


def _served(outputs: tuple[Tensor, ...] = (Tensor(name="y", dtype=np.float32, shape=(-1,)),)) -> Any:
    return worker_context.TritonContext(
        model_name="M",
        model_version=2,
        inputs=resolve_tensor_names([Tensor(name="x", dtype=np.float32, shape=(-1,))], "INPUT"),
        outputs=resolve_tensor_names(list(outputs), "OUTPUT"),
        config=CONFIG,
    )


@pytest.fixture(autouse=True)
def served() -> Iterator[Any]:
    context = _served()
    worker_context.set_current_context(context)
    yield context
    worker_context.set_current_context(None)


def _req(parameters: dict | None = None, **data: Any) -> Request:
    return Request({key: np.asarray(value) for key, value in data.items()}, parameters)


# --- @batch above @group_by_values: groups of rows ----------------------------------------------


def test_batch_above_group_by_values_calls_once_per_value_and_keeps_row_order() -> None:
    calls = []

    @batch
    @group_by_values("p")
    def infer(x: np.ndarray, p: np.ndarray) -> dict[str, np.ndarray]:
        calls.append((p[:, 0].tolist(), x[:, 0].tolist()))
        return {"y": x * p}

    # Values interleave across requests and inside the second request.
    responses = infer([
        _req(x=[[1.0]], p=[[2.0]]),
        _req(x=[[2.0], [3.0], [4.0]], p=[[3.0], [2.0], [3.0]]),
        _req(x=[[5.0]], p=[[2.0]]),
    ])

    assert sorted(calls) == [([2.0, 2.0, 2.0], [1.0, 3.0, 5.0]), ([3.0, 3.0], [2.0, 4.0])]
    assert [r["y"].tolist() for r in responses] == [[[2.0]], [[6.0], [6.0], [12.0]], [[10.0]]]


def test_group_by_values_below_batch_groups_by_several_keys_and_bytes() -> None:
    groups = []

    @batch
    @group_by_values("mode", "k")
    def infer(x: np.ndarray, mode: np.ndarray, k: np.ndarray) -> dict[str, np.ndarray]:
        groups.append(x[:, 0].tolist())
        return {"y": x + k}

    mode = np.array([[b"a"], [b"b"], [b"a"], [b"a"]], dtype=object)
    k = np.array([[1], [1], [1], [2]])
    (response,) = infer([_req(x=[[0], [1], [2], [3]], mode=mode, k=k)])

    assert sorted(groups) == [[0, 2], [1], [3]]
    assert response["y"].tolist() == [[1], [2], [3], [5]]


def test_published_stack_fill_optionals_batch_group_by_values_first_value() -> None:
    calls = []

    @fill_optionals(temperature=np.array([10.0], dtype=np.float32))
    @batch
    @group_by_values("temperature")
    @first_value("temperature")
    def infer(mandatory_input: np.ndarray, temperature: Any) -> dict[str, np.ndarray]:
        calls.append(float(temperature))
        return {"y": mandatory_input * temperature}

    responses = infer([
        _req(mandatory_input=[[1.0], [1.0]], temperature=np.array([[0.5], [2.0]], np.float32)),
        _req(mandatory_input=[[1.0]]),  # gets the default 10.0
    ])

    assert sorted(calls) == [0.5, 2.0, 10.0]
    assert [r["y"].tolist() for r in responses] == [[[0.5], [2.0]], [[10.0]]]


def test_published_full_stack_with_group_by_keys_and_triton_context_model_config() -> None:
    seen = []

    @fill_optionals(temperature=np.array([10.0]))
    @group_by_keys
    @batch
    @group_by_values("temperature")
    @first_value("temperature")
    @triton_context
    def infer(triton_context: TritonContext, mandatory_input: np.ndarray, temperature: Any,
              opt1: Any = None) -> dict[str, np.ndarray]:
        seen.append((triton_context.model_config.max_batch_size, float(temperature), opt1 is None))
        return {"y": mandatory_input * temperature}

    responses = infer([
        _req(mandatory_input=[[1.0]]),
        _req(mandatory_input=[[1.0], [1.0]], temperature=[[2.0], [3.0]], opt1=[[0], [0]]),
    ])

    assert sorted(seen) == [(8, 2.0, False), (8, 3.0, False), (8, 10.0, True)]
    assert [r["y"].tolist() for r in responses] == [[[10.0]], [[2.0], [3.0]]]


def test_group_by_values_below_batch_maps_list_outputs_with_the_model_outputs() -> None:
    @batch
    @group_by_values("p")
    def infer(x: np.ndarray, p: np.ndarray) -> list[np.ndarray]:
        return [x + p]

    responses = infer([_req(x=[[1.0], [1.0]], p=[[1.0], [5.0]])])

    assert responses[0]["y"].tolist() == [[2.0], [6.0]]


def test_group_by_values_below_batch_pads_group_outputs_with_pad_fn() -> None:
    @batch
    @group_by_values("n", pad_fn=ConstantPadder(-1))
    def infer(n: np.ndarray) -> dict[str, np.ndarray]:
        width = int(n[0, 0])
        text = np.array([[b"t" * width] * width] * len(n), dtype=object)
        return {"y": np.tile(np.arange(width), (len(n), 1)), "text": text}

    (response,) = infer([_req(n=[[1], [3], [1]])])

    assert response["y"].tolist() == [[0, -1, -1], [0, 1, 2], [0, -1, -1]]
    assert response["text"].tolist() == [[b"t", b"", b""], [b"ttt"] * 3, [b"t", b"", b""]]


def test_group_by_values_below_batch_without_pad_fn_names_the_shapes_and_the_fix() -> None:
    @batch
    @group_by_values("n")
    def infer(n: np.ndarray) -> dict[str, np.ndarray]:
        return {"y": np.zeros((len(n), int(n[0, 0])))}

    with pytest.raises(PyTritonValidationError, match=r"output 'y' has different sample shapes.*pad_fn=ConstantPadder"):
        infer([_req(n=[[1], [2]])])


def test_group_by_values_below_batch_promotes_text_dtypes_of_groups() -> None:
    @batch
    @group_by_values("n")
    def infer(n: np.ndarray) -> dict[str, np.ndarray]:
        return {"y": np.array([[b"x" * int(n[0, 0])]] * len(n))}  # |S1 in one group, |S3 in the other

    (response,) = infer([_req(n=[[1], [3]])])

    assert response["y"].tolist() == [[b"x"], [b"xxx"]]


def test_group_by_values_below_batch_rejects_groups_with_different_output_names() -> None:
    @batch
    @group_by_values("p")
    def infer(p: np.ndarray) -> dict[str, np.ndarray]:
        return {"a" if p[0, 0] else "b": p}

    with pytest.raises(PyTritonValidationError, match=r"groups returned different outputs, \['.'\] and \['.'\]"):
        infer([_req(p=[[0], [1]])])


def test_group_by_values_below_batch_awaits_async_groups() -> None:
    @batch
    @group_by_values("p")
    async def infer(x: np.ndarray, p: np.ndarray) -> dict[str, np.ndarray]:
        await asyncio.sleep(0)
        return {"y": x * p}

    responses = asyncio.run(infer([_req(x=[[1], [1]], p=[[2], [3]])]))

    assert responses[0]["y"].tolist() == [[2], [3]]


def test_group_by_values_below_batch_refuses_streams_and_points_above_batch() -> None:
    @batch
    @group_by_values("p")
    def infer(p: np.ndarray) -> Iterator[dict[str, np.ndarray]]:
        yield {"y": p}

    with pytest.raises(PyTritonValidationError, match="place @group_by_values above @batch"):
        infer([_req(p=[[1], [2]])])


def test_group_by_values_below_batch_passes_other_keywords_to_every_group() -> None:
    seen = []

    @batch
    @group_by_values("p")
    @triton_context
    def infer(p: np.ndarray, triton_context: TritonContext) -> dict[str, np.ndarray]:
        seen.append(triton_context.model_name)
        return {"y": p}

    infer([_req(p=[[1], [2]])])

    assert seen == ["M", "M"]


def test_group_by_values_below_batch_on_a_method_with_one_value_passes_the_batch_as_is() -> None:
    class Model:
        def __init__(self) -> None:
            self.shapes: list[tuple[int, ...]] = []

        @batch
        @group_by_values("p")
        def __call__(self, x: np.ndarray, p: np.ndarray) -> dict[str, np.ndarray]:
            self.shapes.append(x.shape)
            return {"y": x}

    model = Model()
    model([_req(x=[[1], [2]], p=[[7], [7]]), _req(x=[[3]], p=[[7]])])

    assert model.shapes == [(3, 1)]


def test_group_by_values_above_batch_still_groups_whole_requests() -> None:
    calls = []

    @group_by_values("p")
    @batch
    def infer(x: np.ndarray, p: np.ndarray) -> dict[str, np.ndarray]:
        calls.append(p[:, 0].tolist())
        return {"y": x}

    infer([_req(x=[[1]], p=[[1]]), _req(x=[[2]], p=[[2]]), _req(x=[[3]], p=[[1]])])

    assert calls == [[1, 1], [2]]


# --- @first_value on the list of requests -------------------------------------------------------


def test_first_value_on_a_requests_callable_reduces_each_request() -> None:
    seen = []

    @first_value("t")
    def infer(requests: list[Request]) -> list[dict[str, np.ndarray]]:
        seen.extend((r["t"], r.parameters) for r in requests)
        return [{"y": r["x"] * r["t"]} for r in requests]

    responses = infer([
        _req({"id": 1}, x=[[1.0], [2.0]], t=np.array([[3.0], [3.0]], np.float32)),
        _req(x=[[1.0]], t=np.array([[5.0]], np.float32)),
    ])

    assert [(float(t), p) for t, p in seen] == [(3.0, {"id": 1}), (5.0, {})]
    assert all(isinstance(t, np.floating) for t, _ in seen)
    assert [r["y"].tolist() for r in responses] == [[[3.0], [6.0]], [[5.0]]]


def test_first_value_on_requests_skips_absent_keys_and_checks_rows_per_request() -> None:
    @first_value("t", squeeze_single_values=False)
    def infer(requests: list[Request]) -> list[Request]:
        return requests

    kept = infer([_req(x=[[1]]), _req(t=[[1, 2], [1, 2]])])
    assert "t" not in kept[0] and kept[1]["t"].tolist() == [1, 2]

    with pytest.raises(PyTritonValidationError, match=r"rows of input 't' \(request 1\) differ"):
        infer([_req(t=[[1]]), _req(t=[[1], [2]])])


def test_first_value_above_batch_is_still_rejected() -> None:
    @first_value("t")
    @batch
    def infer(t: np.ndarray) -> dict[str, np.ndarray]:
        return {"y": t}

    with pytest.raises(PyTritonValidationError, match="Place @first_value below @batch"):
        infer([_req(t=[[1]])])


# --- triton_context.model_configs ---------------------------------------------------------------


@triton_context
def _published_ctx_fn(requests: list[Request], **kwargs: Any) -> list[dict[str, np.ndarray]]:
    model_config = kwargs["triton_context"].model_configs[_published_ctx_fn]
    return [{"y": np.full_like(r["x"], len(model_config.outputs))} for r in requests]


def test_model_configs_by_the_bound_function_gives_the_served_config(served: Any) -> None:
    assert _published_ctx_fn([_req(x=[[0.0]])])[0]["y"].tolist() == [[1.0]]

    captured = {}

    @batch
    @triton_context
    def infer(x: np.ndarray, triton_context: TritonContext) -> dict[str, np.ndarray]:
        captured["context"] = triton_context
        return {"y": x}

    infer([_req(x=[[1.0]])])
    context = captured["context"]
    for layer in (infer, infer.__wrapped__, infer.__wrapped__.__wrapped__):
        config = context.model_configs[layer]
        assert isinstance(config, ServedModelConfig)
        assert [t.name for t in config.inputs] == ["x"] and [t.name for t in config.outputs] == ["y"]
        assert config.outputs[0].dtype == np.float32 and config.outputs[0].shape == (-1,)
        assert (config.max_batch_size, config.batching, config.batcher) == (8, True, CONFIG.batcher)
        assert (config.model_name, config.model_version, config.decoupled, config.backend) == ("M", 2, False, "python")
    assert context.model_config == context.model_configs[infer]
    # the worker's attributes are all still there
    assert isinstance(context, worker_context.TritonContext)
    assert (context.model_name, context.config, context.output_names) == ("M", CONFIG, ("y",))


def test_model_configs_on_methods_finds_the_object_and_its_methods() -> None:
    found = []

    class Model:
        @batch
        @triton_context
        def __call__(self, x: np.ndarray, triton_context: TritonContext) -> dict[str, np.ndarray]:
            found.append(triton_context.model_configs[self].model_name)
            found.append(triton_context.model_configs[self.__call__].max_batch_size)
            return {"y": x}

        @triton_context
        def infer(self, requests: list[Request], **kwargs: Any) -> list[Request]:
            found.append(kwargs["triton_context"].model_configs[self.infer].model_version)
            return requests

    model = Model()
    model([_req(x=[[1]])])
    model.infer([])

    assert found == ["M", 8, 2]


def test_model_configs_of_another_callable_is_a_key_error_naming_it() -> None:
    def other(requests: list[Request]) -> list[Request]:
        return requests

    @triton_context
    def infer(requests: list[Request], triton_context: TritonContext) -> Any:
        return triton_context.model_configs[other]

    with pytest.raises(KeyError, match="no model config for <function .*other"):
        infer([])


def test_model_config_dict_is_a_mutable_mapping_keyed_by_callable() -> None:
    @batch
    def infer(x: np.ndarray) -> dict[str, np.ndarray]:
        return {"y": x}

    configs = ModelConfigDict()
    configs[infer] = "config"

    assert configs[infer.__wrapped__] == "config" and len(configs) == 1 and list(configs) == [infer]
    del configs[infer.__wrapped__]
    assert len(configs) == 0 and infer not in configs


# --- helpers for users' own decorators ----------------------------------------------------------


@wrapt.decorator
def _as_list_outputs(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
    """A user decorator written the published way: outputs named through the model config."""
    config = get_model_config(wrapped, instance)
    context = get_triton_context(wrapped, instance)
    results = wrapped(*args, **kwargs)
    assert context.model_configs[wrapped] == config
    return [{**convert_output(result, wrapped, instance), "n": np.array([[config.max_batch_size]])}
            for result in results]


def test_user_decorator_with_get_model_config_and_convert_output_on_functions_and_methods() -> None:
    @_as_list_outputs
    def infer(requests: list[Request]) -> list[list[np.ndarray]]:
        return [[r["x"] * 2] for r in requests]

    class Model:
        @_as_list_outputs
        def __call__(self, requests: list[Request]) -> list[tuple[list[int]]]:
            return [([[7]],) for _ in requests]

    (response,) = infer([_req(x=np.array([[1.0]], np.float32))])
    assert response["y"].tolist() == [[2.0]] and response["n"].tolist() == [[8]]
    (response,) = Model()([_req(x=[[1.0]])])
    assert response["y"].dtype == np.float32 and response["y"].tolist() == [[7.0]]  # cast to the declared dtype


def test_convert_output_with_a_model_config_needs_no_served_model() -> None:
    config = get_model_config(_published_ctx_fn, None)
    worker_context.set_current_context(None)

    assert convert_output([[1, 2]], model_config=config)["y"].tolist() == [1.0, 2.0]
    assert convert_output({"y": np.array([1])}, model_config=config)["y"].dtype == np.float32
    with pytest.raises(PyTritonValidationError, match="returned 2 arrays but model 'M' declares 1 outputs"):
        convert_output([[1], [2]], model_config=config)
    with pytest.raises(PyTritonBadParameterError, match="has no outputs"):
        convert_output([[1]], model_config=CONFIG)


def test_get_model_config_without_arguments_keeps_returning_the_bound_model_config() -> None:
    assert get_model_config() is CONFIG


def test_helpers_outside_a_served_model_raise() -> None:
    worker_context.set_current_context(None)

    with pytest.raises(PyTritonInvalidOperationError, match="get_triton_context"):
        get_model_config(_published_ctx_fn, None)
    with pytest.raises(PyTritonInvalidOperationError, match="found no TritonContext"):
        _published_ctx_fn([])


def test_a_context_stored_on_the_callable_is_used_as_published_tests_do() -> None:
    worker_context.set_current_context(None)

    @triton_context
    def infer(requests: list[Request], triton_context: Any) -> Any:
        return triton_context.model_configs[infer]

    configs = ModelConfigDict()
    configs[infer] = "published-style config"
    infer.__triton_context__ = TritonContext("N", 1, (), (), None, model_configs=configs)

    assert infer([]) == "published-style config"
    assert get_model_config(infer, None) == "published-style config"


def test_get_inference_request_batch_size() -> None:
    assert get_inference_request_batch_size({"a": np.zeros((3, 2)), "b": np.zeros((3,))}) == 3
    with pytest.raises(PyTritonValidationError, match="has no inputs"):
        get_inference_request_batch_size({})
    with pytest.raises(PyTritonValidationError, match=r"input 'a' has no batch axis \(shape \(\)\)"):
        get_inference_request_batch_size({"a": np.float32(1)})


def test_published_type_names_are_importable() -> None:
    request: InferenceRequest = {"x": np.zeros((1, 1))}
    requests: InferenceRequests = [request]
    result: InferenceResult = request
    results: InferenceResults = (result,)
    names: InputNames = ["x"]

    assert requests and results and names == ["x"]
