"""Where the tritonserver binary, its Python backend and libraries are, and how to run them.

By default the server tree bundled at build time in ``pytriton/tritonserver`` is used. Users who
bring their own Triton (for example the one in NVIDIA's server container at
``/opt/tritonserver``) set ``PYTRITON_TRITON_SERVER_DIR`` to its root.

The Python-backend stub embeds a Python interpreter linked to ``libpython3.X.so`` by name; the
running interpreter's own library must be found first, or the loader may pick another build of
the same minor version and the model fails to load in obscure ways.

The stubs of Triton 2.51 are built against NumPy 1.x: with NumPy 2 in the stub, tensors
silently come through with wrong or empty data. The build therefore bundles a NumPy 1.x for the
stub alone in ``tritonserver/stub_python/<X.Y>``; the user's process keeps its own NumPy.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import shutil
import sys
import sysconfig
from typing import Dict, List, Mapping, Optional, Tuple

from pytriton.environment import BACKEND_LIBRARY, SERVER_LD_PRELOAD, TRITON_CONFIG_PREFIX, TRITON_SERVER_DIR
from pytriton.exceptions import PyTritonServerStartupError

BUNDLED_ROOT = pathlib.Path(__file__).resolve().parent.parent / "tritonserver"
NATIVE_BACKEND = "pytriton"
"""The name models give pytriton's own backend (``backend: "pytriton"``)."""
NATIVE_LIBRARY = BUNDLED_ROOT / "backends" / NATIVE_BACKEND / f"libtriton_{NATIVE_BACKEND}.so"
"""Where the build puts pytriton's backend (`build_backend/native.py`), whichever server runs it."""
@dataclasses.dataclass(frozen=True)
class ServerDistribution:
    """The files of one Triton installation that a server start needs.

    `stub` is None where the installation has no Python-backend stub fit for this Python, and
    `stub_problem` says why the proxy path cannot run here: only that path needs a stub, so the
    error comes when the path is chosen (`serving_backend`), not on pytriton's backend.
    """

    root: pathlib.Path
    binary: pathlib.Path
    python_backend: pathlib.Path  # folder holding libtriton_python.so and triton_python_backend_utils.py
    stub: Optional[pathlib.Path]  # triton_python_backend_stub for the running Python
    caches: pathlib.Path
    library_dirs: Tuple[pathlib.Path, ...]
    stub_python_path: Optional[pathlib.Path] = None  # site folder with the stub's own NumPy 1.x
    native_backend: Optional[pathlib.Path] = None  # pytriton's backend library, when it was built
    stub_problem: Optional[str] = None  # why the proxy path cannot run here (None: it can)




def native_library(environ: Mapping[str, str] = os.environ) -> Optional[pathlib.Path]:
    """pytriton's backend library, or None when the build had no C compiler."""
    library = pathlib.Path(environ[BACKEND_LIBRARY]) if environ.get(BACKEND_LIBRARY) else NATIVE_LIBRARY
    return library if library.is_file() else None


def serving_backend(distribution: ServerDistribution, setting: Optional[str] = None) -> str:
    """The Triton backend a server's models are written for: pytriton's where it was built,
    unless `setting` (``TritonConfig.model_backend``) says ``python``.

    Raises:
        PyTritonServerStartupError: pytriton's backend is asked for but was not built, or the
            proxy path is needed (chosen, or no backend was built) but cannot run here.
    """
    if setting == NATIVE_BACKEND and distribution.native_backend is None:
        raise PyTritonServerStartupError(
            f"TritonConfig(model_backend={NATIVE_BACKEND!r}) asks for pytriton's own Triton backend, but this "
            f"installation has none ({NATIVE_LIBRARY} is missing: the package was built without a C compiler); "
            "install a C compiler (e.g. apt-get install gcc) and reinstall pytriton, or leave model_backend unset"
        )
    if setting == "python" or distribution.native_backend is None:
        if distribution.stub_problem is not None:
            raise PyTritonServerStartupError(distribution.stub_problem)
        return "python"
    return NATIVE_BACKEND


def remote_backend(distribution: ServerDistribution, environ: Mapping[str, str] = os.environ) -> str:
    """The backend a `RemoteTriton` first writes its models for: pytriton's where this installation
    built it (the server may lack it: see `lacks_backend`), unless the environment's
    ``PYTRITON_TRITON_CONFIG_MODEL_BACKEND`` says ``python``."""
    if environ.get(TRITON_CONFIG_PREFIX + "MODEL_BACKEND", "").strip().lower() == "python":
        return "python"
    return NATIVE_BACKEND if distribution.native_backend is not None else "python"


def lacks_backend(reason: str) -> bool:
    """Whether a load failed because the server cannot run pytriton's backend (none in its
    backend directory, or one whose API version it refuses)."""
    return f"libtriton_{NATIVE_BACKEND}.so" in reason or f"'{NATIVE_BACKEND}'" in reason and "backend" in reason


def server_version(root: pathlib.Path) -> Optional[str]:
    """The Triton server version of the installation at `root`, or None when it does not say.

    The bundled tree records it in ``VERSION`` (``... triton-server=2.51.0 ...``); NVIDIA's
    containers in ``TRITON_VERSION``.
    """
    try:
        text = (root / "VERSION").read_text()
    except OSError:
        text = ""
    for part in text.split():
        if part.startswith("triton-server="):
            return part.split("=", 1)[1]
    try:
        return (root / "TRITON_VERSION").read_text().strip() or None
    except OSError:
        return None


def python_version_tag() -> str:
    return f"{sys.version_info.major}.{sys.version_info.minor}"


def find_distribution(environ: Mapping[str, str] = os.environ) -> ServerDistribution:
    """The Triton installation to use: ``$PYTRITON_TRITON_SERVER_DIR`` or the bundled one.

    A missing stub for this Python, NumPy 2 where the stub needs 1.x, or a Python without a
    shared libpython do not stop pytriton's own backend: they are kept as `stub_problem`, which
    `serving_backend` raises when the proxy path is needed.

    Raises:
        PyTritonServerStartupError: the binary or the Python backend is missing.
    """
    configured = environ.get(TRITON_SERVER_DIR)
    root = pathlib.Path(configured).expanduser() if configured else BUNDLED_ROOT
    binary = root / "bin" / "tritonserver"
    if not binary.is_file():
        if configured:
            raise PyTritonServerStartupError(
                f"{TRITON_SERVER_DIR}={configured!r} has no bin/tritonserver; point it at the root of a Triton "
                "installation (the folder holding bin/, backends/ and lib/, e.g. /opt/tritonserver)"
            )
        raise PyTritonServerStartupError(
            f"the bundled Triton server is missing ({binary} not found); reinstall pytriton with pip so its build "
            f"fetches the server, or set {TRITON_SERVER_DIR} to an existing Triton installation"
        )
    python_backend = root / "backends" / "python"
    if not (python_backend / "libtriton_python.so").is_file():
        raise PyTritonServerStartupError(f"the Triton installation at {root} has no Python backend ({python_backend})")
    tag = python_version_tag()
    stubs = root / "python_backend_stubs"
    # The bundled tree has one stub per Python version; an installation such as NVIDIA's container
    # has a single stub, built for its own Python, beside the backend.
    stub_folder = stubs / tag if stubs.is_dir() else python_backend
    stub: Optional[pathlib.Path] = stub_folder / "triton_python_backend_stub"
    stub_python = root / "stub_python" / tag
    problem = None
    assert stub is not None
    if not stub.is_file():
        available = sorted(p.parent.name for p in stubs.glob("*/triton_python_backend_stub")) if stubs.is_dir() else []
        problem = (
            f"Python {tag} is not supported by Triton's Python backend at {root}: it has stubs for "
            f"{available or 'no version'}. pytriton's own backend serves any Python: build pytriton with a C "
            "compiler and leave TritonConfig.model_backend unset, or run with one of those Python versions"
        )
        stub = None
    elif stubs.is_dir() and not stub_python.is_dir():
        problem = _stub_numpy_problem(tag)
    if problem is None:
        problem = _libpython_problem()
    library_dirs = tuple(d for d in (root / "lib",) if d.is_dir())
    return ServerDistribution(
        root, binary, python_backend, stub, root / "caches", library_dirs,
        stub_python if stub_python.is_dir() else None, native_library(environ), problem,
    )


def _stub_numpy_problem(tag: str) -> Optional[str]:
    """Why the 2.51 stubs cannot run here: NumPy 2 in them corrupts tensors without an error."""
    import numpy

    if int(numpy.__version__.split(".")[0]) < 2:
        return None
    # NumPy 1.x stops at Python 3.12 (1.26): past it, no install gives the stub one.
    numpy_1 = "" if sys.version_info[:2] > (3, 12) else ", numpy<2"
    never = f" (NumPy 1.x has no release for Python {tag})" if not numpy_1 else ""
    return (
        f"the bundled Triton 2.51 Python-backend stub needs NumPy 1.x, but the build bundled none for Python "
        f"{tag}{never} and this environment has NumPy {numpy.__version__}; use pytriton's own backend (the default "
        "where the package was built with a C compiler), Python 3.8-3.12 (the build then bundles NumPy 1.x for "
        f"the stub){numpy_1}, or PYTRITON_TRITON_SERVER_DIR set to a Triton built for Python {tag} and NumPy 2"
    )


def _libpython_problem() -> Optional[str]:
    try:
        libpython_dir()
    except PyTritonServerStartupError as exc:
        return exc.message
    return None


def libpython_dir() -> pathlib.Path:
    """Folder of the running interpreter's shared libpython, which the stub must load.

    Raises:
        PyTritonServerStartupError: this Python was built without a shared libpython.
    """
    libdir = sysconfig.get_config_var("LIBDIR") or ""
    library = sysconfig.get_config_var("LDLIBRARY") or ""
    enabled = sysconfig.get_config_var("Py_ENABLE_SHARED")
    if not enabled or not library.endswith(".so") and ".so." not in library:
        raise PyTritonServerStartupError(
            f"this Python ({sys.executable}, {python_version_tag()}) was built without a shared libpython, which "
            "Triton's Python-backend stub needs to run the proxy model. Use a Python built with --enable-shared: "
            "e.g. Debian/Ubuntu's python3, conda, or pyenv with PYTHON_CONFIGURE_OPTS=--enable-shared"
        )
    return pathlib.Path(libdir)


def assemble_backends(distribution: ServerDistribution, target: pathlib.Path) -> pathlib.Path:
    """Lay out a backend directory for this server, with the stub of the running Python.

    Triton looks for the stub next to ``libtriton_python.so`` in the backend directory, so each
    server gets its own folder of symbolic links, and a copy of the stub (1.4 MB) that belongs
    to the user who runs the server. Before each stub start, Triton runs the stub once through
    `system()` to see whether it can, and when that reports failure it makes the file
    owner-execute-only with `chmod`. `system()` always reports failure while SIGCHLD is ignored
    (see `pytriton.server.process`), so Triton changes the mode every time: on our own copy that
    works for any user, where on the installed file it changed the package for everyone (as
    root) or failed the load (as another user).

    Returns:
        The folder to pass as ``--backend-directory``.
    """
    python_dir = target / "python"
    python_dir.mkdir(parents=True, exist_ok=True)
    links = {
        "libtriton_python.so": distribution.python_backend / "libtriton_python.so",
        "triton_python_backend_utils.py": distribution.python_backend / "triton_python_backend_utils.py",
    }
    for name, source in links.items():
        link = python_dir / name
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(source)
    if distribution.native_backend is not None:
        native_dir = target / NATIVE_BACKEND
        native_dir.mkdir(parents=True, exist_ok=True)
        link = native_dir / f"libtriton_{NATIVE_BACKEND}.so"  # the name Triton looks for
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(distribution.native_backend)
    stub = python_dir / "triton_python_backend_stub"
    if stub.is_symlink() or stub.exists():
        stub.unlink()
    if distribution.stub is None:  # pytriton's backend only: no stub for this Python
        return target
    try:
        shutil.copyfile(distribution.stub, stub)
        stub.chmod(0o755)
    except OSError:  # an unreadable installed stub (a mode an older server left): link it as before
        stub.unlink(missing_ok=True)
        stub.symlink_to(distribution.stub)
    return target


def server_environment(
    distribution: ServerDistribution, base: Optional[Mapping[str, str]] = None
) -> Dict[str, str]:
    """Environment of the tritonserver process (and, inherited, of its stubs).

    ``LD_LIBRARY_PATH`` starts with the running interpreter's libpython folder (for the stubs;
    pytriton's backend needs none), then the server's libraries.
    """
    env = dict(os.environ if base is None else base)
    if env.get(SERVER_LD_PRELOAD):  # a sanitizer's runtime, for the server alone (``make asan``)
        env["LD_PRELOAD"] = env[SERVER_LD_PRELOAD]
    try:
        libpython = [str(libpython_dir())]
    except PyTritonServerStartupError:  # only the proxy path needs it, and it refuses to start without
        libpython = []
    library_path = [*libpython, *(str(d) for d in distribution.library_dirs)]
    if env.get("LD_LIBRARY_PATH"):
        library_path.append(env["LD_LIBRARY_PATH"])
    env["LD_LIBRARY_PATH"] = os.pathsep.join(library_path)
    return env


def proxy_import_paths(distribution: ServerDistribution) -> Tuple[str, ...]:
    """The folders the proxy imports from, in order.

    The stub's own NumPy first (when the installation has one), then the folders holding
    pytriton, numpy and pyzmq in the running environment.
    """
    import numpy
    import zmq

    paths: List[str] = [str(distribution.stub_python_path)] if distribution.stub_python_path else []
    for module in (sys.modules["pytriton"], numpy, zmq):
        parent = str(pathlib.Path(module.__file__).resolve().parent.parent)  # type: ignore[arg-type]
        if parent not in paths:
            paths.append(parent)
    return tuple(paths)
