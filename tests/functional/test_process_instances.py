"""``ModelConfig(process_instances=True)``: model instances in worker processes forked from ours.

Against the real tritonserver: each instance answers from its own child process; exceptions,
unrecoverable errors, async callables and streaming generators behave as with in-thread
instances; stop() leaves no process, socket file or segment; a worker killed with SIGKILL fails
the request it was serving and is replaced by a fresh one.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import threading
import time

import numpy as np
import psutil
import pytest
from support import forked_children, grpc_url, http_url, our_leftovers, server_config, shm_entries, wait_until

from pytriton.client import DecoupledModelClient, FuturesModelClient, ModelClient
from pytriton.client.exceptions import PyTritonClientInferenceServerError
from pytriton.decorators import batch
from pytriton.exceptions import PyTritonUnrecoverableError
from pytriton.ipc import protocol
from pytriton.model_config import ModelConfig, Tensor
from pytriton.triton import Triton

pytestmark = pytest.mark.functional

X_IN = [Tensor(name="x", dtype=np.float32, shape=(-1,))]
PID_OUT = [Tensor(name="pid", dtype=np.int64, shape=(1,))]
PROCESS = ModelConfig(batching=False, process_instances=True)


def whoami(requests):
    time.sleep(0.3)  # long enough that concurrent requests need both instances
    return [{"pid": np.array([os.getpid()], np.int64)} for _ in requests]


def failing(requests):
    raise ValueError("x is out of range")


async def async_double(requests):
    await asyncio.sleep(0.01)
    return [{"y": request["x"] * 2, "pid": np.array([os.getpid()], np.int64)} for request in requests]


@batch
def countdown(n):
    for step in range(int(n.max()), 0, -1):
        yield {"token": np.full_like(n, step)}


def test_an_unrecoverable_error_in_a_worker_process_shuts_the_server_down():
    @batch
    def broken(x):
        raise PyTritonUnrecoverableError("the accelerator is gone")

    triton = Triton(config=server_config())
    triton.bind("Broken", broken, X_IN, PID_OUT, config=ModelConfig(max_batch_size=4, process_instances=True))
    triton.run()
    serving = threading.Thread(target=triton.serve)
    serving.start()
    with ModelClient(http_url(triton._config), "Broken") as client:
        with pytest.raises(PyTritonClientInferenceServerError,
                           match="PyTritonUnrecoverableError: the accelerator is gone"):
            client.infer_sample(x=np.ones(2, np.float32))
        assert not triton.is_alive(), "is_alive() was still true once the client had its error"
    serving.join(60)
    assert not serving.is_alive(), "serve() did not return after an unrecoverable error"
    assert forked_children() == []
    assert our_leftovers() == {"processes": [], "segments": [], "folders": []}


def test_stop_leaves_no_worker_process_socket_file_or_segment():
    big = [Tensor(name="y", dtype=np.float32, shape=(-1,))]  # 1 MiB answers travel in the output arena

    def ones(requests):
        return [{"y": np.ones(1 << 18, np.float32)} for _ in requests]

    triton = Triton(config=server_config())
    try:
        triton.bind("Big", [ones, ones], X_IN, big, config=PROCESS)
        triton.run()
        workers = forked_children()
        assert len(workers) == 2
        # a child also inherits the sockets of other servers of this process: only version 1 of Big's
        key = f"{protocol.name_key('Big')}v1-"
        sockets = {c.laddr for pid in workers for c in psutil.Process(pid).net_connections(kind="unix")
                   if c.laddr and key in c.laddr}
        # each worker listens on a control socket (ZeroMQ), a data socket beside it and the metrics
        # socket beside that (pytriton's backend asks for the metrics there)
        assert len(sockets) == 6 and all(os.path.exists(path) for path in sockets), sockets
        controls = {path for path in sockets if not path.endswith((".d", ".d.m"))}
        assert {path for path in sockets if path.endswith(".d")} == {f"{path}.d" for path in controls}
        assert {path for path in sockets if path.endswith(".d.m")} == {f"{path}.d.m" for path in controls}
        with ModelClient(http_url(triton._config), "Big") as client:
            assert client.infer_sample(x=np.ones(1, np.float32))["y"].shape == (1 << 18,)
        marker = f"pytriton-{os.getpid()}-"
        assert any("-out-" in name for name in shm_entries(marker)), "the answer did not use an output arena"
    finally:
        triton.stop()
    assert forked_children() == []
    for pid in workers:
        assert not psutil.pid_exists(pid), f"worker process {pid} is left (a zombie?)"
    assert [path for path in sockets if os.path.exists(path)] == []
    assert our_leftovers() == {"processes": [], "segments": [], "folders": []}


def test_a_killed_worker_process_fails_its_request_and_is_forked_again(caplog):
    started = threading.Event()

    def slow(requests):
        time.sleep(3.0)
        return [{"pid": np.array([os.getpid()], np.int64)} for _ in requests]

    triton = Triton(config=server_config())
    try:
        triton.bind("Slow", slow, X_IN, PID_OUT, config=PROCESS)
        triton.run()
        (victim,) = forked_children()
        outcome: dict = {}

        def ask() -> None:
            started.set()
            try:
                with ModelClient(http_url(triton._config), "Slow", inference_timeout_s=30) as client:
                    outcome["result"] = client.infer_sample(x=np.ones(1, np.float32))
            except Exception as exc:  # noqa: BLE001 - inspected below
                outcome["error"] = exc

        asking = threading.Thread(target=ask)
        with caplog.at_level(logging.WARNING, logger="pytriton.worker"):
            asking.start()
            started.wait(5)
            time.sleep(1.0)  # the request is inside the callable by now
            os.kill(victim, signal.SIGKILL)
            killed_at = time.monotonic()
            asking.join(30)
            assert "error" in outcome, f"the request in flight on the killed worker did not fail: {outcome}"
            assert f"(pid {victim}) killed by signal 9 (SIGKILL) while serving this request" in str(outcome["error"])
            assert time.monotonic() - killed_at < 3.0, "the in-flight request waited out the callable"
            fresh = wait_until(lambda: [pid for pid in forked_children() if pid != victim], 5.0)
            assert fresh, "no fresh worker process was forked"
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert any(f"pid {victim}" in m and "signal 9 (SIGKILL)" in m and "Slow" in m and "instance 0" in m
                   for m in warnings), warnings
        answered = None
        deadline = time.monotonic() + 10.0
        with ModelClient(http_url(triton._config), "Slow", inference_timeout_s=30) as client:
            while answered is None and time.monotonic() < deadline:
                try:
                    answered = int(client.infer_sample(x=np.ones(1, np.float32))["pid"][0])
                except PyTritonClientInferenceServerError:
                    time.sleep(0.2)
        assert answered is not None and answered != victim and answered in forked_children()
    finally:
        triton.stop()
    assert forked_children() == []
    assert our_leftovers() == {"processes": [], "segments": [], "folders": []}


def test_a_worker_that_stops_reading_holds_requests_until_their_timeout_and_serves_when_it_resumes():
    """The worker process is stopped (SIGSTOP): it reads nothing and answers nothing. A request
    then fails with its client's timeout, naming it; nothing is lost or crossed once it resumes,
    and a request queued behind the stop is answered with its own data."""
    from pytriton.client.exceptions import PyTritonClientTimeoutError

    def echo(requests):
        return [{"pid": np.array([os.getpid()], np.int64), "x": request["x"]} for request in requests]

    triton = Triton(config=server_config())
    try:
        triton.bind("Echo", echo, X_IN, PID_OUT + X_IN, config=PROCESS)
        triton.run()
        url = http_url(triton._config)
        (worker,) = forked_children()
        os.kill(worker, signal.SIGSTOP)
        try:
            with ModelClient(url, "Echo", inference_timeout_s=1.0) as client:
                with pytest.raises(PyTritonClientTimeoutError):
                    client.infer_sample(x=np.full(3, 7.0, np.float32))
            queued: dict = {}

            def ask_patiently() -> None:
                with ModelClient(url, "Echo", inference_timeout_s=30) as patient:
                    queued["answer"] = patient.infer_sample(x=np.full(2, 5.0, np.float32))

            asking = threading.Thread(target=ask_patiently)
            asking.start()
            time.sleep(0.5)
        finally:
            os.kill(worker, signal.SIGCONT)
        asking.join(20)
        assert queued["answer"]["x"].tolist() == [5.0, 5.0]
        with ModelClient(url, "Echo", inference_timeout_s=10) as client:
            answer = client.infer_sample(x=np.arange(4, dtype=np.float32))
        assert answer["x"].tolist() == [0.0, 1.0, 2.0, 3.0] and int(answer["pid"][0]) == worker
    finally:
        triton.stop()
    assert forked_children() == []


# One server for the tests below; it is torn down at the end of the module, so the tests above,
# which check that nothing is left, come first.
@pytest.fixture(scope="module")
def served():
    config = server_config()
    triton = Triton(config=config)
    try:
        triton.bind("Pids", [whoami, whoami], X_IN, PID_OUT, config=PROCESS)
        triton.bind("Failing", failing, X_IN, PID_OUT, config=PROCESS)
        triton.bind("Lone", lambda requests: [{"pid": np.array([os.getpid()], np.int64)} for _ in requests],
                    X_IN, PID_OUT, config=PROCESS)
        triton.bind("AsyncDouble", async_double, X_IN, [Tensor(name="y", dtype=np.float32, shape=(-1,)), *PID_OUT],
                    config=PROCESS)
        triton.bind("Countdown", countdown, [Tensor(name="n", dtype=np.int32, shape=(1,))],
                    [Tensor(name="token", dtype=np.int32, shape=(1,))],
                    config=ModelConfig(max_batch_size=4, decoupled=True, process_instances=True))
        triton.run()
        yield config
    finally:
        triton.stop()


def test_two_instances_answer_from_two_worker_processes(served):
    with FuturesModelClient(http_url(served), "Pids", max_workers=4) as client:
        futures = [client.infer_sample(x=np.ones(2, np.float32)) for _ in range(8)]
        pids = {int(future.result(timeout=30)["pid"][0]) for future in futures}
    assert len(pids) == 2, f"expected two worker processes to answer, got pids {pids}"
    assert os.getpid() not in pids
    assert pids <= set(forked_children()), f"answering pids {pids} are not children forked from this process"


@pytest.mark.parametrize("model", ["Lone", "Countdown"])
def test_a_worker_process_killed_while_idle_costs_no_request(served, model):
    """Nothing was in flight when the worker died: the next request goes to the fresh worker (the
    backend learns of the death only when it sends, and the batch it could not send reached
    nobody), on the plain path and the streaming one."""

    def ask() -> int:
        if model == "Countdown":
            with DecoupledModelClient(grpc_url(served), model) as client:
                return len(list(client.infer_sample(n=np.array([2], np.int32))))
        with ModelClient(http_url(served), model) as client:
            return int(client.infer_sample(x=np.ones(1, np.float32))["pid"][0])

    first = ask()
    before = set(forked_children())
    victims = [first] if model == "Lone" else [pid for pid in before if _serves(pid, model)]
    assert len(victims) == 1 and victims[0] in before, (model, victims, before)
    os.kill(victims[0], signal.SIGKILL)
    assert wait_until(lambda: victims[0] not in forked_children() and len(forked_children()) == len(before), 10)
    answers = [ask() for _ in range(3)]  # each one would fail if the first after the death were lost
    if model == "Lone":
        assert len(set(answers)) == 1 and answers[0] not in before, answers
    else:
        assert answers == [2, 2, 2]


def _serves(pid: int, model: str) -> bool:
    """Whether worker process `pid` serves `model` (its sockets are under the model's name key)."""
    key = protocol.name_key(model)
    try:
        return any(key in (c.laddr or "") for c in psutil.Process(pid).net_connections(kind="unix"))
    except psutil.Error:
        return False


def test_an_exception_of_the_callable_reaches_the_client_with_the_model_name(served):
    with ModelClient(http_url(served), "Failing") as client:
        with pytest.raises(PyTritonClientInferenceServerError,
                           match="Model 'Failing' failed: ValueError: x is out of range"):
            client.infer_sample(x=np.ones(2, np.float32))


def test_an_async_callable_serves_from_a_worker_process(served):
    with ModelClient(grpc_url(served), "AsyncDouble") as client:
        result = client.infer_sample(x=np.array([1.5, 2.0], np.float32))
    assert result["y"].tolist() == [3.0, 4.0]
    assert int(result["pid"][0]) != os.getpid()


def test_a_decoupled_generator_streams_from_a_worker_process(served):
    with DecoupledModelClient(grpc_url(served), "Countdown") as client:
        tokens = [int(response["token"][0]) for response in client.infer_sample(n=np.array([3], np.int32))]
    assert tokens == [3, 2, 1]
