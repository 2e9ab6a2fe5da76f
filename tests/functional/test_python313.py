"""Python 3.13 serves on pytriton's backend: no stub, no NumPy 1.x, no shared libpython needed.

Triton 2.51's Python-backend stubs need NumPy 1.x, which has no build for Python 3.13, so the
proxy path cannot serve there; pytriton's own backend hands the batches to the worker in the
user's process, whatever its Python. This test runs a serving script under the machine's
Python 3.13 (pyenv's, or ``PYTRITON_TEST_PYTHON313``) in a virtual environment of its own
(kept in the cache, keyed by the dependencies), with this checkout on its path.
"""

from __future__ import annotations

import glob
import hashlib
import os
import pathlib
import shutil
import subprocess
import textwrap

import numpy as np
import pytest
from support import free_ports, http_status, served_backend, wait_until

from pytriton.client import ModelClient

pytestmark = pytest.mark.functional

REPO = pathlib.Path(__file__).resolve().parents[2]
DEPENDENCIES = ("numpy", "tritonclient[http,grpc]", "pyzmq", "wrapt", "typing_inspect", "sh", "psutil")


def _python313() -> str:
    configured = os.environ.get("PYTRITON_TEST_PYTHON313")
    if configured:
        return configured
    found = sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.13*/bin/python3.13"))) or \
        [path for path in (shutil.which("python3.13"),) if path]
    return found[-1] if found else ""


PYTHON313 = _python313()


def _environment() -> pathlib.Path:
    """A virtual environment of Python 3.13 with pytriton's dependencies (made once, then reused), at
    the lock's versions (constraints.txt), so that a release upstream cannot change what it tests."""
    lock = (REPO / "constraints.txt").read_text()
    key = hashlib.sha256("\n".join((PYTHON313, *DEPENDENCIES, lock)).encode()).hexdigest()[:12]
    cache = pathlib.Path(os.environ.get("PYTRITON_CACHE_DIR") or os.path.expanduser("~/.cache/pytriton"))
    venv = cache / "test-venvs" / f"py313-{key}"
    python = venv / "bin" / "python"
    if not (venv / ".complete").is_file():
        shutil.rmtree(venv, ignore_errors=True)
        subprocess.run([PYTHON313, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                        "--constraint", str(REPO / "constraints.txt"), *DEPENDENCIES],
                       check=True, timeout=600)
        (venv / ".complete").write_text("ok\n")
    return python


SCRIPT = textwrap.dedent("""
    import sys
    import numpy as np
    from pytriton.decorators import batch
    from pytriton.exceptions import PyTritonServerStartupError
    from pytriton.model_config import ModelConfig, Tensor
    from pytriton.triton import Triton, TritonConfig

    http, grpc, metrics = (int(port) for port in sys.argv[1:4])
    try:
        Triton(config=TritonConfig(model_backend="python", http_port=http, grpc_port=grpc,
                                   metrics_port=metrics)).run()
    except PyTritonServerStartupError as exc:
        print("proxy refused:", exc, flush=True)

    @batch
    def scale(x):
        return {"y": x * 10, "version": np.full((len(x), 1), sys.version_info[1], np.int64)}

    config = TritonConfig(http_port=http, grpc_port=grpc, metrics_port=metrics)
    with Triton(config=config) as triton:
        # A model whose load fails (its worker speaks another protocol) must not leave the
        # server unready: the placeholder that clears Triton's record of it needs no stub.
        import pytriton.ipc.protocol as protocol
        real, protocol.PROTOCOL_VERSION = protocol.PROTOCOL_VERSION, 99
        try:
            triton.bind("Broken", scale, [Tensor(name="x", dtype=np.float32, shape=(-1,))],
                        [Tensor(name="y", dtype=np.float32, shape=(-1,))], config=ModelConfig(max_batch_size=8))
        except Exception as exc:
            print("broken refused:", type(exc).__name__, flush=True)
        protocol.PROTOCOL_VERSION = real
        triton.bind("Scale", scale, [Tensor(name="x", dtype=np.float32, shape=(-1,))],
                    [Tensor(name="y", dtype=np.float32, shape=(-1,)),
                     Tensor(name="version", dtype=np.int64, shape=(1,))],
                    config=ModelConfig(max_batch_size=8))
        print("serving", flush=True)
        triton.serve()
""")


@pytest.mark.skipif(not PYTHON313, reason="no Python 3.13 on this machine (set PYTRITON_TEST_PYTHON313)")
@pytest.mark.skipif(served_backend() != "pytriton", reason="needs pytriton's backend (built with a C compiler)")
def test_a_python_313_process_serves_through_pytritons_backend(tmp_path):
    python = _environment()
    script = tmp_path / "serve313.py"
    script.write_text(SCRIPT)
    http, grpc, metrics = free_ports(3)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    log = tmp_path / "serve313.log"
    with open(log, "w") as output:
        process = subprocess.Popen([str(python), str(script), str(http), str(grpc), str(metrics)], env=env,
                                   stdout=output, stderr=subprocess.STDOUT)
    try:
        for url in (f"http://127.0.0.1:{http}", f"grpc://127.0.0.1:{grpc}"):
            with ModelClient(url, "Scale", init_timeout_s=120) as client:
                result = client.infer_sample(x=np.array([1.5, -2.0], np.float32))
                np.testing.assert_array_equal(result["y"], [15.0, -20.0])
                assert int(result["version"][0]) == 13
                assert client.model_config.backend == "pytriton"
        ready = f"http://127.0.0.1:{http}/v2/health/ready"
        assert wait_until(lambda: http_status(ready) == 200, 30.0, 0.2), log.read_text()
    finally:
        process.terminate()
        code = process.wait(60)
    text = log.read_text()
    assert code == 0, text
    assert "proxy refused:" in text and "NumPy" in text, text  # the stub cannot run on 3.13: said, not served
    assert "NumPy 1.x has no release for Python 3.13" in text and "numpy<2" not in text, text  # no hint to a dead end
    assert "broken refused: PyTritonServerError" in text, text



@pytest.mark.skipif(not PYTHON313, reason="no Python 3.13 on this machine (set PYTRITON_TEST_PYTHON313)")
@pytest.mark.skipif(served_backend() != "pytriton", reason="needs pytriton's backend (built with a C compiler)")
def test_pytriton_check_on_python_313_warns_of_nothing_and_says_what_only_the_proxy_path_needs():
    python = _environment()
    env = dict(os.environ, PYTHONPATH=str(REPO))
    env.pop("PYTRITON_TRITON_CONFIG_MODEL_BACKEND", None)
    done = subprocess.run([str(python), "-m", "pytriton", "check", "--build"], env=env, capture_output=True,
                          text=True, timeout=180, check=False)
    lines = done.stdout.splitlines()
    assert done.returncode == 0, done.stdout + done.stderr
    assert [line for line in lines if line.startswith(("WARN", "FAIL"))] == [], done.stdout
    info = {line[6:].split(":")[0]: line for line in lines if line.startswith("INFO")}
    assert sorted(info) == ["stub libraries", "stub numpy"], done.stdout
    for line in info.values():
        assert "pytriton's own backend serves here and runs no Python-backend stub; only the proxy path" in line
        assert "fix:" not in line and "numpy<2" not in line
    assert "the server's own copy of libpython" in info["stub libraries"]
    assert "no release for Python 3.13" in info["stub numpy"]
    assert lines[-1] == "pytriton check: 6 PASS, 2 INFO", done.stdout
    # With the proxy path chosen, the same facts fail the check: that path cannot serve here.
    env["PYTRITON_TRITON_CONFIG_MODEL_BACKEND"] = "python"
    chosen = subprocess.run([str(python), "-m", "pytriton", "check", "--build"], env=env, capture_output=True,
                            text=True, timeout=180, check=False)
    assert chosen.returncode == 1, chosen.stdout
    assert [line[6:].split(":")[0] for line in chosen.stdout.splitlines() if line.startswith("FAIL")] == [
        "stub libraries", "stub numpy"], chosen.stdout
