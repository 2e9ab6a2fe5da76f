"""A client's shared-memory regions: the layout of a request (pure), the argument, the host check,
the pool's reuse and growth, and the names and lease a server's sweeps read."""

from __future__ import annotations

import os

import numpy as np
import pytest

from pytriton.client import PyTritonClientValueError
from pytriton.client.model_config import ClientModelConfig, TensorSpec
from pytriton.client.shm_regions import (
    AUTO_MIN_BYTES,
    STEP_BYTES,
    Region,
    RegionPool,
    Slot,
    is_this_host,
    plan,
    shm_arg,
)
from pytriton.client_regions import SHM_DIR, OwnerLease, new_owner_id, owner_alive, region_name, region_owner


def _spec(name, dtype, shape):
    dtype = np.dtype(dtype)
    return TensorSpec(name, tuple(shape), dtype, "BYTES" if dtype.kind == "O" else dtype.name.upper())


def _config(outputs, max_batch_size=8):
    return ClientModelConfig("M", max_batch_size, inputs=(_spec("x", np.float32, (-1,)),), outputs=tuple(outputs))


def test_fixed_size_inputs_and_outputs_of_known_size_get_aligned_slots():
    config = _config([_spec("y", np.float32, (3,)), _spec("z", np.int64, (-1,)), _spec("s", object, (1,))])
    inputs = {"x": np.zeros((2, 5), np.float32), "t": np.array([b"a", b"b"], dtype=object)}
    layout = plan(config, inputs, 0)
    assert layout.inputs == (Slot("x", 0, 40),)
    assert layout.outputs == (("y", Slot("y", 64, 24)), ("z", None), ("s", None))
    assert layout.size == 128


def test_the_threshold_leaves_small_tensors_on_the_socket():
    config = _config([_spec("y", np.float32, (AUTO_MIN_BYTES // 4,))])
    small = {"x": np.zeros((1, 4), np.float32)}
    layout = plan(config, small, AUTO_MIN_BYTES)
    assert layout.inputs == () and layout.outputs == (("y", Slot("y", 0, AUTO_MIN_BYTES)),)
    assert plan(_config([_spec("y", np.float32, (4,))]), small, AUTO_MIN_BYTES) is None


def test_a_model_without_batching_sizes_outputs_by_their_dims_alone():
    config = _config([_spec("y", np.uint8, (2, 3))], max_batch_size=0)
    layout = plan(config, {"x": np.zeros(7, np.float32)}, 0)
    assert layout.outputs == (("y", Slot("y", 64, 6)),)


@pytest.mark.parametrize("value", ["auto", True, False])
def test_the_three_modes_are_taken(value):
    assert shm_arg(value, "localhost").mode == value


@pytest.mark.parametrize("value", ["yes", 1, 0, None, "AUTO"])
def test_other_values_are_refused_naming_the_choices(value):
    with pytest.raises(PyTritonClientValueError, match="shared_memory must be 'auto', True or False"):
        shm_arg(value, "localhost")


def test_auto_uses_shared_memory_only_for_this_host():
    assert is_this_host("localhost") and is_this_host("127.0.0.1") and is_this_host("::1")
    assert not is_this_host("192.0.2.1")  # TEST-NET-1: never an address of this machine
    assert not is_this_host("no-such-host.invalid")
    config = _config([_spec("y", np.float32, (AUTO_MIN_BYTES,))])
    inputs = {"x": np.zeros((1, 4), np.float32)}
    assert shm_arg("auto", "localhost").layout(config, inputs) is not None
    assert shm_arg("auto", "192.0.2.1").layout(config, inputs) is None
    assert shm_arg(True, "192.0.2.1").layout(config, inputs) is not None
    assert shm_arg(False, "localhost").layout(config, inputs) is None


def test_auto_goes_back_to_the_socket_once_refused():
    choice = shm_arg("auto", "localhost")
    choice.refuse("M", "http://localhost:8000", "refused")
    assert choice.refusal == "refused"
    assert choice.layout(_config([_spec("y", np.float32, (AUTO_MIN_BYTES,))]), {"x": np.zeros((1, 1))}) is None


def _names(owner_id):
    return sorted(name for name in os.listdir(SHM_DIR) if name.startswith(owner_id))


def test_the_pool_reuses_a_region_grows_it_and_leaves_nothing_on_close():
    pool = RegionPool()
    try:
        first = pool.create(10)
        assert first.size == STEP_BYTES and _names(pool.owner_id) == [first.name, f"{pool.owner_id}-lock"]
        assert owner_alive(pool.owner_id)
        pool.give_back(first)
        assert pool.take(STEP_BYTES) is first  # fits: reused
        pool.give_back(first)
        assert pool.take(STEP_BYTES + 1) is None  # too small: retired, a larger one is needed
        assert pool.stale() == [first]
        pool.discard(first)
        second = pool.create(STEP_BYTES + 1)
        assert second.size == 2 * STEP_BYTES and second.name != first.name
        assert _names(pool.owner_id) == [second.name, f"{pool.owner_id}-lock"]
    finally:
        pool.close()
    assert _names(pool.owner_id) == []
    assert not owner_alive(pool.owner_id)


def test_a_region_round_trips_an_array_and_refuses_one_that_does_not_fit():
    region = Region(region_name(new_owner_id(), 0), STEP_BYTES)
    try:
        value = np.arange(12, dtype=np.int16).reshape(3, 4)
        region.write(Slot("x", 128, value.nbytes), value)
        np.testing.assert_array_equal(region.read(Slot("x", 128, value.nbytes), value.dtype, (3, 4)), value)
        with pytest.raises(PyTritonClientValueError, match="does not fit"):
            region.read(Slot("x", 128, 8), value.dtype, (3, 4))
    finally:
        region.release()
    assert not os.path.exists(region.path)


def test_region_names_carry_the_owner_and_a_tag_the_sweeps_recognise():
    owner = new_owner_id()
    assert owner.startswith(f"pytriton-{os.getpid()}-")
    assert region_owner(region_name(owner, 3)) == owner
    assert region_owner("/" + region_name(owner, 3)) == owner  # a key as Triton reports it
    for other in (f"{owner}-lock", f"{owner}-m1-0-in-1", "pytriton-x-abcd-client-1", "other-1-abcd-client-1"):
        assert region_owner(other) is None


def test_a_lease_tells_a_live_owner_from_a_dead_or_missing_one():
    owner = new_owner_id()
    assert not owner_alive(owner)
    lease = OwnerLease(owner)
    try:
        assert owner_alive(owner)
        assert not os.path.exists(os.path.join(SHM_DIR, f".{owner}-lock"))  # the hidden name is gone
    finally:
        lease.release()
    assert not owner_alive(owner)
