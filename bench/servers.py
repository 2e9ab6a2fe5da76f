"""The two servers the benchmark compares, on the same tritonserver binary with the same models.

* `ReferenceServer`: a hand-written model repository (``config.pbtxt`` written here, the plain
  Python-backend ``reference_model/model.py``) started directly with the tritonserver binary,
  with the library's rules for ``LD_LIBRARY_PATH`` and the stub's NumPy. Its names carry
  ``pytriton-<harness pid>-bench…``, so pytriton's sweeper removes them if the harness dies.
* `OursServer`: ``serve_ours.py`` launched as its own process, serving the same models through
  pytriton. pytriton restricts Triton's statistics API by default, so the harness gives it an
  access token and sends it (`Server.access_token`) with its own calls and perf_analyzer's.

Both are talked to over plain HTTP (readiness, configuration, statistics, one check inference).
"""

from __future__ import annotations

import dataclasses
import http.client
import json
import os
import pathlib
import secrets
import shutil
import signal
import socket
import sys
import sysconfig
import tempfile
import time
from typing import IO, Any, Dict, List, Optional, Sequence, Tuple

import psutil
from children import Child
from perfanalyzer import BenchError

from pytriton.server.workspace import ShmLease

BENCH_DIR = pathlib.Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
SHM_DIR = "/dev/shm"

MAX_BATCH_SIZE = 64
INPUT, OUTPUT = "INPUT_1", "OUTPUT_1"
READY_TIMEOUT_S = 180.0
SITE_PACKAGES_ENV = "PYTRITON_BENCH_SITE_PACKAGES"


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """One model both servers serve (float32 ``INPUT_1`` -> ``OUTPUT_1`` of shape [-1], batching).

    `cpu_work` marks the model whose calls spin the calibrated pure-Python loop (the count is a
    run's setting, see `cpu_work.calibrate`); `steps` > 0 makes it decoupled, with that many
    responses per request.
    """

    name: str
    sleep_s: float = 0.0
    delay_us: int = 0
    instances: int = 1
    cpu_work: bool = False
    steps: int = 0
    torch: bool = False  # the torch MLP of the GPU path (bench/reference_torch, serve_ours.py --torch-device)

    @property
    def decoupled(self) -> bool:
        return self.steps > 0


STREAM_STEPS = 100
MODELS: Dict[str, ModelSpec] = {spec.name: spec for spec in (
    ModelSpec("identity"),
    ModelSpec("sleep_10ms", sleep_s=0.01, delay_us=2000),
    ModelSpec("cpu_5ms", instances=2, cpu_work=True),
    ModelSpec("stream_100", steps=STREAM_STEPS),
)}  # fmt: skip
# The GPU path (`run.py --gpu`) serves only this; ours also serves TORCH_NUMPY_MODEL, the same
# MLP answering with numpy arrays instead of CUDA tensors, for the check that both work.
TORCH_MODELS: Dict[str, ModelSpec] = {"torch_mlp": ModelSpec("torch_mlp", delay_us=100, torch=True)}
TORCH_NUMPY_MODEL = "torch_mlp_numpy"
TORCH_FEATURES = 512  # the MLP's input and output width: INPUT_1 of 512 values per request


def model_set(torch_device: Optional[str]) -> Dict[str, ModelSpec]:
    """The models a server serves: the CPU set, or with a torch device the GPU path's."""
    return TORCH_MODELS if torch_device else MODELS

_CONFIG_PBTXT = """\
name: "{name}"
backend: "python"
max_batch_size: {max_batch_size}
input {{ name: "{input}" data_type: TYPE_FP32 dims: [ -1 ] }}
output {{ name: "{output}" data_type: TYPE_FP32 dims: [ -1 ] }}
dynamic_batching {{ max_queue_delay_microseconds: {delay_us} }}
instance_group {{ count: {instances} kind: KIND_CPU }}
model_transaction_policy {{ decoupled: {decoupled} }}
parameters {{ key: "sleep_s" value {{ string_value: "{sleep_s}" }} }}
parameters {{ key: "loop_count" value {{ string_value: "{loop_count}" }} }}
parameters {{ key: "steps" value {{ string_value: "{steps}" }} }}
parameters {{ key: "device" value {{ string_value: "{device}" }} }}
"""


def config_pbtxt(spec: ModelSpec, loop_count: int, device: str = "cpu") -> str:
    """The reference's config.pbtxt of one model (`loop_count` counts only for a `cpu_work` model,
    `device` only for a torch one)."""
    return _CONFIG_PBTXT.format(
        name=spec.name, max_batch_size=MAX_BATCH_SIZE, input=INPUT, output=OUTPUT, delay_us=spec.delay_us,
        instances=spec.instances, decoupled="true" if spec.decoupled else "false", sleep_s=spec.sleep_s,
        loop_count=loop_count if spec.cpu_work else 0, steps=spec.steps, device=device,
    )  # fmt: skip


def write_reference_repository(models_dir: pathlib.Path, loop_count: int, torch_device: Optional[str] = None) -> None:
    """The reference's hand-written model folders: config.pbtxt, model.py (plus cpu_work.py) each."""
    for spec in model_set(torch_device).values():
        version = models_dir / spec.name / "1"
        version.mkdir(parents=True)
        source = "reference_torch" if spec.torch else "reference_stream" if spec.decoupled else "reference_model"
        shutil.copy(BENCH_DIR / source / "model.py", version / "model.py")
        for helper in ("cpu_work.py", "torch_mlp.py"):
            shutil.copy(BENCH_DIR / helper, version / helper)
        (version.parent / "config.pbtxt").write_text(config_pbtxt(spec, loop_count, torch_device or "cpu"))


def free_ports(count: int) -> List[int]:
    """Ports nothing listens on now, picked by the kernel."""
    probes = []
    for _ in range(count):
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        probes.append(probe)
    ports = [probe.getsockname()[1] for probe in probes]
    for probe in probes:
        probe.close()
    return ports


# -- HTTP ----------------------------------------------------------------------------------------
ACCESS_TOKEN_HEADER = "triton-access-token"
ACCESS_TOKEN_ENV = "PYTRITON_BENCH_ACCESS_TOKEN"
"""How the harness hands serve_ours.py the token (an argument would show in `ps`)."""


def _request(
    port: int, method: str, path: str, body: Optional[bytes] = None, timeout_s: float = 10.0,
    access_token: Optional[str] = None,
) -> Tuple[int, bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout_s)
    try:
        headers = {"Content-Type": "application/json"} if body is not None else {}
        if access_token is not None:
            headers[ACCESS_TOKEN_HEADER] = access_token
        connection.request(method, path, body=body, headers=headers)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def _get_json(port: int, path: str, access_token: Optional[str] = None) -> Any:
    status, body = _request(port, "GET", path, access_token=access_token)
    if status != 200:
        raise BenchError(f"GET {path} on port {port} answered {status}: {body[:300]!r}")
    return json.loads(body)


class Server:
    """What the harness needs of either server: ports, readiness and the HTTP endpoints."""

    name = "server"

    def __init__(self, log_dir: pathlib.Path, torch_device: Optional[str] = None) -> None:
        self.http_port, self.grpc_port, self.metrics_port = free_ports(3)
        self.torch_device = torch_device
        self.models: List[str] = list(model_set(torch_device))  # what must answer ready
        self.log_dir = log_dir
        self.child: Optional[Child] = None
        self.startup_s: Optional[float] = None
        self.log_path: Optional[pathlib.Path] = None
        self.access_token: Optional[str] = None  # for a server that restricts some of its APIs
        self.trace_file: Optional[pathlib.Path] = None
        """Set before `start`: Triton traces every request's timestamps into it (bench/breakdown.py)."""
        self.stamps_dir: Optional[pathlib.Path] = None
        """Set before `start`: the Python models record their own stamps there (bench/breakdown.py)."""

    def headers(self, protocol: str) -> List[str]:
        """perf_analyzer ``-H`` values that carry the access token on `protocol`, if any."""
        if self.access_token is None:
            return []
        prefix = "triton-grpc-protocol-" if protocol == "grpc" else ""
        return [f"{prefix}{ACCESS_TOKEN_HEADER}:{self.access_token}"]

    @property
    def marker(self) -> Optional[str]:
        """The prefix of every name this server's processes, segments and folders carry."""
        raise NotImplementedError

    def url(self, protocol: str) -> str:
        return f"127.0.0.1:{self.http_port if protocol == 'http' else self.grpc_port}"

    def _launch(self, log: IO[str]) -> Child:
        raise NotImplementedError

    def start(self) -> float:
        """Launch and wait until every model answers ready; returns the seconds that took."""
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.log_path = self.log_dir / f"{self.name}-{self.http_port}.log"
        with log_path.open("w") as log:
            started = time.monotonic()
            self.child = self._launch(log)
        deadline = started + READY_TIMEOUT_S
        for model in self.models:
            while not self._model_ready(model):
                if not self.child.is_running():
                    raise BenchError(
                        f"the {self.name} server exited with code {self.child.returncode} before model '{model}' "
                        f"was ready; its output:\n{_tail(log_path)}"
                    )
                if time.monotonic() > deadline:
                    raise BenchError(f"model '{model}' of the {self.name} server was not ready within "
                                     f"{READY_TIMEOUT_S:.0f} s; its output:\n{_tail(log_path)}")
                time.sleep(0.01)
        self.startup_s = time.monotonic() - started
        return self.startup_s

    def _model_ready(self, model: str) -> bool:
        try:
            status, _ = _request(self.http_port, "GET", f"/v2/models/{model}/ready", timeout_s=2.0,
                                 access_token=self.access_token)
        except OSError:
            return False
        return status == 200

    def model_config(self, model: str) -> Dict[str, Any]:
        return dict(_get_json(self.http_port, f"/v2/models/{model}/config", self.access_token))

    def counts(self, model: str) -> Tuple[int, int]:
        """Triton's (inference_count, execution_count) of the model so far."""
        stats = _get_json(self.http_port, f"/v2/models/{model}/stats", self.access_token)["model_stats"][0]
        return int(stats["inference_count"]), int(stats["execution_count"])

    def infer(self, model: str, values: Sequence[float]) -> List[float]:
        """One inference over HTTP (JSON): `values` as a request of one row, the output's values."""
        body = json.dumps(
            {"inputs": [{"name": INPUT, "shape": [1, len(values)], "datatype": "FP32", "data": list(values)}]}
        ).encode()
        status, answer = _request(self.http_port, "POST", f"/v2/models/{model}/infer", body,
                                  access_token=self.access_token)
        if status != 200:
            raise BenchError(
                f"the {self.name} server's '{model}' failed a check inference ({status}): {answer[:300]!r}"
            )
        outputs = {output["name"]: output for output in json.loads(answer)["outputs"]}
        return list(outputs.get(OUTPUT, {}).get("data") or [])

    def check_identity(self, model: str) -> None:
        """One inference: the answer must be the request, value for value."""
        values = [float(i) + 0.5 for i in range(16)]
        got = self.infer(model, values)
        if got != values:
            raise BenchError(f"the {self.name} server's '{model}' answered {got!r} to {values!r}")

    def check_stream(self, model: str, steps: int) -> None:
        """One streamed inference over gRPC: `steps` responses, each the request, then the end."""
        import queue

        import numpy as np
        import tritonclient.grpc as grpcclient

        values = np.arange(16, dtype=np.float32) + 0.5
        answers: queue.Queue[Any] = queue.Queue()
        client = grpcclient.InferenceServerClient(f"127.0.0.1:{self.grpc_port}")
        headers = {ACCESS_TOKEN_HEADER: self.access_token} if self.access_token else None
        try:
            client.start_stream(callback=lambda result, error: answers.put(error or result), headers=headers)
            request = grpcclient.InferInput(INPUT, [1, values.size], "FP32")
            request.set_data_from_numpy(values[None])
            client.async_stream_infer(model, [request], enable_empty_final_response=True)
            got = []
            while True:
                answer = answers.get(timeout=30)
                if isinstance(answer, Exception):
                    raise BenchError(f"the {self.name} server's '{model}' failed a streamed check: {answer}")
                output = answer.as_numpy(OUTPUT)
                if output is not None:
                    got.append(output)
                if answer.get_response(as_json=True).get("parameters", {}).get("triton_final_response", {}).get(
                        "bool_param"):
                    break
        finally:
            client.stop_stream()
            client.close()
        if len(got) != steps or any(not np.array_equal(output, values[None]) for output in got):
            raise BenchError(f"the {self.name} server's '{model}' streamed {len(got)} responses "
                             f"(first {got[:1]!r}); expected {steps} copies of {values!r}")

    def cpu_seconds(self) -> float:
        """CPU time (user and system) the server's process and everything it started have used
        (for pytriton: the serving script, its worker processes, tritonserver)."""
        if self.child is None:
            return 0.0
        try:
            processes = [psutil.Process(self.child.pid), *self.child.descendants()]
        except psutil.NoSuchProcess:
            return 0.0
        spent = 0.0
        for process in processes:
            try:
                times = process.cpu_times()
            except psutil.NoSuchProcess:
                continue
            spent += times.user + times.system
        return spent

    def idle_cpu_percent(self, seconds: float = 1.0) -> float:
        """CPU the server's processes burn while no request comes (percent of one core)."""
        before = self.cpu_seconds()
        time.sleep(seconds)
        return (self.cpu_seconds() - before) / seconds * 100.0

    def stop(self) -> None:
        raise NotImplementedError


class ReferenceServer(Server):
    """tritonserver on a hand-written repository of plain Python-backend models."""

    name = "reference"

    def __init__(self, log_dir: pathlib.Path, loop_count: int, torch_device: Optional[str] = None) -> None:
        super().__init__(log_dir, torch_device)
        self.loop_count = loop_count
        self.prefix = f"pytriton-{os.getpid()}-bench{secrets.token_hex(4)}"
        # Its names are pytriton's, so a pytriton start on this host (in another PID namespace too,
        # where this pid looks dead) judges them by this lease, held until `stop` removed them.
        self.lease = ShmLease(self.prefix)
        try:
            self.workspace = pathlib.Path(tempfile.mkdtemp(prefix=f"{self.prefix}-"))
            self.root, self.stub, self.stub_python = _server_tree()
            self._write_repository()
        except BaseException:
            _remove_named(self.prefix)
            self.lease.release()
            raise

    def _write_repository(self) -> None:
        write_reference_repository(self.workspace / "models", self.loop_count, self.torch_device)
        # Triton looks for the stub next to libtriton_python.so, so the backend folder is links.
        backend = self.workspace / "backends" / "python"
        backend.mkdir(parents=True)
        python_backend = self.root / "backends" / "python"
        for name, source in (
            ("libtriton_python.so", python_backend / "libtriton_python.so"),
            ("triton_python_backend_utils.py", python_backend / "triton_python_backend_utils.py"),
            ("triton_python_backend_stub", self.stub),
        ):
            (backend / name).symlink_to(source)

    @property
    def marker(self) -> Optional[str]:
        return self.prefix

    def argv(self) -> List[str]:
        return [
            str(self.root / "bin" / "tritonserver"),
            f"--model-repository={self.workspace / 'models'}",
            "--model-control-mode=explicit",
            "--load-model=*",
            f"--backend-directory={self.workspace / 'backends'}",
            f"--backend-config=python,shm-region-prefix-name={self.prefix}",
            f"--http-port={self.http_port}",
            f"--grpc-port={self.grpc_port}",
            f"--metrics-port={self.metrics_port}",
            "--exit-timeout-secs=5",
            *(["--trace-config", f"triton,file={self.trace_file}", "--trace-config", "level=TIMESTAMPS",
               "--trace-config", "rate=1"] if self.trace_file else []),
        ]

    def environment(self) -> Dict[str, str]:
        env = dict(os.environ)
        libdir = sysconfig.get_config_var("LIBDIR") or ""
        env["LD_LIBRARY_PATH"] = os.pathsep.join(
            filter(None, [libdir, str(self.root / "lib"), env.get("LD_LIBRARY_PATH")])
        )
        if self.stub_python is not None:
            env["PYTRITON_BENCH_STUB_PYTHON"] = str(self.stub_python)
        # The stub's Python sees only the base interpreter's packages; the torch model appends
        # this (the harness's virtual environment) to its sys.path, after the stub's NumPy.
        env[SITE_PACKAGES_ENV] = sysconfig.get_paths()["purelib"]
        if self.stamps_dir is not None:
            env["PYTRITON_BENCH_STAMPS"] = str(self.stamps_dir)
        return env

    def _launch(self, log: IO[str]) -> Child:
        return Child(self.argv(), self.environment(), log)

    def stop(self) -> None:
        try:
            if self.child is not None:
                self.child.stop(polite=signal.SIGINT, timeout_s=20)
        finally:
            _remove_named(self.prefix)
            self.lease.release()


class OursServer(Server):
    """``serve_ours.py`` in its own process: the same models through pytriton."""

    name = "ours"

    def __init__(
        self, log_dir: pathlib.Path, loop_count: int, pythonpath: Optional[pathlib.Path] = None,
        torch_device: Optional[str] = None, model_backend: Optional[str] = None,
    ) -> None:
        super().__init__(log_dir, torch_device)
        self.model_backend = model_backend
        if model_backend == "python":
            self.name = "proxy"
        if torch_device:
            self.models.append(TORCH_NUMPY_MODEL)
        self.loop_count = loop_count
        self.pythonpath = pythonpath
        self.access_token = secrets.token_urlsafe(16)

    @property
    def marker(self) -> Optional[str]:
        return f"pytriton-{self.child.pid}-" if self.child is not None else None

    def _launch(self, log: IO[str]) -> Child:
        argv = [
            sys.executable, str(BENCH_DIR / "serve_ours.py"), "--http-port", str(self.http_port),
            "--grpc-port", str(self.grpc_port), "--metrics-port", str(self.metrics_port),
            "--loop-count", str(self.loop_count),
        ]  # fmt: skip
        if self.torch_device:
            argv += ["--torch-device", self.torch_device]
        if self.trace_file:
            argv += ["--trace-file", str(self.trace_file)]
        env = dict(os.environ)
        env[ACCESS_TOKEN_ENV] = self.access_token or ""
        if self.model_backend:
            env["PYTRITON_TRITON_CONFIG_MODEL_BACKEND"] = self.model_backend
        if self.stamps_dir is not None:
            env["PYTRITON_HOP_STAMPS"] = str(self.stamps_dir)
        if self.pythonpath is not None:
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(self.pythonpath), env.get("PYTHONPATH")]))
        return Child(argv, env, log)

    def cpu_instances(self) -> str:
        """How serve_ours.py ran cpu_5ms's instances ("processes" or "threads"), from what it said."""
        text = self.log_path.read_text(errors="replace") if self.log_path and self.log_path.is_file() else ""
        for line in text.splitlines():
            if line.startswith("bench: cpu_5ms instances: "):
                return line.rsplit(" ", 1)[1]
        return "unknown"

    def stop(self) -> None:
        if self.child is None:
            return
        try:
            # Triton.serve() stops on SIGTERM: in-flight requests, then server, workers, segments.
            self.child.stop(polite=signal.SIGTERM, timeout_s=45)
        finally:
            # Anything the script could not clean (it was killed) carries its pid in the name.
            _remove_named(f"pytriton-{self.child.pid}-")


def _remove_named(prefix: str) -> None:
    """Kill processes whose command line names `prefix`; unlink its segments and temporary folders."""
    for process in psutil.process_iter(["cmdline"]):
        cmdline = " ".join(process.info.get("cmdline") or [])
        if prefix in cmdline and process.pid != os.getpid():
            try:
                process.kill()
            except psutil.NoSuchProcess:
                pass
    if os.path.isdir(SHM_DIR):
        for name in os.listdir(SHM_DIR):
            if name.startswith(prefix):
                try:
                    os.unlink(os.path.join(SHM_DIR, name))
                except FileNotFoundError:
                    pass
    for folder in pathlib.Path(tempfile.gettempdir()).glob(f"{prefix}*"):
        if folder.is_dir():
            shutil.rmtree(folder, ignore_errors=True)


def _server_tree() -> Tuple[pathlib.Path, pathlib.Path, Optional[pathlib.Path]]:
    """(root, stub for this Python, the stub's own site folder or None) of the Triton in use.

    Like the library: ``$PYTRITON_TRITON_SERVER_DIR`` or the tree bundled in ``pytriton/``.
    """
    configured = os.environ.get("PYTRITON_TRITON_SERVER_DIR")
    root = pathlib.Path(configured).expanduser() if configured else REPO / "pytriton" / "tritonserver"
    tag = f"{sys.version_info.major}.{sys.version_info.minor}"
    stubs = root / "python_backend_stubs"
    stub = (stubs / tag if stubs.is_dir() else root / "backends" / "python") / "triton_python_backend_stub"
    binary = root / "bin" / "tritonserver"
    if not binary.is_file() or not stub.is_file():
        raise BenchError(
            f"no tritonserver with a Python {tag} stub under {root} (looked for {binary} and {stub}); "
            "run `make install`"
        )
    stub_python = root / "stub_python" / tag
    return root, stub, stub_python if stub_python.is_dir() else None


def server_lib_dir() -> pathlib.Path:
    return _server_tree()[0] / "lib"


def server_version() -> str:
    root = _server_tree()[0]
    try:
        # "nvidia-pytriton==0.7.0 triton-server=2.51.0 sha256=..." (written by the build)
        return (root / "VERSION").read_text().split()[1].split("=", 1)[1]
    except (OSError, IndexError):
        return "unknown"


def same_models(servers: Sequence[Server]) -> None:
    """Refuse to compare servers whose models differ in what the benchmark relies on."""

    def essentials(config: Dict[str, Any]) -> Any:
        batching = config.get("dynamic_batching") or {}
        return (
            config.get("max_batch_size"),
            [(t["name"], t["data_type"], [int(d) for d in t["dims"]]) for t in config.get("input", [])],
            [(t["name"], t["data_type"], [int(d) for d in t["dims"]]) for t in config.get("output", [])],
            "dynamic_batching" in config,
            int(batching.get("max_queue_delay_microseconds", 0) or 0),
            # Not the instance count: pytriton may run several Triton instances (lanes) per callable.
            bool((config.get("model_transaction_policy") or {}).get("decoupled", False)),
        )

    for model in model_set(servers[0].torch_device):
        seen = {server.name: essentials(server.model_config(model)) for server in servers}
        if len(set(map(repr, seen.values()))) != 1:
            raise BenchError(f"the servers declare model '{model}' differently: {seen}")


def _tail(path: pathlib.Path, lines: int = 25) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no output)"
