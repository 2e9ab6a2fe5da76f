"""Where a process instance runs and its setup step (`pytriton.worker.placement`), without a process."""

from __future__ import annotations

import asyncio
import types

import numpy as np
import pytest

from pytriton.decorators import batch
from pytriton.exceptions import PyTritonBadParameterError, PyTritonModelConfigError
from pytriton.model_config import InstancePlacement, InstanceSetup, ModelConfig, Tensor
from pytriton.repository.warmup import LocalWarmup
from pytriton.worker.context import TritonContext
from pytriton.worker.placement import (
    instance_entries,
    is_async_entry,
    placement_of,
    plain_callables,
    set_up,
    visible_devices,
)

X = (Tensor(name="x", dtype=np.float32, shape=(-1,)),)


def _context(**config):
    return TritonContext("Placed", 2, X, X, ModelConfig(**{"process_instances": True, **config}))


@batch
def identity(x):
    return {"x": x}


@pytest.mark.parametrize("device,inherited,expected", [
    (None, None, None),  # no devices: the child keeps what it inherits
    (None, "3", None),
    (1, None, "1"),
    (0, None, "0"),
    (1, "4,6", "6"),  # an ordinal counts the devices this process sees
    (0, " 4 , 6 ", "4"),
    ("GPU-5f1c", "4,6", "GPU-5f1c"),  # a UUID passes as it is
])
def test_the_child_sees_only_its_device(device, inherited, expected):
    assert visible_devices("Placed", device, inherited) == expected


def test_an_ordinal_past_the_devices_this_process_sees_is_refused():
    with pytest.raises(PyTritonBadParameterError) as info:
        visible_devices("Placed", 2, "4,6")
    message = str(info.value)
    assert "model 'Placed'" in message and "device 2" in message and "CUDA_VISIBLE_DEVICES='4,6'" in message
    with pytest.raises(PyTritonBadParameterError, match="sees 0 device"):
        visible_devices("Placed", 0, "")  # an empty list hides every device


def test_each_instance_is_placed_on_the_devices_in_turn():
    context = _context(devices=[0, 1])
    placements = [placement_of(context, index, None) for index in range(3)]
    assert [(p.instance, p.device, p.visible_devices) for p in placements] == [(0, 0, "0"), (1, 1, "1"), (2, 0, "0")]
    assert placements[1] == InstancePlacement("Placed", 2, 1, 1, "1")
    assert placement_of(_context(), 0, "5") == InstancePlacement("Placed", 2, 0, None, None)


def test_a_single_entry_is_served_once_per_listed_device():
    setup = InstanceSetup(lambda placement: identity)
    config = ModelConfig(process_instances=True, devices=[0, 1, 1])
    assert instance_entries("Placed", setup, config) == [setup, setup, setup]
    assert instance_entries("Placed", identity, config) == [identity] * 3
    # a list given by the user keeps one instance per entry
    assert instance_entries("Placed", [identity, setup], config) == [identity, setup]
    assert instance_entries("Placed", (identity,), config) == [identity]
    assert instance_entries("Placed", identity, ModelConfig(process_instances=True)) == [identity]
    assert plain_callables([identity, setup]) == [identity]


@pytest.mark.parametrize("given", [[], "model.pt", [identity, None]])
def test_entries_must_be_callables_or_setups(given):
    with pytest.raises(PyTritonBadParameterError, match=r"infer_func of model 'Placed' must be a callable"):
        instance_entries("Placed", given, ModelConfig())


def test_a_setup_needs_process_instances():
    with pytest.raises(PyTritonBadParameterError, match=r"model 'Placed'.*process_instances=True"):
        instance_entries("Placed", InstanceSetup(lambda p: identity), ModelConfig())


def test_the_kind_of_an_entry():
    async def coroutine(requests):
        return []

    assert is_async_entry(coroutine) and not is_async_entry(identity)
    assert is_async_entry(InstanceSetup(lambda p: coroutine, asynchronous=True))
    assert not is_async_entry(InstanceSetup(lambda p: coroutine))


def test_set_up_runs_the_factory_with_the_placement_and_returns_its_callable():
    seen = []

    def load(placement):
        seen.append(placement)
        return identity

    placement = InstancePlacement("Placed", 2, 1, 1, "1")
    assert set_up(InstanceSetup(load), placement, _context(), ()) is identity
    assert seen == [placement]


def test_set_up_runs_pytritons_own_warmups_on_what_it_built():
    calls = []

    @batch
    def counting(x):
        calls.append(x.shape)
        return {"x": x}

    warmup = LocalWarmup("rows", 2, {"x": np.ones((3, 2), np.float32)})
    set_up(InstanceSetup(lambda p: counting), InstancePlacement("Placed", 2, 0), _context(), [warmup])
    assert calls == [(3, 2), (3, 2)]


def _failure(setup, context=None):
    with pytest.raises(PyTritonModelConfigError) as info:
        set_up(setup, InstancePlacement("Placed", 2, 1, 1, "1"), context or _context(), ())
    message = str(info.value)
    assert "model 'Placed' instance 1" in message
    return message


def test_a_failing_factory_fails_naming_the_model_the_instance_and_the_error():
    def load(placement):
        raise FileNotFoundError("weights.pt")

    message = _failure(InstanceSetup(load))
    assert "load raised FileNotFoundError: weights.pt" in message


def test_a_factory_that_returns_no_callable_fails():
    def load(placement):
        return types.SimpleNamespace()

    assert "it must return the inference callable" in _failure(InstanceSetup(load))


def test_a_factory_that_returns_the_other_kind_fails_saying_how_to_declare_it():
    async def infer(requests):
        await asyncio.sleep(0)
        return []

    def load(placement):
        return infer

    message = _failure(InstanceSetup(load))
    assert "an async callable" in message and "InstanceSetup(load, asynchronous=True)" in message
    message = _failure(InstanceSetup(lambda p: identity, asynchronous=True))
    assert "a plain (not async) callable" in message


def test_a_generator_on_a_model_that_is_not_decoupled_fails_as_at_bind():
    def stream(requests):
        yield {}

    with pytest.raises(PyTritonModelConfigError, match="decoupled=True"):
        set_up(InstanceSetup(lambda p: stream), InstancePlacement("Placed", 2, 0), _context(), ())
