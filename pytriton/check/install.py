"""The checks of the install: glibc, libpython, the server tree and its stub, and a throwaway server.

Part of `pytriton check` (`pytriton.check.runtime`); they also run in a container build
(``--build``), where the ports and /dev/shm say nothing of the container that will serve.
The ``judge_*`` functions are pure; the ``check_*`` functions gather the facts and call them.
"""

from __future__ import annotations

import os
import pathlib
import re
import shutil
import socket
import subprocess
import sys
import sysconfig
import time
import urllib.parse
import urllib.request
from typing import Callable, Dict, Mapping, Optional, Sequence, Tuple

from pytriton.check.verdicts import CheckResult, Verdict
from pytriton.environment import TRITON_SERVER_DIR
from pytriton.exceptions import PyTritonError
from pytriton.server.argv import build_argv
from pytriton.server.config import ENV_PREFIX, TritonConfig
from pytriton.server.control import ServerControl, wait_for
from pytriton.server.distribution import (
    ServerDistribution,
    assemble_backends,
    libpython_dir,
    python_version_tag,
    server_environment,
)
from pytriton.server.process import ServerProcess
from pytriton.server.workspace import Workspace

GLIBC_NEEDED = (2, 35)
"""The bundled server comes from a ``manylinux_2_35`` wheel: its binaries need this glibc."""

SERVER_START_TIMEOUT_S = 60.0


# --- glibc ----------------------------------------------------------------------------------


def parse_glibc_version(text: Optional[str]) -> Optional[Tuple[int, int]]:
    """``(2, 36)`` from ``"glibc 2.36"`` (``os.confstr``) or ``"2.36"``; None when it is not glibc."""
    if not text:
        return None
    match = re.search(r"(?:^|glibc\s+)(\d+)\.(\d+)", text.strip())
    return (int(match.group(1)), int(match.group(2))) if match else None


def judge_glibc(version: Optional[Tuple[int, int]], bundled: bool) -> CheckResult:
    needed = ".".join(map(str, GLIBC_NEEDED))
    if version is None:
        found = "no glibc found (musl-based systems such as Alpine cannot run the Triton binaries)"
        return CheckResult("glibc", Verdict.FAIL if bundled else Verdict.WARN, found,
                           f"use a glibc-based system with glibc >= {needed}, e.g. Debian 12 or Ubuntu 22.04")
    text = ".".join(map(str, version))
    if not bundled:
        return CheckResult("glibc", Verdict.PASS, f"glibc {text}; the server from {TRITON_SERVER_DIR} brings its own "
                           "requirement, which the server-start check tests")
    if version < GLIBC_NEEDED:
        return CheckResult("glibc", Verdict.FAIL, f"glibc {text}, but the bundled tritonserver needs >= {needed}",
                           f"use a system (or base image) with glibc >= {needed}, e.g. Debian 12 (2.36) or "
                           f"Ubuntu 22.04 (2.35), or set {TRITON_SERVER_DIR} to a Triton built for this system")
    return CheckResult("glibc", Verdict.PASS, f"glibc {text} (the bundled tritonserver needs >= {needed})")


def check_glibc(environ: Mapping[str, str] = os.environ) -> CheckResult:
    try:
        text = os.confstr("CS_GNU_LIBC_VERSION")
    except (ValueError, OSError):
        text = None
    return judge_glibc(parse_glibc_version(text), bundled=not environ.get(TRITON_SERVER_DIR))


# --- libpython ------------------------------------------------------------------------------


def judge_libpython(shared_error: Optional[str], library: Optional[pathlib.Path], found: bool) -> CheckResult:
    """`shared_error`: why this Python has no shared libpython (None when it has one);
    `library`: the file the stub will load, and whether it exists."""
    if shared_error is not None:
        return CheckResult("libpython", Verdict.FAIL, shared_error,
                           "install a Python built with --enable-shared (the python Docker images, "
                           "Debian/Ubuntu's python3, conda)")
    if library is None or not found:
        return CheckResult("libpython", Verdict.FAIL,
                           f"this Python says it has a shared libpython, but {library} does not exist",
                           "reinstall this Python, or use one whose LIBDIR holds its libpython3.X.so.1.0")
    return CheckResult("libpython", Verdict.PASS, f"{library}")


def check_libpython() -> CheckResult:
    try:
        folder = libpython_dir()
    except PyTritonError as exc:
        return judge_libpython(exc.message, None, False)
    name = sysconfig.get_config_var("INSTSONAME") or sysconfig.get_config_var("LDLIBRARY") or ""
    library = folder / str(name)
    return judge_libpython(None, library, library.is_file())


# --- the server tree and its stub -----------------------------------------------------------


def judge_server_tree(distribution: Optional[ServerDistribution], error: Optional[str]) -> CheckResult:
    if distribution is None:
        return CheckResult("server tree", Verdict.FAIL, error or "not found",
                           f"reinstall pytriton with pip (its build fetches the server), or point {TRITON_SERVER_DIR} "
                           "at a complete Triton installation")
    stub = (f"stub for Python {python_version_tag()}: {distribution.stub.name}" if distribution.stub is not None
            else f"no Python-backend stub for Python {python_version_tag()}")
    native = "pytriton's backend built" if distribution.native_backend is not None else "pytriton's backend not built"
    return CheckResult("server tree", Verdict.PASS, f"{distribution.root} ({native}; {stub})")


def parse_ldd(text: str) -> Dict[str, Optional[str]]:
    """``ldd`` output -> library name: resolved path, or None when it was not found."""
    libraries: Dict[str, Optional[str]] = {}
    for line in text.splitlines():
        name, arrow, target = line.strip().partition(" => ")
        if not arrow:
            continue
        target = target.strip()
        libraries[name.strip()] = None if target.startswith("not found") else target.split(" (")[0].strip()
    return libraries


def judge_stub_libraries(libraries: Mapping[str, Optional[str]], python_libdir: pathlib.Path,
                         realpath: Callable[[str], str] = os.path.realpath,
                         server_libdirs: Sequence[pathlib.Path] = ()) -> CheckResult:
    """Every library the stub needs resolves, and its libpython is the running interpreter's.

    `server_libdirs`: the server's own library folders. The bundled stub for Python 3.13 links a
    copy of libpython that its wheel carries there, under a name the wheel's packaging changed
    (``libpython3-419a3a08.13.so.1.0``): said as such, not as a stray path."""
    name = "stub libraries"
    missing = sorted(library for library, path in libraries.items() if path is None)
    if missing:
        return CheckResult(name, Verdict.FAIL, f"the Python-backend stub cannot find {', '.join(missing)}",
                           "install the missing libraries, or reinstall pytriton so the server tree holds its lib/ "
                           "folder again")
    libpython = {library: path for library, path in libraries.items() if library.startswith("libpython")}
    if not libpython:
        return CheckResult(name, Verdict.FAIL, "the stub links no libpython (not a Python-backend stub?)",
                           f"point {TRITON_SERVER_DIR} at a complete Triton installation")
    expected = realpath(str(python_libdir))
    own = {realpath(str(folder)) for folder in server_libdirs}
    for library, path in libpython.items():
        assert path is not None  # the missing ones were reported above
        if os.path.dirname(realpath(path)) in own:
            return CheckResult(name, Verdict.FAIL,
                               f"the stub would load the server's own copy of libpython ({path}, renamed when the "
                               f"server's wheel was packaged), not this Python's from {python_libdir}",
                               f"set {TRITON_SERVER_DIR} to a Triton whose Python-backend stub links this Python's "
                               "libpython")
        if os.path.dirname(realpath(path)) != expected:
            return CheckResult(name, Verdict.FAIL,
                               f"the stub would load {library} from {path}, not from this Python's {python_libdir}; "
                               "another build of the same version fails model loading",
                               f"make sure {python_libdir} holds {library} (pytriton puts it first on "
                               "LD_LIBRARY_PATH), or run pytriton with the Python that owns this library")
    found = ", ".join(f"{library} => {path}" for library, path in libpython.items())
    return CheckResult(name, Verdict.PASS, f"{len(libraries)} libraries resolve; {found}")


def check_stub_libraries(distribution: ServerDistribution, timeout_s: float) -> CheckResult:
    ldd = shutil.which("ldd")
    if ldd is None:
        return CheckResult("stub libraries", Verdict.WARN, "ldd is not installed, so the stub's libraries were "
                           "not looked at; the server-start check covers the server only",
                           "install ldd (Debian package libc-bin) to check them")
    try:
        env = server_environment(distribution)
        done = subprocess.run([ldd, str(distribution.stub)], env=env, capture_output=True, text=True,
                              timeout=timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired, PyTritonError) as exc:
        return CheckResult("stub libraries", Verdict.FAIL, f"ldd {distribution.stub} failed: {exc}",
                           "reinstall pytriton")
    return judge_stub_libraries(parse_ldd(done.stdout + done.stderr), libpython_dir(),
                                server_libdirs=distribution.library_dirs)


NUMPY_1_PYTHONS = ((3, 8), (3, 12))
"""The Python versions NumPy 1.x was released for: 1.26, its last, stops at 3.12."""


def judge_numpy(version: Optional[str], origin: str, python: Tuple[int, int] = sys.version_info[:2]) -> CheckResult:
    """The NumPy the stub imports: the 2.51 stubs need 1.x (NumPy 2 corrupts tensors silently).
    On a Python NumPy 1.x was never released for (3.13), no install can give the stub one."""
    major = (version or "").split(".")[0]
    if python > NUMPY_1_PYTHONS[1] and (version is None or not major.isdigit() or int(major) >= 2):
        tag = "{}.{}".format(*python)
        found = f"NumPy {version}" if version is not None else "no NumPy"
        return CheckResult("stub numpy", Verdict.FAIL,
                           f"the stub would import {found} ({origin}); Triton 2.51's stubs need NumPy 1.x, which has "
                           f"no release for Python {tag}, so the proxy path cannot serve on this Python",
                           f"for the proxy path, run Python 3.8 to 3.12, or set {TRITON_SERVER_DIR} to a Triton "
                           f"whose Python backend was built for Python {tag} and NumPy 2; pytriton's own backend "
                           f"(the default where pytriton was built with a C compiler) serves Python {tag} as it is")
    if version is None:
        return CheckResult("stub numpy", Verdict.FAIL, f"no NumPy found for the stub ({origin})",
                           "install numpy<2 into this environment, or reinstall pytriton so its build bundles "
                           "NumPy 1.x for the stub")
    if not major.isdigit() or int(major) >= 2:
        return CheckResult("stub numpy", Verdict.FAIL,
                           f"the stub would import NumPy {version} ({origin}); the Triton 2.51 stubs are built for "
                           "NumPy 1.x and hand models wrong or empty tensors under NumPy 2",
                           "use Python 3.8-3.12 and reinstall pytriton (its build bundles NumPy 1.x for the stub), "
                           f"install numpy<2, or set {TRITON_SERVER_DIR} to a Triton built for NumPy 2")
    return CheckResult("stub numpy", Verdict.PASS, f"NumPy {version} ({origin})")


def check_stub_numpy(distribution: ServerDistribution) -> CheckResult:
    from importlib import metadata

    if distribution.stub_python_path is not None:
        for found in metadata.distributions(path=[str(distribution.stub_python_path)]):
            if (found.metadata["Name"] or "").lower() == "numpy":
                return judge_numpy(found.version, f"bundled for the stub in {distribution.stub_python_path}")
    try:
        import numpy
    except ImportError:
        return judge_numpy(None, "this environment has none")
    return judge_numpy(numpy.__version__, f"this environment's, {pathlib.Path(numpy.__file__).parent}")


# --- a throwaway server ---------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _scrape_metrics(port: int, deadline: float) -> Optional[str]:
    """None once ``/metrics`` on `port` answers with Triton's families (it opens last), else why not."""
    why = "no answer"
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as response:
                if b"nv_" in response.read():
                    return None
                why = "an answer without Triton's nv_* families"
        except OSError as exc:
            why = str(exc)
        if time.monotonic() > deadline:
            return why
        time.sleep(0.1)


def check_server_start(distribution: ServerDistribution, timeout_s: float) -> CheckResult:
    """Start tritonserver on an empty explicit model repository and free ports until it is ready."""
    name = "server start"
    http, grpc, metrics = (_free_port() for _ in range(3))
    config = TritonConfig(http_address="127.0.0.1", http_port=http, grpc_address="127.0.0.1", grpc_port=grpc,
                          metrics_address="127.0.0.1", metrics_port=metrics, exit_timeout_secs=2)
    started = time.monotonic()
    workspace = Workspace()
    process: Optional[ServerProcess] = None
    try:
        argv = build_argv(config, binary=distribution.binary, model_repository=workspace.model_repository,
                          backend_directory=assemble_backends(distribution, workspace.backends),
                          cache_directory=distribution.caches, shm_region_prefix=f"{workspace.shm_prefix}-tpb")
        process = ServerProcess(argv, server_environment(distribution))
        process.start()
        control = ServerControl(http_address="127.0.0.1", http_port=http, grpc_address="127.0.0.1", grpc_port=grpc)
        ready = wait_for(control.is_ready, started + timeout_s, process.is_running)
        control.close()
        elapsed = time.monotonic() - started
        if ready:
            detail = f"{distribution.binary.name} ready in {elapsed:.1f} s"
            scraped = _scrape_metrics(metrics, started + timeout_s)
            if scraped is not None:
                return CheckResult(name, Verdict.WARN, f"{detail}, but its metrics port did not answer: {scraped}",
                                   "metrics (Triton's and pytriton's) will be missing: look for another process "
                                   "on the metrics port, or a firewall on 127.0.0.1")
            return CheckResult(name, Verdict.PASS, f"{detail}; its metrics port answers")
        if process.is_running():
            why = f"it did not become ready within {timeout_s:.0f} s"
        else:
            why = f"it exited with code {process.returncode}"
        errors = " | ".join(process.output()[-6:])
        return CheckResult(name, Verdict.FAIL, f"tritonserver failed to start: {why}. Its last output: {errors}",
                           "read the server output quoted here: a missing library or a too old glibc shows there")
    except (OSError, PyTritonError) as exc:
        return CheckResult(name, Verdict.FAIL, f"tritonserver could not be started: {exc}", "reinstall pytriton")
    finally:
        if process is not None:
            process.stop(timeout_s=10)
        workspace.cleanup()


_PROXY_CHECKS = ("libpython", "stub libraries", "stub numpy")


def native_serves(distribution: ServerDistribution, setting: Optional[str]) -> bool:
    """Whether pytriton's own backend serves the models: built, and not turned off by `setting`
    (``PYTRITON_TRITON_CONFIG_MODEL_BACKEND``)."""
    return distribution.native_backend is not None and (setting or "").strip().lower() != "python"


def judge_backend(distribution: ServerDistribution, setting: Optional[str]) -> CheckResult:
    """Which Triton backend serves the models: pytriton's own (built, and not turned off) or the proxy."""
    if native_serves(distribution, setting):
        return CheckResult("backend", Verdict.PASS, f"pytriton's own: {distribution.native_backend}")
    if distribution.native_backend is not None:
        return CheckResult("backend", Verdict.PASS, "the proxy in Triton's Python backend "
                           f"({ENV_PREFIX}MODEL_BACKEND=python); pytriton's own is built")
    return CheckResult("backend", Verdict.WARN, "the proxy in Triton's Python backend: pytriton's own backend was "
                       "not built (no C compiler when pytriton was installed)",
                       "install a C compiler (e.g. apt-get install gcc) and reinstall pytriton: requests then cross "
                       "no stub process, and any Python serves")


def proxy_only(result: CheckResult) -> CheckResult:
    """A stub check that did not pass, as a fact (INFO) where pytriton's own backend serves: that
    backend runs no stub, so nothing is wrong with this machine; the line says what serves, and
    what only the proxy path (``model_backend="python"``) would need."""
    if result.name not in _PROXY_CHECKS or result.verdict in (Verdict.PASS, Verdict.INFO):
        return result
    remedy = result.remedy
    if remedy and not remedy.startswith("for the proxy path"):
        remedy = f"for the proxy path: {remedy}"
    return CheckResult(result.name, Verdict.INFO,
                       "pytriton's own backend serves here and runs no Python-backend stub; only the proxy path "
                       f"(TritonConfig(model_backend=\"python\")) would need this: {result.detail}", remedy)
