"""RemoteTriton against a tritonserver the test starts with its own command line.

The server is not started through the library: the test writes the argv itself (binary, backend
directory, shared workspace, explicit model control), as a container entry point would. Callables
are bound from separate Python processes, and the server must outlive them.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import pathlib
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import urllib.error
import urllib.request
from typing import Iterator, List, Optional, Sequence

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from support import free_ports, shm_entries

from pytriton.client import ModelClient
from pytriton.client.exceptions import PyTritonClientInferenceServerError
from pytriton.decorators import batch
from pytriton.exceptions import (
    PyTritonBadParameterError,
    PyTritonInvalidOperationError,
    PyTritonServerError,
    PyTritonUnrecoverableError,
)
from pytriton.model_config import EnsembleStep, ModelConfig, Tensor
from pytriton.server.distribution import assemble_backends, find_distribution, server_environment
from pytriton.triton import RemoteTriton

pytestmark = pytest.mark.functional

F32 = {
    "inputs": [Tensor(dtype=np.float32, shape=(-1,))],
    "outputs": [Tensor(dtype=np.float32, shape=(-1,))],
    "config": ModelConfig(max_batch_size=8),
}
TOKEN = "remote-test-token"

# A binding process: binds one model to the server at argv[1], sharing the workspace argv[2], and
# serves until SIGTERM. argv[3] is the model name, argv[4] "add" (adds argv[5]) or "count" (streams).
BINDER = textwrap.dedent(
    """
    import sys
    import numpy as np
    from pytriton.decorators import batch
    from pytriton.model_config import EnsembleStep, ModelConfig, Tensor
    from pytriton.triton import RemoteTriton

    url, workspace, name, kind, value = sys.argv[1:6]

    @batch
    def add(INPUT_1):
        return {"OUTPUT_1": INPUT_1 + np.float32(value)}

    def count(requests):
        for step in range(int(value)):
            yield [{"OUTPUT_1": np.array([step], dtype=np.int32)} for _ in requests]

    with RemoteTriton(url, workspace=workspace) as triton:
        if kind == "add":
            triton.bind(name, add, inputs=[Tensor(dtype=np.float32, shape=(-1,))],
                        outputs=[Tensor(dtype=np.float32, shape=(-1,))], config=ModelConfig(max_batch_size=8))
        else:
            triton.bind(name, count, inputs=[Tensor(dtype=np.int32, shape=(1,))],
                        outputs=[Tensor(dtype=np.int32, shape=(1,))], config=ModelConfig(decoupled=True))
        triton.serve()
    """
)


def _die_with_parent() -> None:
    """In the child: SIGKILL it if the test process dies, so no server outlives a crashed run."""
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


class Server:
    """A tritonserver started from a hand-written command line, serving `<workspace>/models`."""

    def __init__(self, workspace: pathlib.Path, extra_flags: Sequence[str] = (), ports: Sequence[int] = ()) -> None:
        distribution = find_distribution()
        self.workspace = workspace
        (workspace / "models").mkdir(parents=True, exist_ok=True)
        self.http_port, self.grpc_port, metrics_port = ports or free_ports(3)
        self.url = f"http://127.0.0.1:{self.http_port}"
        self.grpc_url = f"grpc://127.0.0.1:{self.grpc_port}"
        backends = assemble_backends(distribution, pathlib.Path(tempfile.mkdtemp(prefix="ptr-backends-")))
        self._backends = backends
        self.argv = [
            str(distribution.binary),
            f"--model-repository={workspace / 'models'}",
            "--model-control-mode=explicit",
            f"--backend-directory={backends}",
            f"--backend-config=python,shm-region-prefix-name=remote-test-{os.getpid()}-{self.http_port}",
            f"--http-port={self.http_port}",
            f"--grpc-port={self.grpc_port}",
            f"--metrics-port={metrics_port}",
            "--exit-timeout-secs=5",
            *extra_flags,
        ]
        self.log = workspace.parent / f"{workspace.name}-server.log"
        with open(self.log, "wb") as log:
            self.process = subprocess.Popen(self.argv, env=server_environment(distribution), stdout=log,
                                            stderr=subprocess.STDOUT, preexec_fn=_die_with_parent)
        if not _wait(lambda: self.status("/v2/health/ready") == 200 or self.process.poll() is not None, 60):
            self.stop()
            raise RuntimeError(f"tritonserver did not start:\n{self.log.read_text()[-3000:]}")
        if self.process.poll() is not None:
            raise RuntimeError(f"tritonserver exited with {self.process.returncode}:\n{self.log.read_text()[-3000:]}")

    def status(self, path: str, method: str = "GET", token: Optional[str] = None) -> int:
        return self.call(path, method, token)[0]

    def call(self, path: str, method: str = "GET", token: Optional[str] = None) -> tuple:
        headers = {"triton-access-token": token} if token else {}
        data = b"{}" if method == "POST" else None
        request = urllib.request.Request(self.url + path, data=data, headers=headers, method=method)
        try:
            with urllib.request.urlopen(request, timeout=5) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as error:
            return error.code, error.read()
        except OSError:
            return 0, b""

    def index(self, token: Optional[str] = None) -> dict:
        """Model name -> state ("" for a folder never loaded) of the server's repository index."""
        status, body = self.call("/v2/repository/index", "POST", token)
        assert status == 200, body
        return {entry["name"]: entry.get("state", "") for entry in json.loads(body)}

    def is_up(self) -> bool:
        return self.process.poll() is None and self.status("/v2/health/live") == 200

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self._backends, ignore_errors=True)


def _wait(condition, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


@contextlib.contextmanager
def _shared_workspace() -> Iterator[pathlib.Path]:
    """A short workspace path (the session's socket paths must stay under the Unix limit)."""
    root = pathlib.Path(tempfile.mkdtemp(prefix="ptr-"))
    try:
        yield root / "ws"
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    with _shared_workspace() as workspace:
        server = Server(workspace)
        try:
            yield server
        finally:
            server.stop()


class Binder:
    """A separate Python process binding one model through RemoteTriton and serving it."""

    def __init__(self, server: Server, name: str, kind: str = "add", value: str = "1", url: str = "") -> None:
        self.server, self.name = server, name
        self.output = server.workspace.parent / f"binder-{name}.log"
        with open(self.output, "wb") as output:
            self.process = subprocess.Popen(
                [sys.executable, "-c", BINDER, url or server.url, str(server.workspace), name, kind, value],
                stdout=output, stderr=subprocess.STDOUT, preexec_fn=_die_with_parent,
            )
        ready = _wait(lambda: self.server.status(f"/v2/models/{name}/ready") == 200
                      or self.process.poll() is not None, 90)
        if not ready or self.process.poll() is not None:
            self.kill()
            raise AssertionError(f"binding process for '{name}' did not serve:\n{self.output.read_text()[-3000:]}")

    @property
    def session_folders(self) -> List[pathlib.Path]:
        return sorted((self.server.workspace / "sockets").glob(f"pytriton-{self.process.pid}-*"))

    def terminate(self) -> int:
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=90)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def close(self) -> None:
        """Stop it politely (it unloads its model), or kill it."""
        if self.process.poll() is None:
            try:
                self.terminate()
            except subprocess.TimeoutExpired:
                self.kill()


@contextlib.contextmanager
def binding(server: Server, name: str, **kwargs) -> Iterator[Binder]:
    binder = Binder(server, name, **kwargs)
    try:
        yield binder
    finally:
        binder.close()


def _add_one(server_url: str, name: str, value: float) -> float:
    with ModelClient(server_url, name) as client:
        return float(client.infer_sample(np.array([value], dtype=np.float32))["OUTPUT_1"][0])


def test_a_separate_process_serves_through_a_server_it_did_not_start(server):
    with binding(server, "Remote", value="10") as binder:
        pid = binder.process.pid
        assert _add_one(server.url, "Remote", 1.0) == 11.0
        assert _add_one(server.grpc_url, "Remote", 2.0) == 12.0
        folder = server.workspace / "models" / "Remote"
        [session] = binder.session_folders
        assert (folder / "pytriton-owner").read_text() == session.name
        assert (folder / "1" / "model.py").is_file() and (folder / "config.pbtxt").is_file()
        assert any(p.is_socket() for p in session.iterdir())
        with ModelClient(server.url, "Remote") as client:  # large enough to travel in shared memory
            big = client.infer_sample(np.zeros(100_000, dtype=np.float32))["OUTPUT_1"]
        assert big.shape == (100_000,) and (big == 10.0).all()
        assert shm_entries(f"pytriton-{pid}-")  # the worker's output arena, and the proxy's input arena

        assert binder.terminate() == 0

        assert server.index().get("Remote") is None  # unloaded, and its folder is gone
        assert server.status("/v2/models/Remote/ready") != 200
        assert not folder.exists()
        assert binder.session_folders == []
        assert shm_entries(f"pytriton-{pid}-") == []
        assert server.is_up()


def test_serve_says_what_it_serves_through_which_server(server):
    """The start line `Triton.serve()` prints (pytriton.server.announce), said by a `RemoteTriton` too."""
    with binding(server, "Announced", value="3") as binder:
        line = "pytriton: serving Announced (version 1) through the tritonserver at " + server.url
        assert _wait(lambda: line in binder.output.read_text(), 30), binder.output.read_text()[-3000:]
        said = [text for text in binder.output.read_text().splitlines() if text.startswith("pytriton: serving")]
        assert said == [f"{line}; Ctrl+C or SIGTERM unloads them (the server runs on)"], said


def test_two_processes_share_one_server_and_one_workspace(server):
    with binding(server, "Plus1", value="1") as first, binding(server, "Plus2", value="2") as second:
        assert (_add_one(server.url, "Plus1", 1.0), _add_one(server.url, "Plus2", 1.0)) == (2.0, 3.0)
        assert first.session_folders[0].name != second.session_folders[0].name
        assert first.terminate() == 0
        assert _add_one(server.url, "Plus2", 5.0) == 7.0  # the other process's model is untouched
        assert set(server.index()) == {"Plus2"}
        assert second.terminate() == 0
    assert server.index() == {}
    assert server.is_up()


def test_a_name_already_in_the_repository_is_refused(server):
    with binding(server, "Taken"):
        with RemoteTriton(server.url, workspace=server.workspace) as other:
            with pytest.raises(PyTritonInvalidOperationError, match="model 'Taken' is already in the model repository"):
                other.bind("Taken", batch(lambda INPUT_1: {"OUTPUT_1": INPUT_1}), **F32)
            foreign = server.workspace / "models" / "Handmade"
            foreign.mkdir()
            try:
                with pytest.raises(PyTritonInvalidOperationError, match="no pytriton session owns it"):
                    other.bind("Handmade", batch(lambda INPUT_1: {"OUTPUT_1": INPUT_1}), **F32)
            finally:
                foreign.rmdir()
        assert _add_one(server.url, "Taken", 1.0) == 2.0  # the refusals changed nothing


def test_a_model_served_from_another_repository_is_refused():
    with _shared_workspace() as workspace:
        other = workspace.parent / "other"
        model = other / "Elsewhere" / "1"
        model.mkdir(parents=True)
        (model / "model.py").write_text(textwrap.dedent(
            """
            import triton_python_backend_utils as pb_utils

            class TritonPythonModel:
                def execute(self, requests):
                    return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", r.inputs()[0].as_numpy())])
                            for r in requests]
            """))  # fmt: skip
        (other / "Elsewhere" / "config.pbtxt").write_text(
            'backend: "python"\ninput [{name: "IN" data_type: TYPE_FP32 dims: [1]}]\n'
            'output [{name: "OUT" data_type: TYPE_FP32 dims: [1]}]\n'
        )
        server = Server(workspace, [f"--model-repository={other}", "--load-model=Elsewhere"])
        try:
            assert server.index()["Elsewhere"] == "READY"
            with RemoteTriton(server.url, workspace=workspace) as triton:
                with pytest.raises(PyTritonInvalidOperationError, match="already serves a model named 'Elsewhere'"):
                    triton.bind("Elsewhere", batch(lambda INPUT_1: {"OUTPUT_1": INPUT_1}), **F32)
                assert not (workspace / "models" / "Elsewhere").exists()
        finally:
            server.stop()


def test_a_wrong_workspace_is_refused_clearly(server, tmp_path):
    with pytest.raises(PyTritonBadParameterError, match="--model-repository=.*/missing/models --model-control-mode"):
        RemoteTriton(server.url, workspace=tmp_path / "missing")

    with _shared_workspace() as unserved:
        (unserved / "models").mkdir(parents=True)
        with RemoteTriton(server.url, workspace=unserved) as triton:
            with pytest.raises(PyTritonServerError, match=rf"does not serve .*Start it with "
                                                          rf"--model-repository={unserved}/models"):
                triton.bind("Lost", batch(lambda INPUT_1: {"OUTPUT_1": INPUT_1}), **F32)
            assert list((unserved / "models").iterdir()) == []
        assert list((unserved / "sockets").iterdir()) == []
    assert server.index() == {}


def test_url_and_token_are_checked(server):
    for url in ("ftp://127.0.0.1:8000", "http://127.0.0.1:8000/v2", "http://127.0.0.1:port", ""):
        with pytest.raises(PyTritonBadParameterError, match="url="):
            RemoteTriton(url, workspace=server.workspace)
    with pytest.raises(PyTritonBadParameterError, match="access_token="):
        RemoteTriton(server.url, workspace=server.workspace, access_token="")
    with pytest.raises(PyTritonBadParameterError, match="connect_timeout_s="):
        RemoteTriton(server.url, workspace=server.workspace, connect_timeout_s=0)
    port = free_ports(1)[0]
    with pytest.raises(PyTritonServerError, match=rf"no tritonserver answers at http://127.0.0.1:{port} "
                                                  rf"\(waited 0.5 s\); start it first, with --model-repository="):
        with RemoteTriton(f"http://127.0.0.1:{port}", workspace=server.workspace, connect_timeout_s=0.5):
            pass  # entering connects


def test_an_ensemble_of_remote_models_with_versions_through_a_shared_folder(server):
    double = batch(lambda INPUT_1: {"OUTPUT_1": INPUT_1 * 2})
    plus = batch(lambda INPUT_1: {"OUTPUT_1": INPUT_1 + 0.5})
    with RemoteTriton(server.url, workspace=server.workspace) as triton:
        triton.bind("Double", double, model_version=2, **F32)
        triton.bind("Plus", plus, **F32)
        triton.bind_ensemble(
            "DoubleThenPlus",
            [EnsembleStep("Double", outputs={"OUTPUT_1": "doubled"}, model_version=2),
             EnsembleStep("Plus", inputs={"INPUT_1": "doubled"})],
            model_version=4,
        )
        with ModelClient(server.url, "DoubleThenPlus", model_version="4") as client:
            result = client.infer_sample(INPUT_1=np.array([1.0, 3.0], np.float32))
        assert result["OUTPUT_1"].tolist() == [2.5, 6.5]
    assert server.status("/v2/models/DoubleThenPlus/ready") != 200  # unloaded with the others


def test_is_alive_before_connect_says_whether_the_server_at_the_url_is_live(server):
    # As the published RemoteTriton: a caller may poll is_alive() before it connects.
    port = free_ports(1)[0]
    for url, alive in ((server.url, True), (server.grpc_url, True), (f"http://127.0.0.1:{port}", False)):
        triton = RemoteTriton(url, workspace=server.workspace)
        try:
            assert triton.is_alive() is alive, url
        finally:
            assert triton.stop() is False  # never connected; its session folder goes all the same
    assert not list((server.workspace / "sockets").glob(f"pytriton-{os.getpid()}-*"))


def test_a_binding_process_started_before_the_server_waits_for_it():
    """Containers of a pod start together: the binding process may come up first."""
    with _shared_workspace() as workspace:
        (workspace / "models").mkdir(parents=True)
        ports = free_ports(3)
        output = workspace.parent / "early.log"
        with open(output, "wb") as log:
            early = subprocess.Popen(
                [sys.executable, "-c", BINDER, f"http://127.0.0.1:{ports[0]}", str(workspace), "Early", "add", "1"],
                stdout=log, stderr=subprocess.STDOUT, preexec_fn=_die_with_parent,
            )
        server = None
        try:
            server = Server(workspace, ports=ports)
            assert _wait(lambda: server.status("/v2/models/Early/ready") == 200 or early.poll() is not None, 90), \
                output.read_text()
            assert _add_one(server.url, "Early", 1.0) == 2.0
            early.send_signal(signal.SIGTERM)
            assert early.wait(timeout=90) == 0
            assert server.index() == {}
        finally:
            if early.poll() is None:
                early.kill()
                early.wait()
            if server is not None:
                server.stop()


def test_bind_after_run_loads_at_once_over_grpc_with_an_access_token():
    restrict = [
        f"--http-restricted-api=model-repository:triton-access-token={TOKEN}",
        f"--grpc-restricted-protocol=model-repository:triton-access-token={TOKEN}",
    ]
    with _shared_workspace() as workspace:
        server = Server(workspace, restrict)
        try:
            with RemoteTriton(server.url, workspace=workspace) as triton:
                with pytest.raises(PyTritonServerError, match="no access token was sent"):
                    triton.bind("Guarded", batch(lambda INPUT_1: {"OUTPUT_1": INPUT_1}), **F32)
            with RemoteTriton(server.grpc_url, workspace=workspace, access_token=TOKEN) as triton:
                triton.run()
                assert triton.is_alive()
                triton.bind("Guarded", batch(lambda INPUT_1: {"OUTPUT_1": INPUT_1 * 3}), **F32)
                assert server.status("/v2/models/Guarded/ready") == 200
                with ModelClient(server.grpc_url, "Guarded") as client:
                    assert client.infer_sample(np.array([2.0], np.float32))["OUTPUT_1"][0] == 6.0
            assert not triton.is_alive()
            assert server.index(TOKEN) == {}
            assert server.is_up()
        finally:
            server.stop()


def test_what_a_killed_binding_process_left_is_swept_by_the_next_one(server):
    binder = Binder(server, "Orphan")
    pid = binder.process.pid
    with ModelClient(server.url, "Orphan") as client:  # large enough to leave shared-memory arenas
        client.infer_sample(np.zeros(100_000, dtype=np.float32))
    binder.kill()  # SIGKILL: nothing in it cleans up
    assert (server.workspace / "models" / "Orphan").is_dir()
    assert binder.session_folders and shm_entries(f"pytriton-{pid}-")
    assert server.index()["Orphan"] == "READY"

    with RemoteTriton(server.url, workspace=server.workspace) as triton:
        triton.bind("Orphan", batch(lambda INPUT_1: {"OUTPUT_1": INPUT_1 + 100}), **F32)  # the name is free again
        assert binder.session_folders == []
        assert shm_entries(f"pytriton-{pid}-") == []
        triton.run()
        assert _add_one(server.url, "Orphan", 1.0) == 101.0
    assert server.index() == {}


def test_a_decoupled_model_streams_through_a_remote_binding(server):
    with binding(server, "Count", kind="count", value="4") as binder:
        responses: queue.Queue = queue.Queue()
        client = grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
        try:
            client.start_stream(callback=lambda result, error: responses.put((result, error)))
            request = grpcclient.InferInput("INPUT_1", [1, 1], "INT32")
            request.set_data_from_numpy(np.array([[0]], dtype=np.int32))
            client.async_stream_infer("Count", [request], enable_empty_final_response=True)
            steps = []
            while True:
                result, error = responses.get(timeout=30)
                assert error is None, str(error)
                if result.get_response().parameters["triton_final_response"].bool_param:
                    break
                steps.append(int(result.as_numpy("OUTPUT_1").ravel()[0]))
            client.stop_stream()
        finally:
            client.close()
        assert steps == [0, 1, 2, 3]
        assert binder.terminate() == 0
    assert server.index() == {}
    assert server.is_up()


def test_serve_returns_and_cleans_up_when_the_server_goes_away():
    with _shared_workspace() as workspace:
        server = Server(workspace)
        try:
            with binding(server, "Abandoned") as binder:
                [session] = binder.session_folders
                server.stop()
                assert binder.process.wait(timeout=60) == 0  # serve() returned: its model is no longer served
                assert not (workspace / "models" / "Abandoned").exists()
                assert not session.exists()
                assert shm_entries(f"pytriton-{binder.process.pid}-") == []
        finally:
            server.stop()


def test_an_unrecoverable_error_unloads_the_model_and_spares_the_server(server):
    @batch
    def broken(INPUT_1):
        raise PyTritonUnrecoverableError("the GPU fell off")

    with RemoteTriton(server.url, workspace=server.workspace) as triton:
        triton.bind("Broken", broken, **F32)
        triton.run()
        with ModelClient(server.url, "Broken") as client:
            with pytest.raises(PyTritonClientInferenceServerError, match="the GPU fell off"):
                client.infer_sample(np.array([1.0], dtype=np.float32))
        assert _wait(lambda: not triton.is_alive(), 30)
        assert _wait(lambda: "Broken" not in server.index(), 30)
    assert server.is_up()
