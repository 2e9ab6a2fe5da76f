"""`Tensor` normalisation and validation, and positional naming."""

import dataclasses

import numpy as np
import pytest

from pytriton.exceptions import PyTritonBadParameterError, PyTritonValidationError
from pytriton.model_config import Tensor
from pytriton.model_config.tensor import resolve_tensor_names


@pytest.mark.parametrize(
    ("given", "stored", "dtype"),
    [
        (np.float32, np.float32, np.dtype("float32")),
        (np.dtype("float32"), np.float32, np.dtype("float32")),
        (np.float32().dtype, np.float32, np.dtype("float32")),
        ("float32", np.float32, np.dtype("float32")),
        ("int64", np.int64, np.dtype("int64")),
        (np.bool_, np.bool_, np.dtype(bool)),
        (bool, bool, np.dtype(bool)),
        (np.bytes_, np.bytes_, np.dtype("S")),
        (bytes, bytes, np.dtype("S")),
        ("S5", np.bytes_, np.dtype("S")),
        (np.dtype("S5"), np.bytes_, np.dtype("S")),
        (object, object, np.dtype(object)),
        (np.object_, np.object_, np.dtype(object)),
    ],
)
def test_dtype_is_stored_as_the_published_scalar_type(given, stored, dtype):
    # The published Tensor keeps a type as given and turns an np.dtype into its type.
    tensor = Tensor(shape=(1,), dtype=given)

    assert tensor.dtype is stored
    assert np.dtype(tensor.dtype) == dtype


def test_bytes_and_object_stay_distinct():
    # object keeps trailing b"\x00"; bytes does not, so the difference must survive normalisation.
    assert np.dtype(Tensor(shape=(1,), dtype=np.bytes_).dtype).kind == "S"
    assert np.dtype(Tensor(shape=(1,), dtype=np.dtype(object)).dtype).kind == "O"


def test_positional_and_keyword_construction_agree():
    positional = Tensor((2, 3), np.int32, "x", True)
    keyword = Tensor(name="x", dtype="int32", shape=[2, 3], optional=True)

    assert positional == keyword
    assert positional.shape == (2, 3)
    assert positional.name == "x"
    assert positional.optional is True


def test_defaults():
    tensor = Tensor(shape=(-1,), dtype=np.float32)

    assert tensor.name is None
    assert tensor.optional is False


def test_shape_becomes_tuple_of_plain_ints():
    tensor = Tensor(shape=[np.int64(224), 224, -1], dtype=np.uint8)

    assert tensor.shape == (224, 224, -1)
    assert all(type(dim) is int for dim in tensor.shape)


def test_tensor_is_frozen_and_hashable_as_published():
    tensor = Tensor(shape=(1,), dtype=np.float32, name="a")

    with pytest.raises(dataclasses.FrozenInstanceError):
        tensor.name = "b"  # type: ignore[misc]
    assert {tensor, Tensor(shape=[1], dtype="float32", name="a")} == {tensor}


@pytest.mark.parametrize("shape", [(0,), (-2,), (3, 0), (1.5,), ("1",), (True,)])
def test_bad_axis_is_refused_naming_shape_and_value(shape):
    with pytest.raises(PyTritonBadParameterError) as info:
        Tensor(shape=shape, dtype=np.float32, name="img")

    message = str(info.value)
    assert "Tensor('img').shape" in message
    assert repr(shape) in message
    assert ">= 1 or -1" in message


@pytest.mark.parametrize("shape", [(), [], "12", 3, None])
def test_shape_that_is_not_a_non_empty_sequence_is_refused(shape):
    with pytest.raises(PyTritonBadParameterError, match=r"Tensor\.shape must be a non-empty sequence") as info:
        Tensor(shape=shape, dtype=np.float32)

    assert repr(shape) in str(info.value)


@pytest.mark.parametrize("dtype", ["floaty", 12, None])
def test_bad_dtype_is_refused_naming_dtype_and_value(dtype):
    with pytest.raises(PyTritonBadParameterError) as info:
        Tensor(shape=(1,), dtype=dtype, name="x")

    message = str(info.value)
    assert "Tensor('x').dtype" in message
    assert repr(dtype) in message


@pytest.mark.parametrize("name", ["", 5, b"x"])
def test_bad_name_is_refused(name):
    with pytest.raises(PyTritonBadParameterError, match=r"Tensor\.name must be a non-empty string") as info:
        Tensor(shape=(1,), dtype=np.float32, name=name)

    assert repr(name) in str(info.value)


def test_optional_must_be_bool():
    with pytest.raises(PyTritonBadParameterError, match=r"optional must be a bool.*'yes'"):
        Tensor(shape=(1,), dtype=np.float32, optional="yes")


def test_bad_parameter_error_is_a_validation_error():
    with pytest.raises(PyTritonValidationError):
        Tensor(shape=(0,), dtype=np.float32)


def test_unnamed_tensors_get_positional_names():
    inputs = [Tensor(shape=(1,), dtype=np.float32), Tensor(shape=(1,), dtype=np.float32)]

    resolved = resolve_tensor_names(inputs, "INPUT")

    assert [t.name for t in resolved] == ["INPUT_1", "INPUT_2"]
    assert all(t.shape == (1,) and t.dtype == np.float32 for t in resolved)
    assert isinstance(resolved, tuple)


def test_positions_count_named_tensors_too():
    outputs = [
        Tensor(shape=(1,), dtype=np.float32),
        Tensor(shape=(1,), dtype=np.int32, name="class"),
        Tensor(shape=(1,), dtype=np.int32),
    ]

    assert [t.name for t in resolve_tensor_names(outputs, "OUTPUT")] == ["OUTPUT_1", "class", "OUTPUT_3"]


def test_resolving_keeps_the_other_fields_and_is_idempotent():
    tensors = [Tensor(shape=(-1, 3), dtype=object, optional=True)]

    once = resolve_tensor_names(tensors, "INPUT")
    twice = resolve_tensor_names(once, "INPUT")

    assert once == twice == (Tensor(shape=(-1, 3), dtype=object, name="INPUT_1", optional=True),)


def test_empty_list_resolves_to_empty_tuple():
    assert resolve_tensor_names([], "INPUT") == ()


def test_duplicate_explicit_names_are_refused_naming_the_duplicate():
    tensors = [Tensor(shape=(1,), dtype=np.float32, name="a"), Tensor(shape=(1,), dtype=np.float32, name="a")]

    with pytest.raises(PyTritonBadParameterError, match=r"unique.*'a'"):
        resolve_tensor_names(tensors, "INPUT")


def test_generated_name_colliding_with_explicit_one_is_refused():
    tensors = [Tensor(shape=(1,), dtype=np.float32, name="INPUT_2"), Tensor(shape=(1,), dtype=np.float32)]

    with pytest.raises(PyTritonBadParameterError, match="'INPUT_2'"):
        resolve_tensor_names(tensors, "INPUT")


def test_non_tensor_item_is_refused():
    with pytest.raises(PyTritonBadParameterError, match=r"inputs\[0\] must be a pytriton.model_config.Tensor"):
        resolve_tensor_names([{"shape": (1,)}], "INPUT")
