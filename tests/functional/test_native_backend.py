"""pytriton's own Triton backend against the real tritonserver: requests cross no stub, the proxy
path stays one setting away, and a worker process that dies has its requests answered at once
with the cause (the backend holds them; nothing waits for a client timeout).
"""

from __future__ import annotations

import concurrent.futures
import logging
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import psutil
import pytest
from support import (
    forked_children,
    free_ports,
    grpc_url,
    http_status,
    http_url,
    our_leftovers,
    served_backend,
    server_config,
    wait_until,
)

from pytriton.client import DecoupledModelClient, ModelClient
from pytriton.client.exceptions import PyTritonClientInferenceServerError
from pytriton.decorators import batch
from pytriton.model_config import ModelConfig, Tensor
from pytriton.triton import RemoteTriton, Triton

pytestmark = [
    pytest.mark.functional,
    pytest.mark.skipif(served_backend() != "pytriton", reason="needs pytriton's backend (built with a C compiler)"),
]

X = [Tensor(name="x", dtype=np.float32, shape=(-1,))]
Y = [Tensor(name="y", dtype=np.float32, shape=(-1,))]
PID = [Tensor(name="pid", dtype=np.int64, shape=(1,))]


@batch
def double(x):
    return {"y": x * 2}


def _server_children(triton: Triton) -> list:
    server = psutil.Process(triton._process.pid)
    return [" ".join(child.cmdline()[:1]) for child in server.children(recursive=True)]


def test_requests_reach_the_callable_without_a_stub_process():
    with Triton(config=server_config()) as triton:
        triton.bind("Double", double, X, Y, config=ModelConfig(max_batch_size=8))
        triton.run()
        for url in (http_url(triton._config), grpc_url(triton._config)):
            with ModelClient(url, "Double") as client:
                np.testing.assert_array_equal(client.infer_batch(x=np.ones((3, 2), np.float32))["y"],
                                              np.full((3, 2), 2.0))
                assert client.model_config.backend == "pytriton"
        assert not any("triton_python_backend_stub" in name for name in _server_children(triton))


def test_model_backend_python_serves_through_the_proxy_in_a_stub():
    with Triton(config=server_config(model_backend="python")) as triton:
        triton.bind("Double", double, X, Y, config=ModelConfig(max_batch_size=8))
        triton.run()
        with ModelClient(http_url(triton._config), "Double") as client:
            np.testing.assert_array_equal(client.infer_batch(x=np.ones((1, 2), np.float32))["y"], [[2.0, 2.0]])
            assert client.model_config.backend == "python"
        assert any("triton_python_backend_stub" in name for name in _server_children(triton))


def _pid_then_sleep(requests):
    """Answers with its pid at once when asked with x < 0; else sleeps, so requests stay in flight."""
    if all(float(request["x"].flat[0]) < 0 for request in requests):
        return [{"pid": np.array([[os.getpid()]], np.int64)} for _ in requests]
    time.sleep(5)
    return [{"pid": np.array([[os.getpid()]], np.int64)} for _ in requests]


def _stream_then_sleep(requests):
    yield [{"pid": np.array([[os.getpid()]], np.int64)} for _ in requests]
    time.sleep(5)
    yield [{"pid": np.array([[os.getpid()]], np.int64)} for _ in requests]


@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGSEGV], ids=["SIGKILL", "SIGSEGV"])
def test_a_dead_worker_process_has_every_request_in_flight_answered_within_a_second_with_the_cause(signum):
    config = ModelConfig(max_batch_size=16, process_instances=True)
    with Triton(config=server_config()) as triton:
        triton.bind("Sleepy", _pid_then_sleep, X, PID, config=config)
        triton.run()
        urls = [http_url(triton._config), grpc_url(triton._config)] * 3
        with ModelClient(urls[0], "Sleepy") as client:
            victim = int(client.infer_sample(x=np.full(1, -1.0, np.float32))["pid"][0])
        assert victim in forked_children()
        answered: dict = {}

        def ask(index: int, url: str) -> None:
            try:
                with ModelClient(url, "Sleepy", inference_timeout_s=60) as client:
                    client.infer_sample(x=np.ones(1, np.float32))
                answered[index] = ("answered", time.monotonic())
            except Exception as exc:  # noqa: BLE001 - inspected below
                answered[index] = (str(exc), time.monotonic())

        with concurrent.futures.ThreadPoolExecutor(len(urls)) as pool:
            futures = [pool.submit(ask, index, url) for index, url in enumerate(urls)]
            time.sleep(2.0)  # every request is in the worker's batch, or queued behind it
            os.kill(victim, signum)
            killed_at = time.monotonic()
            concurrent.futures.wait(futures, 60)
        name = signal.Signals(signum).name
        in_flight = [(text, at) for text, at in answered.values() if "killed by signal" in text]
        assert in_flight, answered
        for text, at in in_flight:
            assert f"(pid {victim}) killed by signal {int(signum)} ({name}) while serving this request" in text, text
            assert "Model 'Sleepy'" in text
            assert at - killed_at < 1.0, f"answered {at - killed_at:.2f} s after the worker died"
        fresh = wait_until(lambda: [pid for pid in forked_children() if pid != victim], 10.0)
        assert fresh, "no fresh worker process was forked"
        with ModelClient(urls[1], "Sleepy", init_timeout_s=30) as client:
            served = None
            deadline = time.monotonic() + 15
            while served is None and time.monotonic() < deadline:
                try:
                    served = int(client.infer_sample(x=np.full(1, -1.0, np.float32))["pid"][0])
                except PyTritonClientInferenceServerError:
                    time.sleep(0.2)
            assert served is not None and served != victim
    assert forked_children() == []
    assert our_leftovers() == {"processes": [], "segments": [], "folders": []}


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_dead_worker_process_ends_its_streams_within_a_second_with_the_cause(protocol):
    config = ModelConfig(max_batch_size=16, process_instances=True, decoupled=True)
    with Triton(config=server_config()) as triton:
        triton.bind("Streamy", _stream_then_sleep, X, PID, config=config)
        triton.run()
        url = http_url(triton._config) if protocol == "http" else grpc_url(triton._config)
        first = threading.Event()
        outcome: dict = {}

        def stream() -> None:
            try:
                with DecoupledModelClient(url, "Streamy", inference_timeout_s=60) as client:
                    for part in client.infer_sample(x=np.ones(1, np.float32)):
                        outcome["pid"] = int(part["pid"][0])
                        first.set()
            except Exception as exc:  # noqa: BLE001 - inspected below
                outcome["error"] = (str(exc), time.monotonic())
            first.set()

        streaming = threading.Thread(target=stream)
        streaming.start()
        assert first.wait(30), "the stream's first response did not come"
        victim = outcome["pid"]
        os.kill(victim, signal.SIGKILL)
        killed_at = time.monotonic()
        streaming.join(30)
        text, at = outcome["error"]
        assert f"(pid {victim}) killed by signal 9 (SIGKILL) while serving this request" in text, text
        assert at - killed_at < 1.0, f"the stream ended {at - killed_at:.2f} s after the worker died"
    assert our_leftovers() == {"processes": [], "segments": [], "folders": []}


@pytest.fixture
def server_without_our_backend(tmp_path):
    """A bare tritonserver of the bundled tree whose backend directory holds Triton's Python backend only."""
    from pytriton.server.distribution import find_distribution, libpython_dir, python_version_tag

    distribution = find_distribution()
    python = tmp_path / "backends" / "python"
    python.mkdir(parents=True)
    for name in ("libtriton_python.so", "triton_python_backend_utils.py"):
        (python / name).symlink_to(distribution.python_backend / name)
    stub = distribution.root / "python_backend_stubs" / python_version_tag() / "triton_python_backend_stub"
    (python / "triton_python_backend_stub").write_bytes(stub.read_bytes())
    (python / "triton_python_backend_stub").chmod(0o755)
    (tmp_path / "models").mkdir()
    http, grpc, metrics = free_ports(3)
    env = dict(os.environ, LD_LIBRARY_PATH=os.pathsep.join([str(libpython_dir()), str(distribution.root / "lib")]))
    process = subprocess.Popen(
        [str(distribution.binary), f"--model-repository={tmp_path / 'models'}", "--model-control-mode=explicit",
         f"--backend-directory={tmp_path / 'backends'}", f"--http-port={http}", f"--grpc-port={grpc}",
         f"--metrics-port={metrics}"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert wait_until(lambda: http_status(f"http://127.0.0.1:{http}/v2/health/ready") == 200, 60.0)
        yield f"http://127.0.0.1:{http}"
    finally:
        process.terminate()
        process.wait(30)


def test_a_remote_server_without_pytritons_backend_serves_through_the_proxy_after_one_warning(
    server_without_our_backend, caplog
):
    with caplog.at_level(logging.WARNING, logger="pytriton.triton"):
        with RemoteTriton(server_without_our_backend) as remote:
            remote.bind("Double", double, X, Y, config=ModelConfig(max_batch_size=8))
            remote.bind("Double2", double, X, Y, config=ModelConfig(max_batch_size=8))
            for model in ("Double", "Double2"):
                with ModelClient(server_without_our_backend, model) as client:
                    np.testing.assert_array_equal(client.infer_sample(x=np.ones(2, np.float32))["y"], [2.0, 2.0])
                    assert client.model_config.backend == "python"
    warnings = [record.getMessage() for record in caplog.records if "has no pytriton backend" in record.getMessage()]
    assert len(warnings) == 1, warnings
    assert "python -m pytriton backend-path" in warnings[0] and "unable to find backend library" in warnings[0]


def test_pytriton_backend_path_prints_the_library_a_server_image_needs():
    printed = subprocess.run([sys.executable, "-m", "pytriton", "backend-path"], capture_output=True, text=True,
                             check=True).stdout.strip()
    assert printed.endswith("libtriton_pytriton.so") and os.path.isfile(printed)
