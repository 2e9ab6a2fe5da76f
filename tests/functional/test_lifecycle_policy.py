"""The published library's lifecycle, with the real server: start on entering ``with Triton()``,
`TritonLifecyclePolicy`, `connect`/`is_connected`, and `RemoteTriton` without a shared folder.

The remote tests serve from a `Triton` in another process, as the published documentation
describes: the binding process knows only the URL and the access token.
"""

from __future__ import annotations

import contextlib
import ctypes
import signal
import subprocess
import sys
import textwrap
import time
import urllib.error
import urllib.request
from typing import Iterator

import numpy as np
import pytest
from support import free_ports, server_config

from pytriton.client import ModelClient
from pytriton.decorators import batch
from pytriton.exceptions import (
    PyTritonBadParameterError,
    PyTritonInvalidOperationError,
    PyTritonServerError,
)
from pytriton.model_config import ModelConfig, Tensor
from pytriton.triton import RemoteTriton, Triton, TritonLifecyclePolicy

pytestmark = pytest.mark.functional

F32 = {
    "inputs": [Tensor(dtype=np.float32, shape=(-1,))],
    "outputs": [Tensor(dtype=np.float32, shape=(-1,))],
    "config": ModelConfig(max_batch_size=8),
}
TOKEN = "lifecycle-test-token"


def _adder(value: float):
    @batch
    def add(INPUT_1):
        return {"OUTPUT_1": INPUT_1 + np.float32(value)}

    return add


def _status(url: str, path: str) -> int:
    try:
        with urllib.request.urlopen(f"{url}{path}", timeout=5) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code
    except OSError:
        return -1


def _infer(url: str, model: str, value: float) -> float:
    with ModelClient(url, model, init_timeout_s=10, inference_timeout_s=20) as client:
        return float(client.infer_sample(np.array([value], np.float32))["OUTPUT_1"][0])


# --- start on entering `with` ----------------------------------------------------------------------


def test_entering_with_starts_the_server_and_each_bind_serves_at_once_without_run():
    config = server_config()
    url = f"http://127.0.0.1:{config.http_port}"
    with Triton(config=config) as triton:
        assert triton.is_connected()
        assert _status(url, "/v2/health/live") == 200  # serving,
        assert _status(url, "/v2/health/ready") == 400  # but not ready without a model (the readiness gate)
        triton.bind("AddOne", _adder(1.0), **F32)
        assert _infer(url, "AddOne", 1.0) == 2.0  # no run(): the bind loaded it
        triton.bind("AddTwo", _adder(2.0), **F32)
        assert _infer(url, "AddTwo", 1.0) == 3.0
        triton.run()  # opens the gate: ready now that the script's models are
        assert _status(url, "/v2/health/ready") == 200
        assert triton.is_connected() and _infer(url, "AddOne", 5.0) == 6.0
    assert not triton.is_connected()
    assert _status(url, "/v2/health/live") == -1


def test_launch_triton_on_startup_false_waits_for_run_and_loads_the_models_bound_before():
    config = server_config()
    url = f"http://127.0.0.1:{config.http_port}"
    policy = TritonLifecyclePolicy(launch_triton_on_startup=False, local_model_store=True)
    with Triton(config=config, triton_lifecycle_policy=policy) as triton:
        triton.bind("AddOne", _adder(1.0), **F32)
        assert not triton.is_connected()
        assert _status(url, "/v2/health/live") == -1  # nothing started yet
        triton.connect()  # the published name of run()
        assert triton.is_connected()
        assert _infer(url, "AddOne", 1.0) == 2.0


@contextlib.contextmanager
def _failing_load(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Within it, a model fails to load: its worker speaks another protocol than its proxy.

    (A failing warm-up fails a load too, but tritonserver 2.51 then crashes in 1 of 6 to 17 loads.)
    """
    with monkeypatch.context() as patch:
        patch.setattr("pytriton.ipc.protocol.PROTOCOL_VERSION", 99)
        yield


def test_a_model_that_fails_to_load_inside_with_is_unbound_and_the_others_go_on(monkeypatch):
    config = server_config()
    url = f"http://127.0.0.1:{config.http_port}"
    with Triton(config=config) as triton:
        triton.bind("Good", _adder(1.0), **F32)
        with _failing_load(monkeypatch), pytest.raises(PyTritonServerError, match="(?s)Broken.*protocol mismatch"):
            triton.bind("Broken", _adder(10.0), **F32)
        assert _status(url, "/v2/models/Broken/ready") != 200
        assert _infer(url, "Good", 1.0) == 2.0
        triton.bind("Broken", _adder(10.0), **F32)  # the name is free again
        assert _infer(url, "Broken", 1.0) == 11.0


def test_lifecycle_policy_arguments_are_checked():
    with pytest.raises(PyTritonBadParameterError, match="launch_triton_on_startup='yes' is invalid"):
        TritonLifecyclePolicy(launch_triton_on_startup="yes")  # type: ignore[arg-type]
    with pytest.raises(PyTritonBadParameterError, match="triton_lifecycle_policy=.* is invalid"):
        Triton(config=server_config(), triton_lifecycle_policy={"launch_triton_on_startup": False})  # type: ignore
    assert TritonLifecyclePolicy() == TritonLifecyclePolicy(launch_triton_on_startup=True, local_model_store=False)


# --- RemoteTriton without a shared folder ----------------------------------------------------------

SERVER = textwrap.dedent(
    """
    import sys
    from pytriton.triton import Triton, TritonConfig, TritonSecurityConfig

    http, grpc, metrics, token = sys.argv[1:5]
    config = TritonConfig(http_port=int(http), grpc_port=int(grpc), metrics_port=int(metrics), exit_timeout_secs=5)
    with Triton(config=config, security_config=TritonSecurityConfig(access_token=token)) as triton:
        import numpy as np
        from pytriton.decorators import batch
        from pytriton.model_config import ModelConfig, Tensor

        @batch
        def local(INPUT_1):
            return {"OUTPUT_1": INPUT_1 * 0}

        triton.bind("Local", local, inputs=[Tensor(dtype=np.float32, shape=(-1,))],
                    outputs=[Tensor(dtype=np.float32, shape=(-1,))], config=ModelConfig(max_batch_size=8))
        triton.serve()
    """
)


def _die_with_parent() -> None:
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


@contextlib.contextmanager
def _other_process_server() -> Iterator[dict]:
    """A `Triton` serving model 'Local' from another process; its URLs."""
    http, grpc, metrics = free_ports(3)
    process = subprocess.Popen([sys.executable, "-c", SERVER, str(http), str(grpc), str(metrics), TOKEN],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, preexec_fn=_die_with_parent)
    urls = {"http": f"http://127.0.0.1:{http}", "grpc": f"grpc://127.0.0.1:{grpc}"}
    try:
        deadline = time.monotonic() + 90
        while _status(urls["http"], "/v2/models/Local/ready") != 200:
            assert process.poll() is None, process.stderr.read().decode()[-3000:] if process.stderr else ""
            assert time.monotonic() < deadline, "the serving process did not get ready"
            time.sleep(0.2)
        yield urls
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            assert process.wait(timeout=60) == 0
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()


@pytest.fixture(scope="module")
def other_server() -> Iterator[dict]:
    with _other_process_server() as urls:
        yield urls


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_remote_triton_needs_only_the_url_and_token_and_unloads_on_close(other_server, protocol):
    url = other_server[protocol]
    http = other_server["http"]
    with RemoteTriton(url=url, access_token=TOKEN) as remote:
        assert remote.is_connected()
        remote.bind("Doubled", batch(lambda INPUT_1: {"OUTPUT_1": INPUT_1 * 2}), **F32)
        assert _infer(url, "Doubled", 4.0) == 8.0
        assert remote.is_alive()
    assert not remote.is_connected()
    assert _status(http, "/v2/models/Doubled/ready") != 200  # unloaded when its RemoteTriton closed
    assert _infer(http, "Local", 3.0) == 0.0  # the other process's model serves on


def test_remote_triton_binds_before_connect_and_loads_on_connect(other_server):
    remote = RemoteTriton(other_server["http"], access_token=TOKEN)
    try:
        remote.bind("Early", _adder(5.0), **F32)
        assert not remote.is_connected()
        assert _status(other_server["http"], "/v2/models/Early/ready") != 200
        remote.connect()
        assert remote.is_connected() and _infer(other_server["http"], "Early", 1.0) == 6.0
    finally:
        remote.stop()
    assert _status(other_server["http"], "/v2/models/Early/ready") != 200


def test_local_and_remote_models_of_one_name_are_refused_both_ways(other_server):
    url = other_server["http"]
    with RemoteTriton(url, access_token=TOKEN) as remote:
        with pytest.raises(PyTritonInvalidOperationError, match="already serves a model named 'Local'"):
            remote.bind("Local", _adder(1.0), **F32)
        assert _infer(url, "Local", 3.0) == 0.0  # untouched
        remote.bind("Mine", _adder(1.0), **F32)
        with RemoteTriton(url, access_token=TOKEN) as other:
            with pytest.raises(PyTritonInvalidOperationError, match="already serves a model named 'Mine'"):
                other.bind("Mine", _adder(100.0), **F32)
        assert _infer(url, "Mine", 1.0) == 2.0


def test_a_local_triton_refuses_a_name_a_remote_process_serves_on_it():
    config = server_config()
    url = f"http://127.0.0.1:{config.http_port}"
    with Triton(config=config) as triton:
        triton.run()  # the owner serves what other processes bind: ready without models of its own
        with RemoteTriton(url, access_token=triton.get_access_token()) as remote:
            remote.bind("Shared", _adder(1.0), **F32)
            with pytest.raises(PyTritonInvalidOperationError, match="'Shared' is already served"):
                triton.bind("Shared", _adder(100.0), **F32)
            assert _infer(url, "Shared", 1.0) == 2.0
        triton.bind("Shared", _adder(100.0), **F32)  # free once the remote process closed
        assert _infer(url, "Shared", 1.0) == 101.0


def test_remote_triton_without_the_token_is_refused_clearly(other_server):
    with RemoteTriton(other_server["http"]) as remote:
        with pytest.raises(PyTritonServerError, match="no access token was sent"):
            remote.bind("NoToken", _adder(1.0), **F32)
    port = free_ports(1)[0]
    with pytest.raises(PyTritonServerError, match=f"no tritonserver answers at http://127.0.0.1:{port}"):
        with RemoteTriton(f"http://127.0.0.1:{port}", connect_timeout_s=0.5):
            pass


def test_a_remote_model_that_fails_to_load_leaves_the_server_ready(other_server, monkeypatch):
    url = other_server["http"]
    with RemoteTriton(url, access_token=TOKEN) as remote:
        with _failing_load(monkeypatch), pytest.raises(PyTritonServerError,
                                                       match="(?s)RemoteBroken.*protocol mismatch"):
            remote.bind("RemoteBroken", _adder(1.0), **F32)
        # Triton keeps a failed model's record, which holds strict readiness down; it is cleared.
        assert _status(url, "/v2/health/ready") == 200
        assert _infer(url, "Local", 3.0) == 0.0
