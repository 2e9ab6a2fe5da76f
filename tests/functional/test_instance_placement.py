"""One worker process per device: ``ModelConfig(process_instances=True, devices=[...])`` with an
`InstanceSetup`, against the real tritonserver, on a host without GPUs.

Nothing here touches CUDA: what is checked is the placement pytriton makes. Each worker process
starts with ``CUDA_VISIBLE_DEVICES`` naming only its device, runs its setup once (never in this
process), serves what the setup built, and runs it again when it is forked afresh after a death;
the served configuration names each instance's device. A failing setup fails the `bind` with the
model, the instance and the error, and leaves no worker process. (With a GPU:
tests/functional/test_cuda_process_instances.py.)
"""

from __future__ import annotations

import concurrent.futures
import os
import signal
import time

import numpy as np
import pytest
import tritonclient.http
from support import forked_children, http_url, our_leftovers, server_config, wait_until

from pytriton.client import ModelClient
from pytriton.decorators import batch
from pytriton.exceptions import PyTritonModelConfigError
from pytriton.model_config import InstanceSetup, ModelConfig, Tensor
from pytriton.triton import Triton

pytestmark = pytest.mark.functional

X = [Tensor(name="x", dtype=np.float32, shape=(1,))]
SEEN = [Tensor(name=name, dtype=np.int64, shape=(1,)) for name in ("pid", "instance", "device", "visible", "setups")]
SETUPS: list = []  # each worker process appends to its own copy; this process's must stay empty


def load(placement):
    """The setup: runs in each worker process; the callable reports where it runs."""
    SETUPS.append(placement)

    @batch
    def where(x):
        time.sleep(0.2)  # long enough that concurrent requests need both instances
        row = [os.getpid(), placement.instance, placement.device, int(os.environ["CUDA_VISIBLE_DEVICES"]),
               len(SETUPS)]
        return {t.name: np.full((len(x), 1), value, np.int64) for t, value in zip(SEEN, row)}

    return where


@pytest.fixture(scope="module")
def triton():
    inherited = os.environ.pop("CUDA_VISIBLE_DEVICES", None)  # ordinals count what this process sees
    server = Triton(config=server_config())
    try:
        server.bind("Placed", InstanceSetup(load), X, SEEN,
                    config=ModelConfig(max_batch_size=1, process_instances=True, devices=[0, 1]))
        server.run()
        yield server
    finally:
        server.stop()
        if inherited is not None:
            os.environ["CUDA_VISIBLE_DEVICES"] = inherited
    assert forked_children() == []
    assert our_leftovers() == {"processes": [], "segments": [], "folders": []}


def _answers(server, count=4):
    """What `count` concurrent requests saw: {(pid, instance, device, visible, setups), ...}."""
    def ask(_):
        with ModelClient(http_url(server._config), "Placed", inference_timeout_s=30) as client:
            result = client.infer_sample(x=np.ones(1, np.float32))
        return tuple(int(result[t.name][0]) for t in SEEN)

    with concurrent.futures.ThreadPoolExecutor(count) as pool:
        return set(pool.map(ask, range(count)))


def _both_instances(server):
    seen: set = set()
    deadline = time.monotonic() + 20
    while len({row[1] for row in seen}) < 2 and time.monotonic() < deadline:
        seen |= _answers(server)
    return seen


def test_each_worker_process_sees_only_its_device_and_ran_its_setup_once(triton):
    seen = _both_instances(triton)
    assert {row[1:] for row in seen} == {(0, 0, 0, 1), (1, 1, 1, 1)}, seen
    pids = {row[0] for row in seen}
    assert len(pids) == 2 and os.getpid() not in pids and pids == set(forked_children())
    assert SETUPS == []  # the setup never ran in this process
    assert "CUDA_VISIBLE_DEVICES" not in os.environ


def test_the_served_configuration_names_each_instances_device(triton):
    with ModelClient(http_url(triton._config), "Placed") as client:
        config = client.model_config
    assert config.backend_parameters["pytriton.devices"] == "[0, 1]"
    assert [(kind.value, count) for kind, count in config.instance_group.items()] == [("KIND_CPU", 2)]
    raw = tritonclient.http.InferenceServerClient(http_url(triton._config).split("://")[1]).get_model_config("Placed")
    assert [(group["name"], group["count"]) for group in raw["instance_group"]] == [("Placed_gpu0", 1),
                                                                                    ("Placed_gpu1", 1)]


def test_a_worker_process_forked_afresh_runs_its_setup_again_on_the_same_device(triton):
    before = {row[1]: row[0] for row in _both_instances(triton)}
    os.kill(before[1], signal.SIGKILL)
    fresh = wait_until(lambda: [pid for pid in forked_children() if pid not in before.values()], 10.0)
    assert fresh, "no fresh worker process was forked"
    deadline = time.monotonic() + 20
    seen: set = set()
    while not any(row[0] == fresh[0] for row in seen) and time.monotonic() < deadline:
        try:
            seen |= _answers(triton)
        except Exception:  # noqa: BLE001 - a request may meet the dead process; ask again
            time.sleep(0.2)
    (row,) = [row for row in seen if row[0] == fresh[0]]
    assert row[1:] == (1, 1, 1, 1)  # instance 1, on device 1, which it sees; its setup ran once


def test_a_failing_setup_fails_the_bind_naming_the_instance_and_leaves_no_worker_process(triton):
    def broken(placement):
        if placement.device == 1:
            raise FileNotFoundError(f"no weights for device {placement.device}")
        return load(placement)

    serving = set(forked_children())
    with pytest.raises(PyTritonModelConfigError) as info:
        triton.bind("Broken", InstanceSetup(broken), X, SEEN,
                    config=ModelConfig(max_batch_size=1, process_instances=True, devices=[0, 1]))
    message = str(info.value)
    assert "model 'Broken' instance 1" in message and "FileNotFoundError: no weights for device 1" in message
    assert wait_until(lambda: set(forked_children()) == serving, 10.0), forked_children()
    assert SETUPS == []
