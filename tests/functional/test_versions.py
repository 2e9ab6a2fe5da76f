"""Swapping a model while it serves: `bind` a new version beside the old one, then `unbind` the old.

Against the real tritonserver, on both serving paths (pytriton's backend, the default, and the
proxy in Triton's Python backend): under steady load from `ModelClient` and `AsyncioModelClient`
over HTTP and gRPC, with no version named, no request fails, the answers switch from version 1
to version 2, and version 1 leaves nothing behind (folder, sockets, segments, processes). Also:
an unbound name binds again, refusals of what cannot be unbound or cannot serve beside the
served version, and the same through a `RemoteTriton`.

The figures of each swap (requests served while it ran, how long each step took) are printed:
``pytest -s`` shows them.
"""

from __future__ import annotations

import asyncio
import os
import pathlib
import signal
import threading
import time
from typing import Callable, List, Optional

import numpy as np
import pytest
from support import (
    forked_children,
    grpc_url,
    http_status,
    http_url,
    server_config,
    shm_entries,
    stub_processes,
    wait_until,
)

from pytriton.client import AsyncioModelClient, DecoupledModelClient, ModelClient
from pytriton.decorators import batch
from pytriton.exceptions import PyTritonInvalidOperationError, PyTritonModelConfigError, PyTritonServerError
from pytriton.ipc import protocol
from pytriton.model_config import EnsembleStep, ModelConfig, ModelWarmup, Tensor
from pytriton.triton import RemoteTriton, Triton

pytestmark = pytest.mark.functional

TENSORS = {
    "inputs": [Tensor(name="x", dtype=np.float32, shape=(1,))],
    "outputs": [Tensor(name="y", dtype=np.float32, shape=(1,))],
    "config": ModelConfig(max_batch_size=8),
}
X = np.zeros(1, np.float32)


def socket_prefix(model: str, version: int) -> str:
    """How the socket files of `version` of `model` begin (`protocol.version_endpoint`)."""
    return f"{protocol.name_key(model)}v{version}-"


def answer_with(version: int) -> Callable:
    @batch
    def infer(x):
        return {"y": np.full_like(x, version)}

    return infer


class Load:
    """One client asking without a version, one request after the other, until stopped."""

    def __init__(self, label: str, ask: Callable[[threading.Event, List[int], List[BaseException]], None]) -> None:
        self.label = label
        self.answers: List[int] = []
        self.errors: List[BaseException] = []
        self.done = threading.Event()
        self.thread = threading.Thread(target=ask, args=(self.done, self.answers, self.errors), daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.done.set()
        self.thread.join(30)
        assert not self.thread.is_alive(), f"{self.label}: the client did not stop"


def blocking_load(url: str, model: str) -> Callable:
    def ask(done, answers, errors):
        with ModelClient(url, model, init_timeout_s=60) as client:
            while not done.is_set():
                try:
                    answers.append(int(client.infer_sample(x=X)["y"][0]))
                except Exception as exc:  # noqa: BLE001 - every failure is what the test counts
                    errors.append(exc)

    return ask


def asyncio_load(url: str, model: str) -> Callable:
    async def run(done, answers, errors):
        async with AsyncioModelClient(url, model, init_timeout_s=60) as client:
            while not done.is_set():
                try:
                    answers.append(int((await client.infer_sample(x=X))["y"][0]))
                except Exception as exc:  # noqa: BLE001
                    errors.append(exc)

    return lambda done, answers, errors: asyncio.run(run(done, answers, errors))


def serves(url: str, model: str, version: Optional[int] = None) -> bool:
    """Whether the server answers ready for `model` (`version`: that version)."""
    versioned = "" if version is None else f"/versions/{version}"
    return http_status(f"{url}/v2/models/{model}{versioned}/ready") == 200


def wait_answers(loads: List[Load], version: int, count: int) -> None:
    """Wait until each load has `count` answers of `version` (failing on the first error)."""
    def enough():
        for load in loads:
            assert not load.errors, f"{load.label}: {load.errors[:3]}"
        return all(load.answers.count(version) >= count for load in loads)

    assert wait_until(enough, 60), {load.label: load.answers[-5:] for load in loads}


def swap_under_load(triton, urls, model: str, workspace: pathlib.Path, config: ModelConfig = TENSORS["config"]) -> int:
    """Serve `model` v1 under load, bind v2, unbind v1; check the clients and what v1 left.
    Returns how many stubs version 1 had (the proxy path)."""
    tensors = {**TENSORS, "config": config}
    triton.bind(model, answer_with(1), model_version=1, **tensors)
    loads = [Load(label, make(url, model)) for label, make, url in urls]
    try:
        wait_answers(loads, 1, 10)
        stubs = {stub.pid for stub in stub_processes(f"{model}/1")}  # the proxy path's; none on pytriton's backend
        before = sum(len(load.answers) for load in loads)
        started = time.monotonic()
        triton.bind(model, answer_with(2), model_version=2, **tensors)
        bound = time.monotonic()
        # Version 1 was updated in place, not loaded again: its instances are those that served
        # (a new one would have started a new stub, or, on pytriton's backend, reached version 2's workers).
        assert {stub.pid for stub in stub_processes(f"{model}/1")} == stubs
        with ModelClient(urls[0][2], model, "1") as one, ModelClient(urls[0][2], model, "2") as two:
            assert (one.infer_sample(x=X)["y"][0], two.infer_sample(x=X)["y"][0]) == (1, 2)
        unbinding = time.monotonic()
        triton.unbind(model, model_version=1)
        ended = time.monotonic()
        during = sum(len(load.answers) for load in loads) - before
        wait_answers(loads, 2, 10)
    finally:
        for load in loads:
            load.stop()
    for load in loads:
        assert not load.errors, f"{load.label}: {load.errors[:3]}"
        first_two = load.answers.index(2)
        assert set(load.answers[:first_two]) == {1} and set(load.answers[first_two:]) == {2}, load.label
    print(f"\n{model}: {during} requests answered during the swap by {len(loads)} clients "
          f"({', '.join(load.label for load in loads)}); bind of version 2: {bound - started:.2f} s, "
          f"unbind of version 1: {ended - unbinding:.2f} s")
    assert not serves(urls[0][2], model, 1)
    assert sorted(p.name for p in (workspace / "models" / model).iterdir()) == ["2", "config.pbtxt"]
    assert [p.name for p in (workspace / "sockets").iterdir() if p.name.startswith(socket_prefix(model, 1))] == []
    old = protocol.model_key(model, 1)
    assert [name for name in shm_entries("") if f"-{old}-" in name] == []
    return len(stubs)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A `Triton` on pytriton's backend (the default), started, with its workspace."""
    workspace = tmp_path_factory.mktemp("ws")
    config = server_config()
    with Triton(config=config, workspace=workspace) as triton:
        triton.run()
        yield triton, config, workspace


def test_swap_under_load_from_every_client(served):
    triton, config, workspace = served
    urls = [("ModelClient HTTP", blocking_load, http_url(config)),
            ("ModelClient gRPC", blocking_load, grpc_url(config)),
            ("AsyncioModelClient HTTP", asyncio_load, http_url(config)),
            ("AsyncioModelClient gRPC", asyncio_load, grpc_url(config))]
    swap_under_load(triton, urls, "Swapped", workspace)
    triton.unbind("Swapped")
    assert not (workspace / "models" / "Swapped").exists()
    assert [p.name for p in (workspace / "sockets").iterdir() if p.name.startswith(protocol.name_key("Swapped"))] == []


def test_swap_of_process_instances_ends_the_old_processes(served):
    triton, config, workspace = served
    before = set(forked_children())
    triton.bind("Forked", [answer_with(1)] * 2, model_version=1, inputs=TENSORS["inputs"],
                outputs=TENSORS["outputs"], config=ModelConfig(max_batch_size=8, process_instances=True))
    first = set(forked_children()) - before
    assert len(first) == 2
    triton.bind("Forked", [answer_with(2)] * 2, model_version=2, inputs=TENSORS["inputs"],
                outputs=TENSORS["outputs"], config=ModelConfig(max_batch_size=8, process_instances=True))
    second = set(forked_children()) - before - first
    assert len(second) == 2
    triton.unbind("Forked", model_version=1)
    assert wait_until(lambda: not (set(forked_children()) & first), 10), "version 1's worker processes live on"
    with ModelClient(http_url(config), "Forked") as client:
        assert client.infer_sample(x=X)["y"][0] == 2
    triton.unbind("Forked")
    assert wait_until(lambda: not (set(forked_children()) & second), 10), "version 2's worker processes live on"
    assert [name for name in shm_entries("") if protocol.model_key("Forked", 2) in name] == []


def test_an_old_version_s_healed_worker_process_serves_the_old_version(served):
    """A worker process of version 1 dies while version 2 is bound beside it: the fresh process
    that takes its place serves version 1's callable, and Triton's instance of version 1
    reconnects to it, not to version 2's workers (the version is part of the socket paths)."""
    triton, config, workspace = served
    before = set(forked_children())
    for version in (1, 2):
        triton.bind("Healed", [answer_with(version)] * 2, model_version=version, inputs=TENSORS["inputs"],
                    outputs=TENSORS["outputs"], config=ModelConfig(max_batch_size=8, process_instances=True))
        if version == 1:
            first = set(forked_children()) - before
    assert len(first) == 2
    victim = min(first)
    os.kill(victim, signal.SIGKILL)
    assert wait_until(lambda: len(set(forked_children()) - before - {victim}) == 4, 30), "no fresh worker process"
    answers = {1: [], 2: []}
    deadline = time.monotonic() + 30
    for version in (1, 2):
        with ModelClient(http_url(config), "Healed", model_version=str(version), init_timeout_s=60) as client:
            while len(answers[version]) < 40 and time.monotonic() < deadline:
                answers[version].append(int(client.infer_sample(x=X)["y"][0]))
    # Both instances of each version answered (40 requests one after the other reach both).
    assert answers == {1: [1] * 40, 2: [2] * 40}
    triton.unbind("Healed")


def test_swap_of_a_streaming_model(served):
    triton, config, _ = served

    def streamer(version):
        def stream(requests):
            for step in range(3):
                yield [{"y": np.array([version * 10 + step], np.float32)} for _ in requests]

        return stream

    streaming = {**TENSORS, "config": ModelConfig(decoupled=True, batching=False)}
    triton.bind("Streamed", streamer(1), **streaming)

    def parts():
        # Over HTTP: a gRPC stream that the client cancels as its final response arrives (as
        # pytriton's client ends a completed stream) sometimes leaves Triton 2.51 holding the
        # request, and the model version then never finishes unloading (about 1 unload in 15).
        with DecoupledModelClient(http_url(config), "Streamed") as client:
            return [int(part["y"][0]) for part in client.infer_sample(x=X)]

    assert parts() == [10, 11, 12]
    triton.bind("Streamed", streamer(2), model_version=2, **streaming)
    assert parts() == [20, 21, 22]
    triton.unbind("Streamed", model_version=1)
    assert parts() == [20, 21, 22]
    triton.unbind("Streamed")


def test_unbind_then_bind_the_name_again(served):
    triton, config, workspace = served
    triton.bind("Again", answer_with(1), **TENSORS)
    with ModelClient(http_url(config), "Again") as client:
        assert client.infer_sample(x=X)["y"][0] == 1
    triton.unbind("Again")
    assert not (workspace / "models" / "Again").exists()
    assert not serves(http_url(config), "Again")
    # Bound again with other tensors: after an unbind, nothing of the old configuration holds.
    triton.bind("Again", lambda requests: [{"y": r["x"].astype(np.int32) + 5} for r in requests],
                inputs=[Tensor(name="x", dtype=np.int32, shape=(1,))],
                outputs=[Tensor(name="y", dtype=np.int32, shape=(1,))], config=ModelConfig(batching=False))
    with ModelClient(http_url(config), "Again") as client:
        assert client.infer_sample(x=np.array([1], np.int32))["y"].tolist() == [6]
    triton.unbind("Again")


def test_unbind_of_what_is_not_bound_is_refused(served):
    triton, _, _ = served
    with pytest.raises(PyTritonInvalidOperationError, match="'Nowhere'.*no model of that name is bound"):
        triton.unbind("Nowhere")
    triton.bind("Known", answer_with(1), **TENSORS)
    try:
        with pytest.raises(PyTritonInvalidOperationError, match=r"'Known' version 3.*bound versions: \[1\]"):
            triton.unbind("Known", model_version=3)
    finally:
        triton.unbind("Known")
    with pytest.raises(PyTritonInvalidOperationError, match="'Known'.*no model of that name"):
        triton.unbind("Known")


def test_a_step_of_a_bound_ensemble_is_not_unbound(served):
    triton, config, _ = served
    triton.bind("Step", answer_with(3), **TENSORS)
    triton.bind_ensemble("Pipe", [EnsembleStep("Step", inputs={"x": "x"}, outputs={"y": "y"})])
    with pytest.raises(PyTritonInvalidOperationError, match="'Step' version 1: ensemble 'Pipe'.*unbind ensemble"):
        triton.unbind("Step")
    with ModelClient(http_url(config), "Pipe") as client:
        assert client.infer_sample(x=X)["y"][0] == 3
    triton.unbind("Pipe")
    triton.unbind("Step")


def test_a_version_that_cannot_serve_beside_the_bound_one_is_refused(served):
    triton, config, workspace = served
    triton.bind("Strict", answer_with(1), **TENSORS)
    try:
        other_output = {**TENSORS, "outputs": [Tensor(name="y", dtype=np.float64, shape=(1,))]}
        with pytest.raises(PyTritonInvalidOperationError,
                           match="'Strict' version 2 cannot serve beside version 1: they differ in outputs"):
            triton.bind("Strict", answer_with(2), model_version=2, **other_output)
        with pytest.raises(PyTritonInvalidOperationError, match="number of instances"):
            triton.bind("Strict", [answer_with(2)] * 2, model_version=2, **TENSORS)
        with pytest.raises(PyTritonInvalidOperationError, match="'Strict' version 1 is already bound"):
            triton.bind("Strict", answer_with(2), model_version=1, **TENSORS)
        assert sorted(p.name for p in (workspace / "models" / "Strict").iterdir()) == ["1", "config.pbtxt"]
        with ModelClient(http_url(config), "Strict") as client:
            assert client.infer_sample(x=X)["y"][0] == 1
    finally:
        triton.unbind("Strict")


def test_a_second_version_waits_for_the_server(tmp_path):
    triton = Triton(config=server_config(), workspace=tmp_path)  # not started: binds only declare
    try:
        triton.bind("Early", answer_with(1), **TENSORS)
        with pytest.raises(PyTritonInvalidOperationError, match="'Early' is bound already.*once the server runs"):
            triton.bind("Early", answer_with(2), model_version=2, **TENSORS)
        triton.unbind("Early")  # never loaded: only its folder and handlers go
        assert not (tmp_path / "models" / "Early").exists()
    finally:
        triton.stop()


def test_remote_triton_swaps_and_unbinds(served):
    triton, config, _ = served
    url = http_url(config)
    with RemoteTriton(url, access_token=triton.get_access_token()) as remote:
        remote.bind("Far", answer_with(1), **TENSORS)
        load = Load("ModelClient HTTP", blocking_load(url, "Far"))
        try:
            wait_answers([load], 1, 10)
            remote.bind("Far", answer_with(2), model_version=2, **TENSORS)
            remote.unbind("Far", model_version=1)
            wait_answers([load], 2, 10)
        finally:
            load.stop()
        assert not load.errors and load.answers[-1] == 2
        remote.unbind("Far")
        assert not serves(url, "Far")
        remote.bind("Far", answer_with(4), **TENSORS)  # the name is free again
        with ModelClient(url, "Far") as client:
            assert client.infer_sample(x=X)["y"][0] == 4


def test_swap_on_the_proxy_path(tmp_path):
    config = server_config(model_backend="python")
    with Triton(config=config, workspace=tmp_path) as triton:
        triton.run()
        urls = [("ModelClient HTTP", blocking_load, http_url(config)),
                ("AsyncioModelClient gRPC", asyncio_load, grpc_url(config))]
        assert swap_under_load(triton, urls, "Proxied", tmp_path) == 1  # version 1's stub, kept through the swap
        assert not stub_processes("Proxied/1"), "version 1's stub lives on"  # unbind waited for it
        assert len(stub_processes("Proxied/2")) == 1


def test_a_version_that_fails_its_warm_up_is_refused_while_the_served_one_serves(served):
    @batch
    def broken(x):
        raise ValueError("weights missing")

    triton, config, workspace = served
    warmed = {**TENSORS, "config": ModelConfig(max_batch_size=8, model_warmup=[ModelWarmup()])}
    calls = []

    @batch
    def counted(x):
        calls.append(len(x))
        return {"y": np.full_like(x, 1)}

    triton.bind("Fragile", counted, **warmed)
    try:
        assert calls == [1]  # Triton's warm-up of the first version
        with pytest.raises(PyTritonModelConfigError, match="'Fragile': warm-up 'warmup' failed: ValueError: weights"):
            triton.bind("Fragile", broken, model_version=2, **warmed)
        # Refused before Triton heard of it: no failure recorded there (the server stays ready),
        # nothing of version 2 on disk, version 1 serves on.
        assert http_status(f"{http_url(config)}/v2/health/ready") == 200
        assert sorted(p.name for p in (workspace / "models" / "Fragile").iterdir()) == ["1", "config.pbtxt"]
        names = [p.name for p in (workspace / "sockets").iterdir()]
        assert any(name.startswith(socket_prefix("Fragile", 1)) for name in names), names  # the check can see
        assert [name for name in names if name.startswith(socket_prefix("Fragile", 2))] == []
        with ModelClient(http_url(config), "Fragile") as client:
            assert client.infer_sample(x=X)["y"][0] == 1
        triton.bind("Fragile", answer_with(3), model_version=3, **warmed)  # warmed up here, then by Triton
        with ModelClient(http_url(config), "Fragile") as client:
            assert client.infer_sample(x=X)["y"][0] == 3
    finally:
        triton.unbind("Fragile")


def refusing(monkeypatch, callable_: Callable) -> None:
    """Make the handlers of `callable_` refuse the greeting of Triton's instances: a load of its
    version fails inside Triton (after pytriton's own checks and warm-ups passed)."""
    from pytriton.worker.handler import InstanceHandler

    original = InstanceHandler.__init__

    def init(self, spec, **kwargs):
        original(self, spec, **kwargs)
        if spec.infer_func is callable_:
            self._endpoint._refusal = lambda hello: "protocol refused by the test: this version cannot load"

    monkeypatch.setattr(InstanceHandler, "__init__", init)


def server_ready(config) -> bool:
    """Strict readiness over HTTP and gRPC both."""
    import tritonclient.grpc as grpcclient

    with grpcclient.InferenceServerClient(f"127.0.0.1:{config.grpc_port}") as client:
        grpc_ready = client.is_server_ready()
    return http_status(f"{http_url(config)}/v2/health/ready") == 200 and grpc_ready


@pytest.mark.parametrize("backend", ["pytriton", "python"])
def test_a_joining_version_that_fails_to_load_leaves_the_server_ready(short_dir, monkeypatch, backend):
    """Triton 2.51 keeps a failed load's record, and a strict server reports not ready while any
    version's record is a failure; the versions that serve serve on, and the server says ready again
    once the bind that failed returns (pytriton clears the record: `pytriton.facade.versions`)."""
    broken = answer_with(2)
    refusing(monkeypatch, broken)
    config = server_config(**({"model_backend": "python"} if backend == "python" else {}))
    with Triton(config=config, workspace=short_dir / "ws") as triton:
        triton.run()
        triton.bind("Steady", answer_with(1), model_version=1, **TENSORS)
        assert wait_until(lambda: server_ready(config), 30)
        load = Load("ModelClient HTTP", blocking_load(http_url(config), "Steady"))
        try:
            wait_answers([load], 1, 10)
            stubs = {stub.pid for stub in stub_processes("Steady/1")}  # the proxy path's; none on pytriton's backend
            assert len(stubs) == (1 if backend == "python" else 0)
            before, started = len(load.answers), time.monotonic()
            with pytest.raises(PyTritonServerError, match="(?s)Steady.*refused by the test"):
                triton.bind("Steady", broken, model_version=2, **TENSORS)
            failed_bind_s, during = time.monotonic() - started, len(load.answers) - before
            assert server_ready(config)  # at once: the bind returned with the record cleared
            assert {stub.pid for stub in stub_processes("Steady/1")} == stubs  # version 1 was never reloaded
            wait_answers([load], 1, len(load.answers) + 10)
        finally:
            load.stop()
        assert not load.errors, load.errors[:3]
        assert set(load.answers) == {1}, sorted(set(load.answers))  # version 1's callable answered every request
        assert not serves(http_url(config), "Steady", 2)
        assert sorted(p.name for p in (short_dir / "ws" / "models" / "Steady").iterdir()) == ["1", "config.pbtxt"]
        names = [p.name for p in (short_dir / "ws" / "sockets").iterdir()]
        assert [name for name in names if name.startswith(socket_prefix("Steady", 2))] == []
        print(f"\n{backend}: the failed bind of version 2 took {failed_bind_s:.2f} s; {during} answers meanwhile")
        triton.bind("Steady", answer_with(2), model_version=2, **TENSORS)  # the version binds once it can load
        with ModelClient(http_url(config), "Steady") as client:
            assert client.infer_sample(x=X)["y"][0] == 2
        assert server_ready(config)


def test_a_joining_version_that_fails_to_load_through_remote_triton_leaves_the_server_ready(short_dir, monkeypatch):
    """The same through a `RemoteTriton` (its models sent with their files): the server it binds to,
    another process's, reports ready again once the failed bind returns."""
    broken = answer_with(2)
    refusing(monkeypatch, broken)
    config = server_config()
    with Triton(config=config, workspace=short_dir / "ws") as triton:
        triton.run()
        url = http_url(config)
        with RemoteTriton(url, access_token=triton.get_access_token()) as remote:
            remote.bind("Distant", answer_with(1), **TENSORS)
            assert wait_until(lambda: server_ready(config), 30)
            with pytest.raises(PyTritonServerError, match="(?s)Distant.*refused by the test"):
                remote.bind("Distant", broken, model_version=2, **TENSORS)
            assert server_ready(config)
            assert not serves(url, "Distant", 2)
            with ModelClient(url, "Distant") as client:
                assert client.infer_sample(x=X)["y"][0] == 1
