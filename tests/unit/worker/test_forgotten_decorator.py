"""A callable bound without @batch but written for it is named at bind, not by a TypeError per request."""

from __future__ import annotations

import numpy as np
import pytest

from pytriton.decorators import batch, sample
from pytriton.facade.binding import ModelBindings
from pytriton.model_config import ModelConfig, Tensor
from pytriton.worker.handler import forgotten_decorator

INPUTS = ["values", "factor"]


def scale(values, factor):
    return {"scaled": values * factor}


def test_a_function_whose_parameters_are_the_inputs_names_the_forgotten_decorator():
    hint = forgotten_decorator(scale, INPUTS)
    assert hint == (
        "the inference callable 'scale' has no decorator, yet its parameters ['values', 'factor'] are named after "
        "the model's inputs: without a decorator it receives the list of requests as its only argument. Did you "
        "forget @batch (keyword arrays of the whole batch) or @sample (one request at a time)?")


@pytest.mark.parametrize("func", [
    batch(scale), sample(scale),                   # decorated: the wrapper decides
    lambda requests: requests,                      # the contract's own callable of requests
    lambda requests, **unused: requests,
    len,                                            # a builtin whose signature may not be read
])
def test_callables_written_for_the_list_of_requests_or_decorated_are_left_alone(func):
    assert forgotten_decorator(func, INPUTS) is None


class Scaler:
    @batch
    def __call__(self, values, factor):
        return {"scaled": values * factor}


class ForgotScaler:
    def __call__(self, values, factor):
        return {"scaled": values * factor}


def test_an_object_is_judged_by_its_call_method():
    # A class whose __call__ carries @batch is decorated (the docs' and published examples' form);
    # one whose __call__ has none but takes the inputs forgot it.
    assert forgotten_decorator(Scaler(), INPUTS) is None
    assert "has no decorator" in (forgotten_decorator(ForgotScaler(), INPUTS) or "")


def test_bind_warns_and_still_binds():
    bindings = ModelBindings("Triton", lambda name: None)
    tensors = {"inputs": [Tensor(name=name, dtype=np.float32, shape=(-1,)) for name in INPUTS],
               "outputs": [Tensor(name="scaled", dtype=np.float32, shape=(-1,))]}
    with pytest.warns(UserWarning, match=r"model 'Scale': the inference callable 'scale' has no decorator"):
        declared = bindings.declare("Scale", scale, model_version=1, config=ModelConfig(max_batch_size=8),
                                    strict=False, **tensors)
    assert declared.infer_funcs == [scale]
