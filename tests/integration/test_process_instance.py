"""`ProcessInstance` over a real ipc socket, without tritonserver: the forked worker's life cycle.

A DEALER in this process plays the proxy's handshake (`Hello` -> `Welcome`, which carries the
worker's pid). Covers what the functional tests cannot see once the server's workspace is gone:
the socket file, the segments, reaping, a re-fork on the same endpoint, SIGINT and the parent's
death.
"""

from __future__ import annotations

import os
import pathlib
import secrets
import signal
import subprocess
import sys
import textwrap
import time
from typing import Optional

import numpy as np
import psutil
import pytest

from pytriton.exceptions import PyTritonModelConfigError
from pytriton.ipc import codec, protocol
from pytriton.ipc.shm import SHM_DIR
from pytriton.model_config import ModelConfig, Tensor
from pytriton.proxy.link import Link
from pytriton.worker.context import TritonContext
from pytriton.worker.instance import InstanceSpec
from pytriton.worker.process_instance import ProcessInstance

pytestmark = pytest.mark.integration

TENSORS = (Tensor(name="x", shape=(-1,), dtype=np.float32),)


def _identity(requests):
    return requests


def _instance(tmp_path: pathlib.Path, config: Optional[ModelConfig] = None, infer_func=_identity, **options) -> tuple:
    endpoint = protocol.instance_endpoint(protocol.ipc_endpoint(tmp_path / "sock"), 0)
    shm_prefix = f"pytriton-{os.getpid()}-test{secrets.token_hex(4)}"
    config = config or ModelConfig(max_batch_size=4)
    context = TritonContext(model_name="forked", model_version=1, inputs=TENSORS, outputs=TENSORS, config=config)
    spec = InstanceSpec(context=context, infer_func=infer_func, endpoint=endpoint, instance=0, shm_prefix=shm_prefix,
                        **options)
    instance = ProcessInstance(spec, on_unrecoverable=lambda model: None)
    return instance, endpoint, shm_prefix


def _link(endpoint: str, proxy_pid: int = 4242, timeout_s: float = 5.0) -> Link:
    """A proxy's link to the instance, greeted and connected (the caller closes it)."""
    link = Link("forked", endpoint, protocol.Hello(protocol.PROTOCOL_VERSION, 0, proxy_pid), os.getpid())
    try:
        link.connect(timeout_s, timeout_s)
    except BaseException:
        link.close()
        raise
    return link


class _Welcome:
    def __init__(self, worker_pid: int) -> None:
        self.worker_pid = worker_pid


def _hello(endpoint: str, proxy_pid: int = 4242, timeout_s: float = 5.0) -> _Welcome:
    """Greet the instance as a proxy would; what its welcome said (the serving pid)."""
    link = _link(endpoint, proxy_pid, timeout_s)
    link.close()
    return _Welcome(link.worker_pid)


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE  # adopted by a PID 1 that does not reap
    except psutil.NoSuchProcess:
        return True


def _wait(condition, timeout_s: float):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.02)
    return condition()


def test_the_worker_is_a_child_that_stops_without_leftovers(tmp_path):
    instance, endpoint, shm_prefix = _instance(tmp_path)
    instance.start()
    welcome = _hello(endpoint)
    worker = welcome.worker_pid
    assert worker != os.getpid() and worker in [child.pid for child in psutil.Process().children()]
    assert _wait(lambda: instance.proxy_pid == 4242, 2.0), "the child did not report the proxy's pid"
    socket_path = protocol.ipc_socket_path(endpoint)
    assert os.path.exists(socket_path)
    # A segment named like the worker's output arena, as a killed child would leave it.
    leftover = protocol.segment_name(shm_prefix, 0, "out", 7)
    pathlib.Path(SHM_DIR, leftover).write_bytes(b"x")
    assert instance.stop(2.0) is True
    assert not psutil.pid_exists(worker), "the worker was not reaped"
    assert not os.path.exists(socket_path)
    assert not os.path.exists(os.path.join(SHM_DIR, leftover))
    assert not instance.is_serving()


def test_a_killed_worker_is_forked_again_on_the_same_endpoint(tmp_path, caplog):
    instance, endpoint, shm_prefix = _instance(tmp_path)
    instance.start()
    try:
        first = _hello(endpoint).worker_pid
        started = time.monotonic()
        os.kill(first, signal.SIGKILL)
        second = _wait(lambda: instance.worker_pid not in (None, first) and instance.worker_pid, 3.0)
        assert second, "no fresh worker process after a SIGKILL"
        assert time.monotonic() - started < 2.0
        assert _hello(endpoint).worker_pid == second
        assert not psutil.pid_exists(first), "the killed worker was not reaped"
        assert any("forked" in r.getMessage() or "fresh" in r.getMessage() for r in caplog.records
                   if r.levelname == "WARNING" and str(first) in r.getMessage() and "SIGKILL" in r.getMessage())
    finally:
        assert instance.stop(2.0)


def test_sigint_is_left_to_the_parent(tmp_path):
    instance, endpoint, shm_prefix = _instance(tmp_path)
    instance.start()
    try:
        worker = _hello(endpoint).worker_pid
        os.kill(worker, signal.SIGINT)
        time.sleep(0.3)
        assert _hello(endpoint).worker_pid == worker
    finally:
        assert instance.stop(2.0)


def test_a_handler_that_refuses_its_configuration_fails_start(tmp_path):
    instance, _, _ = _instance(tmp_path, ModelConfig(max_batch_size=4, isolate_failures=True), asynchronous=True)
    with pytest.raises(PyTritonModelConfigError, match="applies to plain callables only"):
        instance.start()
    assert [child for child in psutil.Process().children() if child.cmdline() == psutil.Process().cmdline()] == []


def test_the_worker_dies_with_its_parent(tmp_path):
    script = textwrap.dedent(
        f"""
        import os, sys, time
        sys.path.insert(0, {str(pathlib.Path(__file__).parent)!r})
        import pathlib
        from test_process_instance import _instance, _hello
        instance, endpoint, _ = _instance(pathlib.Path({str(tmp_path)!r}))
        instance.start()
        print(_hello(endpoint).worker_pid, flush=True)
        time.sleep(60)
        """
    )
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        worker = int(parent.stdout.readline())
        assert psutil.pid_exists(worker)
        parent.kill()
        parent.wait(5)
        assert _wait(lambda: _gone(worker), 3.0), "the worker outlived its parent"
    finally:
        parent.kill()
        parent.wait(5)


def test_stop_kills_a_worker_whose_callable_does_not_return(tmp_path):
    marker = tmp_path / "called"

    def stuck(requests):
        marker.touch()
        time.sleep(600)

    instance, endpoint, _ = _instance(tmp_path, infer_func=stuck)
    instance.start()
    link = _link(endpoint)
    worker = link.worker_pid
    try:
        columns, segment, payload = codec.pack([{"x": np.ones(2, np.float32)}], None)
        link.channel.send(protocol.infer_batch_header(batch_id=1, parameters=("",), columns=columns, segment=segment),
                          payload)
        assert _wait(marker.exists, 5.0), "the callable was not called"
        started = time.monotonic()
        assert instance.stop(0.5) is True
        assert time.monotonic() - started < 5.0
        assert not psutil.pid_exists(worker), "the stuck worker was not killed and reaped"
        assert not os.path.exists(protocol.ipc_socket_path(endpoint))
    finally:
        link.close()
