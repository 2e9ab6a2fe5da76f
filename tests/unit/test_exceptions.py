"""pytriton.exceptions: the published names import and sit where published code expects them."""

from __future__ import annotations

import pytest

from pytriton.exceptions import (
    PyTritonBadParameterError,
    PyTritonError,
    PyTritonInvalidOperationError,
    PyTritonRuntimeError,
    PyTritonValidationError,
)


def test_runtime_error_is_a_pytriton_error_of_its_own_branch():
    error = PyTritonRuntimeError("generator from a model that does not stream")
    assert isinstance(error, PyTritonError)
    assert not isinstance(error, (PyTritonValidationError, PyTritonInvalidOperationError))
    assert error.message == "generator from a model that does not stream" == str(error)
    with pytest.raises(PyTritonError):
        raise error


def test_runtime_error_is_in_the_drawn_tree():
    import pytriton.exceptions

    assert "PyTritonRuntimeError" in (pytriton.exceptions.__doc__ or "")


def test_a_bad_parameter_is_caught_as_a_validation_error_as_published_code_expects():
    with pytest.raises(PyTritonValidationError):
        raise PyTritonBadParameterError("x")
