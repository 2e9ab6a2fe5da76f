"""Outputs returned as torch tensors become host numpy arrays (`pytriton.worker.responses.host_array`)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch

from pytriton.decorators import batch
from pytriton.exceptions import PyTritonValidationError
from pytriton.worker.responses import host_array, is_torch_tensor


def test_cpu_tensor_becomes_an_array_with_its_values_and_dtype():
    array = host_array(torch.arange(6, dtype=torch.int32).reshape(2, 3), "output 'y'")
    assert type(array) is np.ndarray and array.dtype == np.int32
    assert array.tolist() == [[0, 1, 2], [3, 4, 5]]


def test_tensor_that_requires_grad_is_detached():
    weights = torch.ones(3, requires_grad=True)
    array = host_array(weights * 2, "output 'y'")
    assert array.tolist() == [2.0, 2.0, 2.0]


def test_non_contiguous_and_conjugated_tensors_keep_their_values():
    assert host_array(torch.arange(6.0).reshape(2, 3).T, "y").tolist() == [[0.0, 3.0], [1.0, 4.0], [2.0, 5.0]]
    assert host_array(torch.tensor([1 + 2j]).conj(), "y").tolist() == [1 - 2j]


def test_dtype_numpy_lacks_is_refused_naming_output_and_cast():
    expected = r"output 'y' is a torch tensor of dtype torch.bfloat16.*\.float\(\)"
    with pytest.raises(PyTritonValidationError, match=expected):
        host_array(torch.ones(2, dtype=torch.bfloat16), "output 'y'")


def test_other_values_keep_going_through_numpy():
    array = np.ones(2)
    assert host_array(array, "y") is array
    assert host_array([1, 2], "y").tolist() == [1, 2]
    assert not is_torch_tensor(np.ones(1)) and not is_torch_tensor([1]) and is_torch_tensor(torch.ones(1))


def test_batch_splits_a_torch_result_into_per_request_arrays():
    @batch
    def double(x):
        return {"y": torch.from_numpy(x) * 2}

    responses = double([{"x": np.array([[1.0]], np.float32)}, {"x": np.array([[2.0], [3.0]], np.float32)}])
    assert [type(r["y"]) for r in responses] == [np.ndarray, np.ndarray]
    assert [r["y"].tolist() for r in responses] == [[[2.0]], [[4.0], [6.0]]]


def test_importing_pytriton_does_not_import_torch():
    code = "import sys, pytriton.triton, pytriton.decorators, pytriton.worker.responses; print('torch' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (torch.cuda.is_available() is False)")
def test_cuda_tensor_is_copied_to_the_host_once():
    tensor = torch.arange(4.0, device="cuda") * 3
    array = host_array(tensor, "output 'y'")
    assert type(array) is np.ndarray and array.tolist() == [0.0, 3.0, 6.0, 9.0]
