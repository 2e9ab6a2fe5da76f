"""Unit tests of pytriton.decorators: plain lists of `Request` in, per-request dicts out."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from pytriton.decorators import (
    ConstantPadder,
    batch,
    fill_optionals,
    first_value,
    group_by_keys,
    group_by_values,
    pad_batch,
    sample,
    triton_context,
)
from pytriton.exceptions import PyTritonBadParameterError, PyTritonInvalidOperationError, PyTritonValidationError
from pytriton.worker.context import TritonContext, current_context, set_current_context
from pytriton.worker.request import Request


@dataclasses.dataclass(frozen=True)
class _Tensor:
    name: str


@dataclasses.dataclass(frozen=True)
class _Batcher:
    preferred_batch_size: list[int] | None = None


@dataclasses.dataclass(frozen=True)
class _Config:
    max_batch_size: int = 8
    batching: bool = True
    batcher: _Batcher = dataclasses.field(default_factory=_Batcher)


def _context(outputs: tuple[str, ...] = ("out",), **config: Any) -> TritonContext:
    return TritonContext(
        model_name="Model",
        model_version=1,
        inputs=(_Tensor("x"),),
        outputs=tuple(_Tensor(name) for name in outputs),
        config=_Config(**config),
    )


@pytest.fixture(autouse=True)
def _no_context_leaks() -> Iterator[None]:
    set_current_context(None)
    yield
    set_current_context(None)


def _req(**data: Any) -> Request:
    return Request({key: np.asarray(value) for key, value in data.items()})


# --- batch -----------------------------------------------------------------------------------


def test_batch_concatenates_inputs_and_splits_dict_outputs_by_request_batch_size() -> None:
    seen = {}

    @batch
    def infer(**inputs: np.ndarray) -> dict[str, np.ndarray]:
        seen.update(inputs)
        return {"y": inputs["x"] * 2, "z": inputs["x"].sum(axis=1, keepdims=True)}

    responses = infer([_req(x=[[1, 2], [3, 4]]), _req(x=[[5, 6]])])

    np.testing.assert_array_equal(seen["x"], [[1, 2], [3, 4], [5, 6]])
    assert len(responses) == 2
    np.testing.assert_array_equal(responses[0]["y"], [[2, 4], [6, 8]])
    np.testing.assert_array_equal(responses[1]["y"], [[10, 12]])
    np.testing.assert_array_equal(responses[1]["z"], [[11]])


def test_batch_maps_list_outputs_to_context_output_names() -> None:
    set_current_context(_context(outputs=("sum", "diff")))

    @batch
    def infer(a: np.ndarray, b: np.ndarray) -> list[np.ndarray]:
        return [a + b, a - b]

    responses = infer([_req(a=[[3]], b=[[1]]), _req(a=[[10], [20]], b=[[1], [2]])])

    assert [sorted(r) for r in responses] == [["diff", "sum"], ["diff", "sum"]]
    np.testing.assert_array_equal(responses[0]["sum"], [[4]])
    np.testing.assert_array_equal(responses[1]["diff"], [[9], [18]])


def test_batch_converts_array_like_outputs() -> None:
    @batch
    def infer(x: np.ndarray) -> dict[str, Any]:
        return {"y": x.tolist()}

    responses = infer([_req(x=[[1.5]]), _req(x=[[2.5]])])

    assert isinstance(responses[1]["y"], np.ndarray)
    np.testing.assert_array_equal(responses[1]["y"], [[2.5]])


def test_batch_on_method_and_call() -> None:
    class Model:
        def __init__(self, factor: int) -> None:
            self.factor = factor

        @batch
        def infer(self, x: np.ndarray) -> dict[str, np.ndarray]:
            return {"y": x * self.factor}

        @batch
        def __call__(self, x: np.ndarray) -> dict[str, np.ndarray]:
            return {"y": x + self.factor}

    model = Model(3)
    requests = [_req(x=[[1]]), _req(x=[[2]])]

    np.testing.assert_array_equal(model.infer(requests)[1]["y"], [[6]])
    np.testing.assert_array_equal(model(requests)[0]["y"], [[4]])


def test_batch_of_no_requests_does_not_call_the_model() -> None:
    calls = []

    @batch
    def infer(**inputs: np.ndarray) -> dict[str, np.ndarray]:
        calls.append(inputs)
        return {}

    assert infer([]) == []
    assert calls == []


def test_batch_list_output_without_context_is_an_error() -> None:
    @batch
    def infer(x: np.ndarray) -> list[np.ndarray]:
        return [x]

    with pytest.raises(PyTritonValidationError, match="needs the model outputs to map a list") as info:
        infer([_req(x=[[1]])])
    assert "Return a dict" in str(info.value)


def test_batch_list_output_of_wrong_length_names_the_outputs() -> None:
    set_current_context(_context(outputs=("a", "b")))

    @batch
    def infer(x: np.ndarray) -> list[np.ndarray]:
        return [x]

    expected = r"returned 1 arrays but model 'Model' declares 2 outputs \['a', 'b'\]"
    with pytest.raises(PyTritonValidationError, match=expected):
        infer([_req(x=[[1]])])


def test_batch_requests_with_different_input_names_point_to_group_by_keys() -> None:
    @batch
    def infer(**inputs: np.ndarray) -> dict[str, np.ndarray]:
        return inputs

    with pytest.raises(PyTritonValidationError, match="different input names") as info:
        infer([_req(x=[[1]], y=[[2]]), _req(x=[[1]])])
    assert "@group_by_keys" in str(info.value)
    assert "request 1 has ['x']" in str(info.value)


def test_batch_different_trailing_shapes_point_to_group_by_values_and_padding() -> None:
    @batch
    def infer(x: np.ndarray) -> dict[str, np.ndarray]:
        return {"y": x}

    with pytest.raises(PyTritonValidationError, match="cannot concatenate input 'x'") as info:
        infer([_req(x=[[1, 2]]), _req(x=[[1, 2, 3]])])
    message = str(info.value)
    assert "(2,)" in message and "(3,)" in message
    assert "@group_by_values('x')" in message and "ConstantPadder" in message


def test_batch_output_with_wrong_leading_dim_is_an_error() -> None:
    @batch
    def infer(x: np.ndarray) -> dict[str, np.ndarray]:
        return {"y": x[:1]}

    with pytest.raises(PyTritonValidationError, match=r"output 'y' has shape \(1, 1\).*batch size 3"):
        infer([_req(x=[[1], [2]]), _req(x=[[3]])])


def test_batch_scalar_output_is_an_error() -> None:
    @batch
    def infer(x: np.ndarray) -> dict[str, Any]:
        return {"y": 7}

    with pytest.raises(PyTritonValidationError, match=r"output 'y' has shape \(\)"):
        infer([_req(x=[[1]])])


def test_batch_output_that_is_not_an_array_is_an_error() -> None:
    @batch
    def infer(x: np.ndarray) -> dict[str, Any]:
        return {"y": None}

    with pytest.raises(PyTritonValidationError, match="output 'y' must be a numpy array, got NoneType"):
        infer([_req(x=[[1]])])


def test_batch_result_of_wrong_type_is_an_error() -> None:
    @batch
    def infer(x: np.ndarray) -> Any:
        return x

    with pytest.raises(PyTritonValidationError, match="returned ndarray; expected a dict"):
        infer([_req(x=[[1]])])


def test_batch_input_without_batch_axis_points_to_sample() -> None:
    @batch
    def infer(x: np.ndarray) -> dict[str, np.ndarray]:
        return {"y": x}

    with pytest.raises(PyTritonValidationError, match="input 'x' of request 0 has no batch axis") as info:
        infer([_req(x=5)])
    assert "@sample" in str(info.value)


def test_batch_request_with_inconsistent_batch_sizes_is_an_error() -> None:
    @batch
    def infer(**inputs: np.ndarray) -> dict[str, np.ndarray]:
        return inputs

    with pytest.raises(PyTritonValidationError, match="inputs of request 0 have different batch sizes"):
        infer([_req(x=[[1], [2]], y=[[1]])])


def test_batch_stacked_twice_says_to_move_the_inner_one() -> None:
    @batch
    @batch
    def infer(x: np.ndarray) -> dict[str, np.ndarray]:
        return {"y": x}

    expected = r"@batch expects the list of requests.*keyword arguments \['x'\]"
    with pytest.raises(PyTritonValidationError, match=expected):
        infer([_req(x=[[1]])])


def test_batch_called_with_a_single_request_mapping_is_an_error() -> None:
    @batch
    def infer(x: np.ndarray) -> dict[str, np.ndarray]:
        return {"y": x}

    with pytest.raises(PyTritonValidationError, match="expects a list of requests .* got Request"):
        infer(_req(x=[[1]]))


# --- sample ----------------------------------------------------------------------------------


def test_sample_calls_once_per_request_with_its_arrays() -> None:
    seen = []

    @sample
    def infer(x: np.ndarray) -> dict[str, np.ndarray]:
        seen.append(x.shape)
        return {"y": x + 1}

    responses = infer([_req(x=[1, 2, 3]), _req(x=[[4]])])

    assert seen == [(3,), (1, 1)]
    np.testing.assert_array_equal(responses[0]["y"], [2, 3, 4])
    np.testing.assert_array_equal(responses[1]["y"], [[5]])


def test_sample_on_method_maps_list_outputs() -> None:
    set_current_context(_context(outputs=("y", "z")))

    class Model:
        @sample
        def __call__(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            return x, -x

    responses = Model()([_req(x=[1]), _req(x=[2])])

    np.testing.assert_array_equal(responses[1]["z"], [-2])
    assert list(responses[0]) == ["y", "z"]


def test_sample_list_output_without_context_is_an_error() -> None:
    @sample
    def infer(x: np.ndarray) -> list[np.ndarray]:
        return [x]

    with pytest.raises(PyTritonValidationError, match="@sample needs the model outputs to map a list"):
        infer([_req(x=[1])])


def test_sample_below_batch_says_to_move_it() -> None:
    @batch
    @sample
    def infer(x: np.ndarray) -> dict[str, np.ndarray]:
        return {"y": x}

    with pytest.raises(PyTritonValidationError, match="@sample expects the list of requests") as info:
        infer([_req(x=[[1]])])
    assert "move it higher" in str(info.value)


# --- group_by_keys ---------------------------------------------------------------------------


def test_group_by_keys_calls_once_per_set_of_names_and_keeps_order() -> None:
    groups = []

    @group_by_keys
    def infer(requests: list[Request]) -> list[dict[str, np.ndarray]]:
        groups.append([sorted(r) for r in requests])
        return [{"n": np.array([len(r)])} for r in requests]

    responses = infer([_req(x=[1]), _req(x=[1], y=[2]), _req(x=[3]), _req(y=[1], x=[4])])

    assert groups == [[["x"], ["x"]], [["x", "y"], ["x", "y"]]]
    assert [int(r["n"][0]) for r in responses] == [1, 2, 1, 2]


def test_group_by_keys_above_batch_batches_each_group() -> None:
    calls = []

    class Model:
        @group_by_keys
        @batch
        def __call__(self, **inputs: np.ndarray) -> dict[str, np.ndarray]:
            calls.append(sorted(inputs))
            return {"y": sum(inputs.values())}

    responses = Model()([_req(x=[[1]]), _req(x=[[1]], b=[[10]]), _req(x=[[2], [3]])])

    assert calls == [["x"], ["b", "x"]]
    np.testing.assert_array_equal(responses[0]["y"], [[1]])
    np.testing.assert_array_equal(responses[1]["y"], [[11]])
    np.testing.assert_array_equal(responses[2]["y"], [[2], [3]])


def test_group_by_keys_wrong_number_of_responses_is_an_error() -> None:
    @group_by_keys
    def infer(requests: list[Request]) -> list[dict[str, np.ndarray]]:
        return []

    with pytest.raises(PyTritonValidationError, match=r"one response per request of the group \(2\), got 0"):
        infer([_req(x=[1]), _req(x=[2])])


def test_group_by_keys_below_batch_says_to_move_it() -> None:
    @batch
    @group_by_keys
    def infer(requests: list[Request]) -> list[dict[str, np.ndarray]]:
        return requests

    with pytest.raises(PyTritonValidationError, match="@group_by_keys expects the list of requests"):
        infer([_req(x=[[1]])])


# --- group_by_values and ConstantPadder ------------------------------------------------------


def test_group_by_values_groups_equal_values_and_keeps_order() -> None:
    groups = []

    @group_by_values("mode")
    def infer(requests: list[Request]) -> list[dict[str, np.ndarray]]:
        groups.append([r["x"].tolist() for r in requests])
        return [{"y": r["x"]} for r in requests]

    requests = [
        _req(x=[[1]], mode=[[b"a"]]),
        _req(x=[[2]], mode=[[b"b"]]),
        _req(x=[[3], [4]], mode=[[b"a"], [b"a"]]),  # batch of 2, same value per row: joins "a"
        _req(x=[[5]]),  # no mode at all: its own group
    ]
    responses = infer(requests)

    assert groups == [[[[1]], [[3], [4]]], [[[2]]], [[[5]]]]
    assert [r["y"].tolist() for r in responses] == [[[1]], [[2]], [[3], [4]], [[5]]]


def test_group_by_values_separates_equal_bytes_of_different_dtypes() -> None:
    sizes = []

    @group_by_values("t")
    def infer(requests: list[Request]) -> list[dict[str, np.ndarray]]:
        sizes.append(len(requests))
        return [{} for _ in requests]

    zeros = np.zeros((1, 1))
    infer([_req(t=zeros.astype(np.int32)), _req(t=zeros.astype(np.float32)), _req(t=zeros.astype(np.int32))])

    assert sizes == [2, 1]


def test_group_by_values_above_batch_and_first_value_serves_each_value_once() -> None:
    calls = []

    class Model:
        @group_by_values("temperature")
        @batch
        @first_value("temperature")
        def infer(self, x: np.ndarray, temperature: np.floating) -> dict[str, np.ndarray]:
            calls.append((float(temperature), x.shape[0]))
            return {"y": x * temperature}

    responses = Model().infer(
        [
            _req(x=[[1.0]], temperature=[[0.5]]),
            _req(x=[[1.0]], temperature=[[2.0]]),
            _req(x=[[2.0], [3.0]], temperature=[[0.5], [0.5]]),
        ]
    )

    assert calls == [(0.5, 3), (2.0, 1)]
    np.testing.assert_allclose(responses[0]["y"], [[0.5]])
    np.testing.assert_allclose(responses[1]["y"], [[2.0]])
    np.testing.assert_allclose(responses[2]["y"], [[1.0], [1.5]])


def test_group_by_values_with_constant_padder_lets_batch_concatenate() -> None:
    seen = {}

    @group_by_values("mode", pad_fn=ConstantPadder(0))
    @batch
    def infer(tokens: np.ndarray, mode: np.ndarray) -> dict[str, np.ndarray]:
        seen["tokens"] = tokens
        return {"length": (tokens != 0).sum(axis=1, keepdims=True)}

    responses = infer([_req(tokens=[[1, 2, 3]], mode=[[1]]), _req(tokens=[[4]], mode=[[1]])])

    np.testing.assert_array_equal(seen["tokens"], [[1, 2, 3], [4, 0, 0]])
    assert [int(r["length"][0, 0]) for r in responses] == [3, 1]


def test_group_by_values_padding_keeps_request_parameters() -> None:
    seen = []

    @group_by_values("k", pad_fn=ConstantPadder(-1))
    def infer(requests: list[Request]) -> list[dict[str, np.ndarray]]:
        seen.extend((r.parameters, r["v"].tolist()) for r in requests)
        return [{} for _ in requests]

    first = Request({"k": np.array([[1]]), "v": np.array([[1, 2]])}, {"id": "a"})
    second = Request({"k": np.array([[1]]), "v": np.array([[3]])}, {"id": "b"})
    infer([first, second])

    assert seen == [({"id": "a"}, [[1, 2]]), ({"id": "b"}, [[3, -1]])]
    assert second["v"].tolist() == [[3]]  # the caller's request is not modified


@pytest.mark.parametrize("keys", [(), ("",), (3,)])
def test_group_by_values_needs_input_names(keys: tuple[Any, ...]) -> None:
    with pytest.raises(PyTritonBadParameterError, match="group_by_values needs one or more input names"):
        group_by_values(*keys)


def test_group_by_values_pad_fn_must_be_callable() -> None:
    with pytest.raises(PyTritonBadParameterError, match="pad_fn must be callable, got int"):
        group_by_values("x", pad_fn=0)  # type: ignore[arg-type]


def test_constant_padder_pads_each_trailing_axis_to_the_max() -> None:
    padded = ConstantPadder(9)(
        [
            {"a": np.ones((1, 2, 1), np.int8), "b": np.array([[1]])},
            {"a": np.ones((2, 1, 3), np.int8)},
        ]
    )

    assert padded[0]["a"].shape == (1, 2, 3) and padded[1]["a"].shape == (2, 2, 3)
    assert padded[0]["a"].dtype == np.int8
    np.testing.assert_array_equal(padded[0]["a"][0], [[1, 9, 9], [1, 9, 9]])
    np.testing.assert_array_equal(padded[1]["a"][1], [[1, 1, 1], [9, 9, 9]])
    np.testing.assert_array_equal(padded[0]["b"], [[1]])
    assert "b" not in padded[1]


def test_constant_padder_pads_bytes_with_bytes() -> None:
    requests = [{"s": np.array([[b"ab", b"c"]], dtype=object)}, {"s": np.array([[b"x"]], dtype=object)}]
    padded = ConstantPadder(b"")(requests)

    assert padded[1]["s"].tolist() == [[b"x", b""]]


def test_constant_padder_numeric_value_pads_text_with_an_empty_value() -> None:
    padded = ConstantPadder(0)(
        [
            {"s": np.array([[b"a", b"b"]])},
            {"s": np.array([[b"a"]])},
            {"u": np.array([["x", "y"]])},
            {"u": np.array([["z"]])},
        ]
    )

    assert padded[1]["s"].tolist() == [[b"a", b""]]
    assert padded[3]["u"].tolist() == [["z", ""]]


def test_constant_padder_text_value_for_numbers_is_an_error() -> None:
    with pytest.raises(PyTritonBadParameterError, match=r"cannot pad 'n' of dtype int64.*ConstantPadder\(0\)"):
        ConstantPadder(b"")([{"n": np.array([[1, 2]])}, {"n": np.array([[1]])}])


def test_constant_padder_different_ranks_is_an_error() -> None:
    with pytest.raises(PyTritonValidationError, match="input 'a': its arrays have different numbers of dimensions"):
        ConstantPadder()([{"a": np.ones((1, 2))}, {"a": np.ones((1, 2, 2))}])


# --- fill_optionals --------------------------------------------------------------------------


def test_fill_optionals_repeats_the_default_to_each_request_batch_size() -> None:
    seen = []

    @fill_optionals(temperature=np.array([0.7], np.float32))
    def infer(requests: list[Request]) -> list[dict[str, np.ndarray]]:
        seen.extend(requests)
        return [{} for _ in requests]

    given = _req(x=[[1]], temperature=np.array([[0.1]], np.float32))
    missing = Request({"x": np.array([[1], [2], [3]])}, {"id": 7})
    infer([given, missing])

    assert seen[0] is given
    np.testing.assert_allclose(seen[1]["temperature"], [[0.7], [0.7], [0.7]])
    assert seen[1]["temperature"].dtype == np.float32
    assert seen[1].parameters == {"id": 7}
    assert "temperature" not in missing  # the caller's request is not modified


def test_fill_optionals_above_batch_lets_mixed_requests_batch() -> None:
    class Model:
        @fill_optionals(bias=np.array([100]))
        @batch
        def __call__(self, x: np.ndarray, bias: np.ndarray) -> dict[str, np.ndarray]:
            return {"y": x + bias}

    responses = Model()([_req(x=[[1], [2]]), _req(x=[[3]], bias=[[0]])])

    np.testing.assert_array_equal(responses[0]["y"], [[101], [102]])
    np.testing.assert_array_equal(responses[1]["y"], [[3]])


def test_fill_optionals_without_batching_adds_the_default_as_given() -> None:
    set_current_context(_context(batching=False, max_batch_size=0))

    @fill_optionals(mode=np.array([1, 2]))
    @sample
    def infer(x: np.ndarray, mode: np.ndarray) -> dict[str, np.ndarray]:
        return {"mode": mode}

    np.testing.assert_array_equal(infer([_req(x=[5, 6, 7])])[0]["mode"], [1, 2])


def test_fill_optionals_default_must_be_an_array() -> None:
    with pytest.raises(PyTritonBadParameterError, match=r"default for 'temperature' must be a numpy array, got float"):
        fill_optionals(temperature=0.5)  # type: ignore[arg-type]


def test_fill_optionals_below_batch_says_to_move_it() -> None:
    @batch
    @fill_optionals(y=np.array([0]))
    def infer(requests: list[Request]) -> list[dict[str, np.ndarray]]:
        return requests

    with pytest.raises(PyTritonValidationError, match="@fill_optionals expects the list of requests"):
        infer([_req(x=[[1]])])


# --- pad_batch -------------------------------------------------------------------------------


def test_pad_batch_pads_to_the_preferred_size_and_trims_outputs() -> None:
    set_current_context(_context(outputs=("y",), max_batch_size=8, batcher=_Batcher(preferred_batch_size=[2, 4])))
    seen = {}

    @batch
    @pad_batch
    def infer(x: np.ndarray) -> list[np.ndarray]:
        seen["x"] = x
        return [x * 10]

    responses = infer([_req(x=[[1], [2]]), _req(x=[[3]])])

    np.testing.assert_array_equal(seen["x"], [[1], [2], [3], [3]])
    np.testing.assert_array_equal(responses[0]["y"], [[10], [20]])
    np.testing.assert_array_equal(responses[1]["y"], [[30]])


def test_pad_batch_pads_to_max_batch_size_without_a_fitting_preferred_size() -> None:
    set_current_context(_context(max_batch_size=5, batcher=_Batcher(preferred_batch_size=[2])))
    sizes = []

    class Model:
        @batch
        @pad_batch
        def infer(self, x: np.ndarray) -> dict[str, np.ndarray]:
            sizes.append(x.shape[0])
            return {"y": x}

    responses = Model().infer([_req(x=[[1], [2], [3]])])

    assert sizes == [5]
    np.testing.assert_array_equal(responses[0]["y"], [[1], [2], [3]])


def test_pad_batch_keeps_a_batch_that_already_fits() -> None:
    set_current_context(_context(batcher=_Batcher(preferred_batch_size=[2, 4])))

    @pad_batch
    def infer(x: np.ndarray) -> dict[str, np.ndarray]:
        return {"n": np.full((x.shape[0], 1), x.shape[0])}

    assert infer(x=np.zeros((4, 1)))["n"].tolist() == [[4]] * 4


def test_pad_batch_without_context_is_an_error() -> None:
    @pad_batch
    def infer(x: np.ndarray) -> dict[str, np.ndarray]:
        return {"y": x}

    with pytest.raises(PyTritonInvalidOperationError, match="@pad_batch needs the model config"):
        infer(x=np.zeros((1, 1)))


def test_pad_batch_output_with_wrong_leading_dim_is_an_error() -> None:
    set_current_context(_context(max_batch_size=4))

    @pad_batch
    def infer(x: np.ndarray) -> dict[str, np.ndarray]:
        return {"y": x[:2]}

    with pytest.raises(PyTritonValidationError, match="output 'y' has shape .* padded batch size 4"):
        infer(x=np.zeros((3, 1)))


def test_pad_batch_above_batch_says_to_move_it() -> None:
    @pad_batch
    @batch
    def infer(x: np.ndarray) -> dict[str, np.ndarray]:
        return {"y": x}

    with pytest.raises(PyTritonValidationError, match="Place @pad_batch below @batch"):
        infer([_req(x=[[1]])])


def test_pad_batch_below_first_value_says_where_it_belongs() -> None:
    set_current_context(_context())

    @first_value("t")
    @pad_batch
    def infer(x: np.ndarray, t: Any) -> dict[str, np.ndarray]:
        return {"y": x}

    with pytest.raises(PyTritonValidationError, match="one common batch size .* above @first_value"):
        infer(x=np.zeros((2, 1)), t=np.ones((2, 1)))


# --- first_value -----------------------------------------------------------------------------


def test_first_value_below_batch_gives_scalars_and_rows() -> None:
    seen = {}

    @batch
    @first_value("t", "shape")
    def infer(x: np.ndarray, t: Any, shape: Any) -> dict[str, np.ndarray]:
        seen.update(t=t, shape=shape, x=x)
        return {"y": x}

    infer([_req(x=[[1]], t=np.array([[0.5]], np.float32), shape=[[2, 3]]), _req(x=[[2]], t=[[0.5]], shape=[[2, 3]])])

    assert isinstance(seen["t"], np.floating) and seen["t"] == 0.5
    np.testing.assert_array_equal(seen["shape"], [2, 3])
    np.testing.assert_array_equal(seen["x"], [[1], [2]])  # keys not named are left batched


def test_first_value_without_squeeze_keeps_the_row() -> None:
    @first_value("t", squeeze_single_values=False)
    def infer(t: np.ndarray) -> np.ndarray:
        return t

    result = infer(t=np.array([[b"a"], [b"a"]], dtype=object))

    assert isinstance(result, np.ndarray) and result.tolist() == [b"a"]


def test_first_value_treats_nan_rows_as_equal_and_skips_absent_keys() -> None:
    @first_value("t", "missing")
    def infer(**inputs: Any) -> dict[str, Any]:
        return inputs

    result = infer(t=np.array([[np.nan], [np.nan]]))

    assert list(result) == ["t"] and np.isnan(result["t"])


def test_first_value_strict_rejects_differing_rows() -> None:
    @first_value("t")
    def infer(t: Any) -> Any:
        return t

    with pytest.raises(PyTritonValidationError, match="the rows of input 't' differ") as info:
        infer(t=np.array([[0.5], [0.7]]))
    assert "@group_by_values('t')" in str(info.value) and "strict=False" in str(info.value)


def test_first_value_not_strict_takes_the_first_row() -> None:
    @first_value("t", strict=False)
    def infer(t: Any) -> Any:
        return t

    assert infer(t=np.array([[0.5], [0.7]])) == 0.5


def test_first_value_above_batch_says_to_move_it() -> None:
    @first_value("t")
    @batch
    def infer(t: np.ndarray) -> dict[str, np.ndarray]:
        return {"y": t}

    with pytest.raises(PyTritonValidationError, match="Place @first_value below @batch"):
        infer([_req(t=[[1]])])


def test_first_value_of_an_empty_or_scalar_input_is_an_error() -> None:
    @first_value("t")
    def infer(t: Any) -> Any:
        return t

    with pytest.raises(PyTritonValidationError, match=r"input 't' has shape \(\), no first row"):
        infer(t=np.array(1))


def test_first_value_needs_input_names() -> None:
    with pytest.raises(PyTritonBadParameterError, match="first_value needs one or more input names"):
        first_value()


# --- triton_context --------------------------------------------------------------------------


def test_triton_context_is_injected_into_functions_and_methods() -> None:
    context = _context(outputs=("a", "b"))
    set_current_context(context)

    @triton_context
    def infer(requests: list[Request], triton_context: TritonContext) -> list[dict[str, np.ndarray]]:
        return [dict.fromkeys(triton_context.output_names, r["x"]) for r in requests]

    class Model:
        @batch
        @triton_context
        def __call__(self, x: np.ndarray, triton_context: TritonContext) -> dict[str, np.ndarray]:
            return {"model": np.full_like(x, triton_context.model_version)}

    assert sorted(infer([_req(x=[[1]])])[0]) == ["a", "b"]
    np.testing.assert_array_equal(Model()([_req(x=[[5]])])[0]["model"], [[1]])
    assert current_context() is context


def test_triton_context_above_batch_is_passed_on_by_batch() -> None:
    """@batch passes on keyword arguments given with the list of requests (as @multiplexed gives
    the variant's object), so @triton_context above it reaches the function too."""
    set_current_context(_context())
    seen = []

    @triton_context
    @batch
    def infer(x: np.ndarray, triton_context: TritonContext) -> dict[str, np.ndarray]:
        seen.append(triton_context.model_name)
        return {"y": x}

    assert infer([_req(x=[[1]])])[0]["y"].tolist() == [[1]]
    assert seen == ["Model"]


def test_batch_still_refuses_keyword_arrays_without_the_requests() -> None:
    @batch
    def infer(x: np.ndarray) -> dict[str, np.ndarray]:
        return {"y": x}

    with pytest.raises(PyTritonValidationError, match=r"@batch expects the list of requests.*\['x'\]"):
        infer(x=np.ones((1, 1)))


def test_triton_context_without_context_is_an_error() -> None:
    @triton_context
    def infer(requests: list[Request], triton_context: TritonContext) -> list[Request]:
        return requests

    with pytest.raises(PyTritonInvalidOperationError, match="found no TritonContext"):
        infer([])
