"""A throwaway tritonserver for developing the client against a real server.

Writes a model repository of raw Python-backend models (no pytriton server side involved, so
the client can be checked on its own), starts tritonserver on it, waits for readiness against
a monotonic deadline, and stops it politely then forcefully. Shared-memory regions created by
the Python backend carry the ``shm_prefix`` and are swept on stop.

Triton 2.51's Python backend stub is built against numpy 1.x: with numpy 2.x importable by the
stub, ``pb_utils.Tensor(name, array)`` sends empty outputs and ``as_numpy()`` reads wrong data.
The stub's interpreter is isolated (it ignores PYTHONPATH), so each model.py starts with a
prelude that swaps in a numpy 1.x from ``stub_numpy_dir`` before ``triton_python_backend_utils``
first hands an array to the C++ side (see ``dev_check.py --help``).
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

_PRELUDE = """
import sys

sys.path.insert(0, {numpy_dir!r})
for _name in [m for m in sys.modules if m == "numpy" or m.startswith("numpy.")]:
    del sys.modules[_name]
import numpy  # noqa: E402
import triton_python_backend_utils  # noqa: E402

triton_python_backend_utils.np = numpy
"""

_IDENTITY = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            outputs = []
            for name_in, name_out in {pairs}:
                value = pb_utils.get_input_tensor_by_name(request, name_in).as_numpy()
                outputs.append(pb_utils.Tensor(name_out, value))
            responses.append(pb_utils.InferenceResponse(outputs))
        return responses
"""

_ADD_SUB = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "INPUT_A").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "INPUT_B").as_numpy()
            responses.append(pb_utils.InferenceResponse(
                [pb_utils.Tensor("SUM", a + b), pb_utils.Tensor("DIFF", a - b)]))
        return responses
"""

_SLOW = """
import time
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        time.sleep(2.0)
        return [
            pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUTPUT_1", pb_utils.get_input_tensor_by_name(r, "INPUT_1").as_numpy())])
            for r in requests
        ]
"""

_MODELS: dict[str, tuple[str, str]] = {
    # name: (config.pbtxt body, model.py)
    "Batch2": (
        "max_batch_size: 2\n"
        'input [{ name: "INPUT_1" data_type: TYPE_INT32 dims: [1] }]\n'
        'output [{ name: "OUTPUT_1" data_type: TYPE_INT32 dims: [1] }]\n',
        _IDENTITY.format(pairs=[("INPUT_1", "OUTPUT_1")]),
    ),
    "IdentityBytes": (
        "max_batch_size: 8\n"
        'input [{ name: "INPUT_1" data_type: TYPE_STRING dims: [-1] }]\n'
        'output [{ name: "OUTPUT_1" data_type: TYPE_STRING dims: [-1] }]\n',
        _IDENTITY.format(pairs=[("INPUT_1", "OUTPUT_1")]),
    ),
    "AddSub": (
        "max_batch_size: 0\n"
        'input [{ name: "INPUT_A" data_type: TYPE_FP32 dims: [-1] },'
        ' { name: "INPUT_B" data_type: TYPE_FP32 dims: [-1] }]\n'
        'output [{ name: "SUM" data_type: TYPE_FP32 dims: [-1] },'
        ' { name: "DIFF" data_type: TYPE_FP32 dims: [-1] }]\n',
        _ADD_SUB,
    ),
    "Slow": (
        "max_batch_size: 4\n"
        'input [{ name: "INPUT_1" data_type: TYPE_FP32 dims: [1] }]\n'
        'output [{ name: "OUTPUT_1" data_type: TYPE_FP32 dims: [1] }]\n'
        "instance_group [{ count: 2 kind: KIND_CPU }]\n",
        _SLOW,
    ),
}


def write_repository(
    repo: pathlib.Path, stub_numpy_dir: str | None = None, models: Mapping[str, tuple[str, str]] | None = None
) -> list[str]:
    """Write the dev models (or ``models``: name -> (config.pbtxt body, model.py)) into ``repo``; return their names."""
    models = _MODELS if models is None else models
    prelude = _PRELUDE.format(numpy_dir=stub_numpy_dir) if stub_numpy_dir else ""
    for name, (config, source) in models.items():
        (repo / name / "1").mkdir(parents=True, exist_ok=True)
        (repo / name / "config.pbtxt").write_text(f'name: "{name}"\nbackend: "python"\n{config}')
        (repo / name / "1" / "model.py").write_text(prelude + source)
    return list(models)


@dataclass(frozen=True)
class DevServer:
    """Where a started dev server listens."""

    http_port: int
    grpc_port: int

    @property
    def http_url(self) -> str:
        return f"http://localhost:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        return f"grpc://localhost:{self.grpc_port}"


def _sweep_shm(prefix: str) -> None:
    for entry in pathlib.Path("/dev/shm").glob(f"{prefix}*"):
        with contextlib.suppress(OSError):
            entry.unlink()


def _wait_ready(http_port: int, process: subprocess.Popen, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    url = f"http://localhost:{http_port}/v2/health/ready"
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"tritonserver exited early with code {process.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=max(0.1, min(1.0, deadline - time.monotonic()))) as resp:
                if resp.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.2)
    raise TimeoutError(f"tritonserver not ready within {timeout_s} s")


@dataclass(frozen=True)
class ServerFiles:
    """The files a dev server runs from."""

    binary: pathlib.Path
    backend_directory: pathlib.Path
    library_path: str  # LD_LIBRARY_PATH: libpython first, then the server's own libraries
    stub_numpy_dir: str | None  # numpy 1.x for the stub, swapped in by each model's prelude


def hand_made_files(root: pathlib.Path, libpython_dir: str, stub_numpy_dir: str | None) -> ServerFiles:
    """A server tree laid out by hand (stub beside ``libtriton_python.so``), e.g. ``/tmp/ts``."""
    library_path = f"{libpython_dir}:{root / 'lib'}"
    return ServerFiles(root / "bin" / "tritonserver", root / "backends", library_path, stub_numpy_dir)


def bundled_files(workspace: pathlib.Path) -> ServerFiles:
    """The server bundled in ``pytriton/tritonserver``, with a backend folder for this Python's stub.

    Only pytriton's file lookup is used (``pytriton.server.distribution``), not its server side:
    the models stay raw Python-backend models.
    """
    from pytriton.server.distribution import assemble_backends, find_distribution, server_environment

    distribution = find_distribution()
    backends = assemble_backends(distribution, workspace / "backends")
    env = server_environment(distribution, base={})
    stub_numpy = str(distribution.stub_python_path) if distribution.stub_python_path else None
    return ServerFiles(distribution.binary, backends, env["LD_LIBRARY_PATH"], stub_numpy)


@contextlib.contextmanager
def dev_server(
    *,
    root: pathlib.Path | None = pathlib.Path("/tmp/ts"),
    workspace: pathlib.Path = pathlib.Path("/tmp/clientdev"),
    port_base: int = 18100,
    ports: tuple[int, int, int] | None = None,
    shm_prefix: str | None = None,
    libpython_dir: str = "/root/.pyenv/versions/3.11.7/lib",
    startup_timeout_s: float = 120.0,
    stub_numpy_dir: str | None = None,
    models: Mapping[str, tuple[str, str]] | None = None,
    extra_args: tuple[str, ...] = (),
) -> Iterator[DevServer]:
    """Start tritonserver on the dev repository; always stop it and sweep its shared memory.

    ``root`` None runs the server bundled with pytriton (see :func:`bundled_files`; then
    ``libpython_dir`` and ``stub_numpy_dir`` are found, not given). ``ports`` (HTTP, gRPC,
    metrics) default to ``port_base`` and the two after it. ``models`` replaces the dev models.
    ``shm_prefix`` defaults to ``clientdev<http port>_`` so two dev servers never share regions.
    """
    http_port, grpc_port, metrics_port = ports or (port_base, port_base + 1, port_base + 2)
    shm_prefix = shm_prefix or f"clientdev{http_port}_"
    files = bundled_files(workspace) if root is None else hand_made_files(root, libpython_dir, stub_numpy_dir)
    repo = workspace / "repo"
    write_repository(repo, files.stub_numpy_dir, models)
    log_path = workspace / "tritonserver.log"
    env = dict(os.environ, LD_LIBRARY_PATH=files.library_path)
    argv = [
        str(files.binary),
        "--model-repository",
        str(repo),
        "--backend-directory",
        str(files.backend_directory),
        "--model-control-mode",
        "explicit",
        "--load-model",
        "*",
        "--http-port",
        str(http_port),
        "--grpc-port",
        str(grpc_port),
        "--metrics-port",
        str(metrics_port),
        "--backend-config",
        f"python,shm-region-prefix-name={shm_prefix}",
        "--exit-timeout-secs",
        "5",
        *extra_args,
    ]
    _sweep_shm(shm_prefix)
    with open(log_path, "wb") as log:
        process = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        _wait_ready(http_port, process, startup_timeout_s)
        yield DevServer(http_port=http_port, grpc_port=grpc_port)
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        _sweep_shm(shm_prefix)
