"""The readiness gate: a started server reports not ready until the script's models are loaded.

The published lifecycle starts tritonserver on entering ``with Triton()``, before any `bind`.
Triton's strict readiness is true for a server without models, so an orchestrator would send
traffic to a pod that serves nothing yet (and, between two `bind` calls, only some of the
script's models), whose requests fail with "unknown model".

Strict readiness is false while any model of the server is neither ready nor unloaded; Triton
2.51 counts a model that failed to load among those, and keeps counting it until a model of that
name loads. So the gate is in the model repository from the start, a model whose backend does
not exist (`closed_gate_config`): Triton tries to load it before it opens its ports, the load
fails at once, and the server answers not ready from its very first request, over HTTP and gRPC
alike (the start needs ``--exit-on-error=false`` for that failure: `startup_config`). Nothing
waits in a load, so a server whose owner dies during its start has nothing to finish before it
stops. The gate opens when a model of its name loads: a tiny model that loads at once (on
pytriton's backend a model without a worker; on the proxy path a Python model), after which the
server is ready once every other model is:

- a short while (`GRACE_S`) after a `bind` loaded its model, unless another `bind` starts
  meanwhile: a script that binds its models one after the other never looks ready with only the
  first ones;
- at once when `run()` or `serve()` is called with models bound.

The opened gate stays loaded and idle (on the proxy path its stub holds 20 MiB): unloading it
would keep the server not ready for the second Triton takes to unload a model.

A user who asks Triton to exit on any start-up error (``TritonConfig(exit_on_error=True)``) gets
the earlier gate instead: loaded through the API once the server answers, its initialize waits
for a file (the backend's gives up when this process is gone); between the ports opening and that
load the server looks ready for a few milliseconds.

Models bound before the server starts (a lifecycle policy that waits for `run()`) are loaded
before Triton opens its ports, so they need no gate. A `RemoteTriton` binds into a server that
another process owns, and leaves its readiness to that process.
"""

from __future__ import annotations

import dataclasses
import logging
import pathlib
import shutil
import threading
import time
from typing import Any, Callable, Dict, Optional, Sequence, Tuple

from pytriton import client_contract
from pytriton.exceptions import PyTritonServerError
from pytriton.server.config import TritonConfig
from pytriton.server.control import gate_parameters, placeholder_config

logger = logging.getLogger("pytriton.server")

GATE_MODEL = "pytriton_readiness_gate"
"""The gate's model name (refused as a user's model name)."""
GRACE_S = 0.25
"""How long after a `bind` loaded its model the gate waits for another `bind` before opening."""
_HOLD_S = 7 * 24 * 3600.0
"""The earlier gate's load call waits this long at most (the script decides when it opens)."""
_OPEN_WAIT_S = 10.0
_CLOSED_BACKEND = "pytriton_readiness_gate_closed"
"""A backend no server has: the closed gate's load fails at once, whatever the server holds."""


STOPPING_MODEL = client_contract.STOPPING_MODEL
"""The model a stop fails to load, so that the server reports not ready from the stop's start (and
pytriton's clients, waiting for a model, see that the server stops)."""
RESERVED_MODELS = frozenset({GATE_MODEL, STOPPING_MODEL})


def hold_not_ready(control: Any, repository: pathlib.Path, timeout_s: float = 2.0) -> None:
    """At a stop's start, make the server report not ready at once, over HTTP and gRPC alike.

    Triton's own shutdown leaves gRPC's readiness true until the end, and pytriton signals it
    only once the accepted requests are answered; a model that fails to load makes strict
    readiness false (the same effect as the closed gate), and its load costs milliseconds. The
    model is written into the server's `repository` and loaded from there: a load that sends its
    files instead makes Triton copy them into a ``/tmp/folder*`` it never removes.
    """
    folder = repository / STOPPING_MODEL
    (folder / "1").mkdir(parents=True, exist_ok=True)
    (folder / "config.pbtxt").write_text(stopping_config())
    try:
        control.load_model(STOPPING_MODEL, timeout_s)
    except PyTritonServerError:
        return  # failed, as it should
    logger.debug("the stopping model loaded: readiness stays as it was")


def stopping_config() -> str:
    """The config.pbtxt of the stopping model: one of a backend no server has, so its load fails."""
    return closed_gate_config().replace(f'name: "{GATE_MODEL}"', f'name: "{STOPPING_MODEL}"', 1)


def closed_gate_config() -> str:
    """The config.pbtxt of the gate as the server starts with it: a model that cannot load."""
    return (
        f'name: "{GATE_MODEL}"\n'
        f'backend: "{_CLOSED_BACKEND}"\n'
        "max_batch_size: 0\n"
        'input { name: "x" data_type: TYPE_BOOL dims: 1 }\n'
        'output { name: "y" data_type: TYPE_BOOL dims: 1 }\n'
        "instance_group { kind: KIND_CPU count: 1 }\n"
    )


def startup_config(config: TritonConfig, repository: pathlib.Path) -> Tuple[TritonConfig, Optional[pathlib.Path]]:
    """The config to start a server without models with, after putting the closed gate in
    `repository`; and the gate's folder (None: the user wants Triton to exit on start-up errors,
    so the earlier gate, loaded later, holds readiness instead)."""
    if config.exit_on_error:
        return config, None
    folder = repository / GATE_MODEL
    (folder / "1").mkdir(parents=True, exist_ok=True)
    (folder / "config.pbtxt").write_text(closed_gate_config())
    return dataclasses.replace(config, exit_on_error=False), folder


def gate_model(backend: str, release_path: str, import_paths: Sequence[str] = ()) -> Tuple[str, Dict[str, bytes]]:
    """The gate's configuration and files, as its load call sends them.

    On pytriton's backend the gate is a model without a worker whose initialize returns once
    `release_path` exists, or fails once this process (which owns the server) is gone. On the
    proxy path it is a Python model whose initialize waits for the same file.
    """
    instances = [{"kind": "KIND_CPU", "count": 1}]
    if backend == "python":
        return (placeholder_config(GATE_MODEL, instance_group=instances),
                {"1/model.py": gate_model_py(release_path, import_paths)})
    config = placeholder_config(GATE_MODEL, backend=backend, instance_group=instances,
                                parameters=gate_parameters(release_path))
    return config, {"1/GATE.txt": b"pytriton's readiness gate: loaded once the script's models are bound\n"}


def gate_model_py(release_path: str, import_paths: Sequence[str] = ()) -> bytes:
    """The gate's model.py: ``initialize`` returns once `release_path` exists (or the server is gone).

    `import_paths` go first on the stub's path, as for the proxy's model.py: the stub imports
    Triton's ``triton_python_backend_utils`` after this file, and that needs NumPy.
    """
    return (
        '"""pytriton\'s readiness gate: while this model loads, the server reports not ready."""\n'
        "import os\nimport sys\nimport time\n\n"
        f"for _path in reversed({list(import_paths)!r}):\n"
        "    if _path not in sys.path:\n"
        "        sys.path.insert(0, _path)\n\n\n"
        "class TritonPythonModel:\n"
        "    def initialize(self, args):\n"
        "        server = os.getppid()\n"
        f"        while not os.path.exists({release_path!r}) and os.getppid() == server:\n"
        "            time.sleep(0.01)\n\n"
        "    def execute(self, requests):\n"
        "        return []\n"
    ).encode()


class ReadinessGate:
    """Holds one started server not ready until `open` (see the module docstring).

    Args:
        control: the server's `ServerControl`.
        release_path: the file whose creation lets the gate model load (in the server's private
            workspace).
        import_paths: the folders the stub imports NumPy from (`distribution.proxy_import_paths`).
        backend: the Triton backend the gate is a model of: ``pytriton`` (no stub) or ``python``.
        closed_folder: the closed gate's folder in the repository the server started with
            (`startup_config`); None: the earlier gate, loaded by `close`.
    """

    def __init__(self, control: Any, release_path: pathlib.Path, import_paths: Sequence[str] = (),
                 backend: str = "python", closed_folder: Optional[pathlib.Path] = None) -> None:
        self._control = control
        self._release_path = release_path
        self._import_paths = tuple(import_paths)
        self._backend = backend
        self._closed_folder = closed_folder
        self._closed_at_start = closed_folder is not None
        self._thread: Optional[threading.Thread] = None
        self._timer: Optional[threading.Timer] = None
        self._lock = threading.Lock()
        self._opened = False
        self._loaded = threading.Event()  # the gate's load call returned: it no longer holds readiness

    def close(self, deadline: float, alive: Callable[[], bool]) -> Callable[[], bool]:
        """Hold the starting server not ready: nothing to do for a gate closed from the start;
        the earlier gate is loaded as soon as the server answers (from a thread of its own).

        Args:
            deadline: when to give up waiting for the server to answer.
            alive: whether the server process still runs.

        Returns:
            `holding`: what the start waits for instead of readiness.
        """
        target = self._hold_from_start if self._closed_at_start else self._hold
        self._thread = threading.Thread(target=target, args=(deadline, alive), name="pytriton-readiness-gate",
                                        daemon=True)
        self._thread.start()
        return self.holding

    def holding(self) -> bool:
        """Whether the started server answers and holds not ready (or the gate gave up and the
        server is ready): what the start waits for instead of readiness."""
        if self._loaded.is_set():
            return bool(self._control.is_ready(timeout_s=1.0))
        return self._control.is_live(timeout_s=1.0) and not self._control.is_ready(timeout_s=1.0)

    def _hold_from_start(self, deadline: float, alive: Callable[[], bool]) -> None:
        """The closed gate holds by itself: once the server answers (its start-up load of the
        gate failed), take the gate's folder out of the repository, so that the repository
        index lists the script's models only; load the open gate once `open` lets it."""
        self._release_path.parent.mkdir(parents=True, exist_ok=True)
        folder_gone = False
        while not self._release_path.exists():
            if not folder_gone and self._control.is_live(timeout_s=0.5):
                assert self._closed_folder is not None
                shutil.rmtree(self._closed_folder, ignore_errors=True)
                folder_gone = True
            if time.monotonic() > deadline and not folder_gone or not alive():
                self._loaded.set()
                return
            time.sleep(0.01)
        self._load_gate()

    def _hold(self, deadline: float, alive: Callable[[], bool]) -> None:
        # The server opens its endpoints and is ready at once: every poll between then and the
        # gate's load is a window in which it looks ready, so poll often.
        while not self._control.is_live(timeout_s=0.5):
            if time.monotonic() > deadline or not alive():
                self._loaded.set()
                return
            time.sleep(0.002)
        self._load_gate()

    def _load_gate(self) -> None:
        try:
            # One instance, on the CPU, GPU or not. The earlier gate's files go with its load
            # call (no folder in the repository, so Triton neither loads it at start nor lists it).
            config, files = gate_model(self._backend, str(self._release_path), self._import_paths)
            if self._closed_folder is not None:
                # Into the repository, the load sending only its configuration: a load that sends
                # files makes Triton copy them into a /tmp/folder* it never removes.
                for relative, content in files.items():
                    path = self._closed_folder / relative
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.write_bytes(content)
                files = {}
            try:
                self._control.load_model(GATE_MODEL, _HOLD_S, config, files)
            finally:
                if self._closed_folder is not None:  # loaded (or not): the index lists the script's models only
                    shutil.rmtree(self._closed_folder, ignore_errors=True)
        except PyTritonServerError as exc:
            if not self._opened:
                logger.warning("pytriton's readiness gate failed (%s): the server may report ready before its models "
                               "are loaded", exc)
            # A failed load would keep a strict server unready for good: clear its record.
            self._control.forget_failed_model(GATE_MODEL, _OPEN_WAIT_S, self._backend)
        finally:
            self._loaded.set()

    def hold(self) -> None:
        """A `bind` starts: an opening scheduled by the one before waits for this one's load."""
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None

    def open_soon(self, delay_s: float = GRACE_S) -> None:
        """Open after `delay_s`, unless `hold` comes first."""
        with self._lock:
            if self._opened or self._thread is None:
                return
            if self._timer is not None:
                self._timer.cancel()
            self._timer = threading.Timer(delay_s, self.open)
            self._timer.daemon = True
            self._timer.start()

    def open(self, wait: bool = False) -> None:
        """Let the server report ready (its strict readiness: every loaded model ready).

        Args:
            wait: return only once the gate's load completed (the server may then be ready).
        """
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            if self._opened or self._thread is None:
                return
            self._opened = True
            try:
                self._release_path.touch()
            except OSError as exc:  # the workspace is gone: the server stops anyway
                logger.debug("could not open the readiness gate: %s", exc)
        if wait:
            self._loaded.wait(_OPEN_WAIT_S)

    def release(self) -> None:
        """At stop: let a gate still loading return (Triton's shutdown would wait for it); a gate
        closed from the start is not loaded any more."""
        if self._closed_at_start:
            with self._lock:
                self._opened = True
            self._loaded.set()
            return
        self.open()
