"""Before setup: can this machine (or container image) run a pytriton server? `pytriton check`.

Every requirement that otherwise shows up only when the first model loads, or as a refused
request much later, is looked at here once, each with a verdict and, when it fails, what to do:

- glibc >= 2.35 (what the bundled tritonserver binaries are built against);
- a shared libpython for this Python, which the Python-backend stub embeds;
- the server tree with a stub for this Python, and every library the stub links resolving, its
  libpython from this interpreter (another build of the same version breaks model loading);
- the NumPy the stub will import (the stubs of Triton 2.51 need NumPy 1.x);
- the server binary starts and answers ready (an empty explicit model repository, free ports);
- runtime only: /dev/shm size and free space, the configured ports free;
- the workspace folder (under ``TMPDIR``) can be created, with room for its Unix sockets.

The ``judge_*`` functions and `format_result` are pure, so the decisions are unit-tested; the
``check_*`` functions gather the facts (files, ``ldd``, a throwaway server) and call them. The
checks of the install (glibc to the throwaway server) are in `pytriton.check.install`,
the results' type in `pytriton.check.verdicts`; this module has the runtime checks and
runs them all.
A container build runs the checks with ``build=True``: the build container's ports and
/dev/shm say nothing about those of the container that will serve, so those are left out.
"""

from __future__ import annotations

import ast
import errno
import importlib.util
import os
import pathlib
import platform
import re
import shutil
import socket
import subprocess
import tempfile
import urllib.parse
import urllib.request
import warnings
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import psutil

from pytriton import __version__
from pytriton.check.install import (
    SERVER_START_TIMEOUT_S,
    check_glibc,
    check_libpython,
    check_server_start,
    check_stub_libraries,
    check_stub_numpy,
    judge_backend,
    judge_server_tree,
    native_serves,
    proxy_only,
)
from pytriton.check.verdicts import CheckResult, Verdict
from pytriton.exceptions import PyTritonError
from pytriton.install_hints import TELEMETRY_EXTRA
from pytriton.ipc.shm import MIB, SHM_DIR, shm_fix, shm_usage
from pytriton.server.config import ENV_PREFIX, TritonConfig
from pytriton.server.config.merge import merge
from pytriton.server.distribution import (
    BUNDLED_ROOT,
    ServerDistribution,
    find_distribution,
    server_version,
)
from pytriton.server.ports import listening_ports, probe_port
from pytriton.server.preflight import SHM_FLOOR_BYTES, shm_warning
from pytriton.server.workspace import Workspace
from pytriton.worker.tracing import export_settings

# --- runtime only: /dev/shm and ports -------------------------------------------------------


def judge_shm(total: int, free: int, writable: bool) -> CheckResult:
    """WARN under the floor (`SHM_FLOOR_BYTES`) in size or free space; FAIL when not writable."""
    name = SHM_DIR
    if not writable:
        return CheckResult(name, Verdict.FAIL, f"{SHM_DIR} is not writable by this user; pytriton and Triton's "
                           "Python backend keep tensors and their locks there",
                           f"mount a writable tmpfs at {SHM_DIR} (mode 1777)")
    small = shm_warning(total, free, {})
    if small is not None:
        message, _, fix = small.partition(". To avoid failed requests, ")
        return CheckResult(name, Verdict.WARN, message, fix.rstrip("."))
    if free < SHM_FLOOR_BYTES:
        return CheckResult(name, Verdict.WARN,
                           f"{SHM_DIR} is {total / MIB:.1f} MiB but only {free / MIB:.1f} MiB is free (under "
                           f"{SHM_FLOOR_BYTES // MIB} MiB); requests of a few tens of MiB may fail",
                           f"find what fills {SHM_DIR} (leftovers of killed servers are removed by the next start), "
                           f"or {shm_fix(0)}")
    return CheckResult(name, Verdict.PASS, f"{total / MIB:.0f} MiB, {free / MIB:.0f} MiB free")


def check_shm() -> CheckResult:
    try:
        usage = shm_usage(SHM_DIR)
    except OSError as exc:
        return CheckResult(SHM_DIR, Verdict.FAIL, f"{SHM_DIR} cannot be read: {exc}",
                           f"mount a tmpfs at {SHM_DIR}: {shm_fix(0)}")
    return judge_shm(usage.total, usage.free, os.access(SHM_DIR, os.W_OK | os.X_OK))


# --- runtime only: the GPU ------------------------------------------------------------------

GPU_DRIVER_NEEDED = "560.35.03"
"""The least Linux driver for CUDA 12.6 Update 2, whose runtime (libcudart 12.6.77) the bundled
tritonserver carries: NVIDIA's CUDA Toolkit release notes, "CUDA Toolkit and Corresponding Driver
Versions". Older data-center drivers (R535 >= 535.86) run it with NVIDIA's forward-compatibility
package (cuda-compat) only."""

NO_GPU = "no GPU seen (torch absent or no CUDA)"


def parse_nvidia_smi(text: str) -> List[Tuple[str, str]]:
    """(driver version, device name) per line of
    ``nvidia-smi --query-gpu=driver_version,name --format=csv,noheader``."""
    found = []
    for line in text.splitlines():
        driver, comma, name = line.partition(",")
        if comma and re.fullmatch(r"\d+(\.\d+)+", driver.strip()):
            found.append((driver.strip(), name.strip()))
    return found


def judge_gpu(devices: Sequence[str], driver: Optional[str], cuda_runtime: Optional[str]) -> CheckResult:
    """PASS without a GPU (nothing to check) and with a driver that runs CUDA 12.6; WARN when the
    driver is older than `GPU_DRIVER_NEEDED` or unknown. `devices`: the names torch sees;
    `driver`: the NVIDIA driver version ("560.35.03"); `cuda_runtime`: torch's CUDA version."""
    name = "gpu"
    if not devices:
        return CheckResult(name, Verdict.PASS, NO_GPU)
    counted = {device: list(devices).count(device) for device in devices}
    seen = ", ".join(f"{count} x {device}" if count > 1 else device for device, count in counted.items())
    runtime = f"CUDA runtime {cuda_runtime} (torch)" if cuda_runtime else "CUDA runtime unknown"
    needed = GPU_DRIVER_NEEDED
    if not driver:
        return CheckResult(name, Verdict.WARN, f"{seen}; {runtime}; the NVIDIA driver's version is unknown "
                           "(no nvidia-smi)", f"check that the node's driver is >= {needed} (CUDA 12.6)")
    detail = f"{seen}; driver {driver}; {runtime}"
    if tuple(map(int, re.findall(r"\d+", driver))) < tuple(map(int, needed.split("."))):
        return CheckResult(name, Verdict.WARN,
                           f"{detail}; the bundled tritonserver's CUDA 12.6 runtime needs driver >= {needed}, "
                           "so its GPU features (CUDA shared memory, GPU metrics) may fail; torch runs on "
                           "the CUDA it brings",
                           f"upgrade the node's NVIDIA driver to >= {needed}, or on a data-center GPU with "
                           "driver R535 (>= 535.86) install NVIDIA's CUDA forward-compatibility package")
    return CheckResult(name, Verdict.PASS, detail)


def check_gpu(timeout_s: float = 10.0) -> CheckResult:
    """The GPUs torch sees, the driver (from nvidia-smi) and torch's CUDA runtime, when torch sees CUDA."""
    if importlib.util.find_spec("torch") is None:
        return judge_gpu([], None, None)
    try:
        import torch  # optional: imported only here, and only when installed

        if not torch.cuda.is_available():
            return judge_gpu([], None, None)
        devices = [torch.cuda.get_device_name(index) for index in range(torch.cuda.device_count())]
        runtime = torch.version.cuda
    except (ImportError, OSError, RuntimeError) as exc:  # a broken torch or CUDA install: said, not raised
        return CheckResult("gpu", Verdict.WARN, f"torch could not query CUDA: {exc}",
                           "check the torch install and the node's NVIDIA driver")
    driver = None
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            answer = subprocess.run([smi, "--query-gpu=driver_version,name", "--format=csv,noheader"],
                                    capture_output=True, text=True, timeout=timeout_s)
            rows = parse_nvidia_smi(answer.stdout)
            driver = rows[0][0] if rows else None
        except (OSError, subprocess.SubprocessError):
            driver = None
    return judge_gpu(devices, driver, runtime)


PortProbe = Tuple[str, Optional[str], int, Optional[int]]
"""(TritonConfig field, address, port, errno of a failed bind or None)."""


def judge_ports(probes: Sequence[PortProbe], source: str = "", owners: Optional[Mapping[int, str]] = None
                ) -> CheckResult:
    """FAIL naming each port that cannot be bound (and, where known, the process that holds it),
    with the variable that moves it. `source` says where the ports were read from."""
    owners = owners or {}
    problems, fields = [], []
    for field, address, port, error in probes:
        if error is None:
            continue
        where = address or "all interfaces"
        fields.append(field)
        if error == errno.EADDRINUSE:
            holder = f" by {owners[port]}" if port in owners else ""
            problems.append(f"port {port} ({field}) is already in use on {where}{holder}")
        elif error == errno.EACCES:
            problems.append(f"port {port} ({field}) needs privileges this user lacks")
        else:
            problems.append(f"port {port} ({field}) cannot be bound on {where}: {os.strerror(error)}")
    suffix = f" ({source})" if source else ""
    if problems:
        variables = ", ".join(f"{ENV_PREFIX}{field.upper()}=<port>" for field in fields)
        return CheckResult("ports", Verdict.FAIL, "; ".join(problems) + suffix,
                           f"stop what uses it, or choose another port: {variables} (or TritonConfig(...) in code)")
    used = ", ".join(f"{port} ({field.replace('_port', '')})" for field, _, port, _ in probes)
    return CheckResult("ports", Verdict.PASS, (f"free: {used}" if used else "every endpoint is switched off") + suffix)


def port_owners(ports: Sequence[int]) -> Dict[int, str]:
    """Who listens on each of `ports`, as ``pid N (command)``, where this user may see it."""
    wanted = set(ports)
    owners: Dict[int, str] = {}
    try:
        connections = psutil.net_connections(kind="inet")
    except (psutil.Error, OSError):
        return owners
    for connection in connections:
        port = connection.laddr.port if connection.laddr else None
        if port in wanted and connection.status == psutil.CONN_LISTEN and connection.pid:
            try:
                command = " ".join(psutil.Process(connection.pid).cmdline()[:3])
            except psutil.Error:
                command = "?"
            owners[port] = f"pid {connection.pid} ({command})"
    return owners


# The TritonConfig fields a serving script may set that decide which ports a server takes (and
# where its traces go, for the metrics and tracing check).
_PORT_FIELDS = ("http_port", "grpc_port", "metrics_port", "http_address", "grpc_address", "metrics_address",
                "allow_http", "allow_grpc", "allow_metrics", "allow_vertex_ai", "vertex_ai_port", "allow_sagemaker",
                "sagemaker_port", "trace_config", "openai_port", "triton_on_localhost")


def config_from_script(source: str) -> Tuple[Dict[str, Any], List[str]]:
    """The port settings a script gives ``TritonConfig(...)``, read without running it.

    Returns:
        The fields given as literals (the first ``TritonConfig`` call's), and the fields it sets
        with an expression only running the script would tell (left to the environment here).

    Raises:
        SyntaxError: the script is not Python.
    """
    found: Dict[str, Any] = {}
    computed: List[str] = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        if name != "TritonConfig":
            continue
        for keyword in node.keywords:
            if keyword.arg not in _PORT_FIELDS:
                continue
            try:
                found[keyword.arg] = ast.literal_eval(keyword.value)
            except ValueError:
                computed.append(keyword.arg)
        break
    return found, computed


def _script_config(script: pathlib.Path) -> Tuple[Optional[TritonConfig], Dict[str, Any], List[str]]:
    """The ``TritonConfig`` of the fields `script` sets as literals (None: none), those fields, and
    those it computes (see `config_from_script`).

    Raises:
        OSError, SyntaxError, PyTritonError, TypeError: the script cannot be read, or its values
            are no valid config.
    """
    fields, computed = config_from_script(script.read_text())
    return (TritonConfig(**fields) if fields else None), fields, computed


def _merged(explicit: Optional[TritonConfig], environ: Mapping[str, str]) -> TritonConfig:
    """`explicit` completed from the ``PYTRITON_TRITON_CONFIG_*`` variables, as `Triton()` does.

    Raises:
        PyTritonError: a variable holds a wrong value.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # unknown variables: Triton() itself warns about them
        return merge(explicit, environ)


def check_ports(environ: Mapping[str, str] = os.environ, script: Optional[pathlib.Path] = None) -> CheckResult:
    """The ports a `Triton()` started in this environment would take (``PYTRITON_TRITON_CONFIG_*``),
    with the ones `script` sets in its ``TritonConfig(...)`` taking precedence, as in the script."""
    explicit: Optional[TritonConfig] = None
    if script is None:
        source = "the defaults and PYTRITON_TRITON_CONFIG_* only; give the serving script to check its own ports"
    else:
        try:
            explicit, fields, computed = _script_config(script)
        except (OSError, SyntaxError, PyTritonError, TypeError) as exc:
            return CheckResult("ports", Verdict.FAIL, f"cannot read the ports of {script}: {exc}",
                               "give the serving script's path (a Python file)")
        read = ", ".join(f"{key}={value!r}" for key, value in fields.items()) or "no port"
        source = f"{script.name} sets {read} in TritonConfig(...)"
        if computed:
            source += f"; {', '.join(computed)} computed in code, taken from the environment here"
    try:
        config = _merged(explicit, environ)
    except PyTritonError as exc:
        return CheckResult("ports", Verdict.FAIL, exc.message, f"correct the {ENV_PREFIX}* variable")
    probes = [(field, address, port, probe_port(address, port)) for field, address, port in listening_ports(config)]
    busy = [port for _, _, port, error in probes if error == errno.EADDRINUSE]
    return judge_ports(probes, source, port_owners(busy) if busy else None)


# --- metrics and tracing ----------------------------------------------------------------------


def _trace_setting(items: Sequence[str], name: str) -> Optional[str]:
    """The value of Triton's trace setting `name` (``mode``, ``file``) among ``--trace-config`` items."""
    for item in items:
        key, _, value = item.partition("=")
        if key.removeprefix("triton,").strip() == name:
            return value.strip()
    return None


def judge_observability(metrics_port: Optional[int], trace_items: Sequence[str], telemetry_installed: bool,
                        collector_error: Optional[str]) -> CheckResult:
    """Where the metrics go (None: metrics off) and whether traces reach a collector.

    `collector_error`: why the OpenTelemetry collector's address refused a connection (None: it
    accepted one, or none is configured).
    """
    name = "metrics, tracing"
    parts = [f"metrics on port {metrics_port} (Triton's nv_* and pytriton_* families)" if metrics_port is not None
             else "metrics off (allow_metrics=False)"]
    if not trace_items:
        parts.append("tracing off (no trace_config)")
        return CheckResult(name, Verdict.PASS, "; ".join(parts))
    export = export_settings(trace_items)  # what the worker itself reads of them
    if export is None:
        mode = _trace_setting(trace_items, "mode") or "triton"
        parts.append(f"tracing to the file {_trace_setting(trace_items, 'file') or '(none given)'} (mode {mode})")
        return CheckResult(name, Verdict.PASS, "; ".join(parts))
    parts.append(f"OpenTelemetry traces to {export.url}")
    if not telemetry_installed:
        return CheckResult(name, Verdict.WARN, "; ".join(parts) + ": Triton exports its spans, but the OpenTelemetry "
                           "packages are missing, so the hop and the callable get no spans",
                           TELEMETRY_EXTRA)
    if collector_error is not None:
        return CheckResult(name, Verdict.WARN,
                           "; ".join(parts) + f": the collector does not answer ({collector_error})",
                           "start the collector, or correct 'opentelemetry,url=' in trace_config")
    return CheckResult(name, Verdict.PASS, "; ".join(parts) + " (the collector accepts connections)")


def check_observability(environ: Mapping[str, str] = os.environ, script: Optional[pathlib.Path] = None,
                        timeout_s: float = 2.0) -> CheckResult:
    """Metrics and tracing as a `Triton()` in this environment (and `script`'s TritonConfig) would have them."""
    explicit: Optional[TritonConfig] = None
    if script is not None:
        try:
            explicit = _script_config(script)[0]
        except (OSError, SyntaxError, PyTritonError, TypeError):
            explicit = None  # the ports check says why
    try:
        config = _merged(explicit, environ)
    except PyTritonError as exc:
        return CheckResult("metrics, tracing", Verdict.FAIL, exc.message, f"correct the {ENV_PREFIX}* variable")
    items = list(config.trace_config or ())
    export = export_settings(items)
    collector_error = None
    if export is not None:
        url = urllib.parse.urlsplit(export.url)
        try:
            socket.create_connection((url.hostname or "localhost", url.port or 4318), timeout_s).close()
        except OSError as exc:
            collector_error = f"{url.hostname}:{url.port or 4318}: {exc.strerror or exc}"
    installed = importlib.util.find_spec("opentelemetry") is not None and importlib.util.find_spec(
        "opentelemetry.sdk") is not None
    port = config.effective_metrics_port if config.allow_metrics is not False else None
    return judge_observability(port, items, installed, collector_error)


# --- the workspace --------------------------------------------------------------------------


def check_workspace() -> CheckResult:
    """A server's workspace (model repository, sockets, backends) can be made under TMPDIR."""
    folder = tempfile.gettempdir()
    try:
        workspace = Workspace()
    except (OSError, PyTritonError) as exc:
        return CheckResult("workspace", Verdict.FAIL, f"cannot create a server workspace in {folder}: {exc}",
                           "set TMPDIR to a writable folder with a short path (e.g. TMPDIR=/tmp)")
    try:
        (workspace.model_repository / "probe").write_bytes(b"")
    except OSError as exc:
        return CheckResult("workspace", Verdict.FAIL, f"cannot write in {workspace.path}: {exc}",
                           "set TMPDIR to a writable folder with a short path (e.g. TMPDIR=/tmp)")
    finally:
        workspace.cleanup()
    return CheckResult("workspace", Verdict.PASS, f"{folder} is writable")


# --- all together ---------------------------------------------------------------------------


def versions_line() -> str:
    """The library's version and the server's it would run, for ``--version`` and ``check``."""
    try:
        distribution: Optional[ServerDistribution] = find_distribution()
    except PyTritonError:
        distribution = None
    if distribution is None:
        server = "no Triton server found (see `pytriton check`)"
    else:
        version = server_version(distribution.root) or "of unknown version"
        where = "bundled" if distribution.root == BUNDLED_ROOT else f"from {distribution.root}"
        server = f"Triton Inference Server {version} ({where})"
    return f"pytriton {__version__}, {server}, Python {platform.python_version()}"


def summary(results: Sequence[CheckResult]) -> str:
    """The last line: the counts, and what the failures mean for serving."""
    counts = {verdict.value: sum(r.verdict is verdict for r in results) for verdict in Verdict}
    text = "pytriton check: " + ", ".join(f"{count} {verdict}" for verdict, count in counts.items() if count)
    failed = [r for r in results if r.verdict is Verdict.FAIL]
    if not failed:
        return text
    if all(r.name == "ports" for r in failed):
        return text + " -- a port the server would take is in use; on other ports this machine can serve"
    return text + " -- this machine cannot serve yet"


def run_checks(build: bool = False, timeout_s: float = SERVER_START_TIMEOUT_S,
               script: Optional[pathlib.Path] = None) -> List[CheckResult]:
    """Every check in order; with `build`, only those that hold for the image, not the container.
    `script`: the serving script whose ``TritonConfig`` ports the port check reads."""
    results = [check_glibc(), check_libpython()]
    distribution: Optional[ServerDistribution] = None
    try:
        distribution = find_distribution()
        results.append(judge_server_tree(distribution, None))
    except PyTritonError as exc:
        results.append(judge_server_tree(None, exc.message))
    if distribution is not None:
        setting = os.environ.get(ENV_PREFIX + "MODEL_BACKEND")
        results.append(judge_backend(distribution, setting))
        if distribution.stub is None:
            results.append(CheckResult("stub libraries", Verdict.FAIL, "no Python-backend stub for this Python",
                                       "use pytriton's own backend (build pytriton with a C compiler)"))
        else:
            results.append(check_stub_libraries(distribution, timeout_s))
        results.append(check_stub_numpy(distribution))
        if native_serves(distribution, setting):
            # Only the proxy path runs stubs: on pytriton's backend what they lack is a fact, not a problem.
            results = [proxy_only(result) for result in results]
        results.append(check_server_start(distribution, timeout_s))
    else:
        for name in ("stub libraries", "stub numpy", "server start"):
            results.append(CheckResult(name, Verdict.FAIL, "not checked: there is no usable server tree",
                                       "fix the 'server tree' check first"))
    if not build:
        results.extend([check_shm(), check_gpu(), check_ports(script=script), check_observability(script=script)])
    results.append(check_workspace())
    return results

