"""The readiness gate: a started server reports not ready until the script's models are loaded.

The published lifecycle starts tritonserver on entering ``with Triton()``, before any `bind`.
Triton's strict readiness is true for a server without models, so an orchestrator would send
traffic to a pod that serves nothing yet (and, between two `bind` calls, only some of the
script's models), whose requests fail with "unknown model".

Triton reports not ready while any model is loading. So, when a server starts without models,
pytriton loads a tiny Python model, the gate, whose ``initialize`` waits until a file in the
workspace appears: until then the server is not ready, over HTTP and gRPC alike. The gate opens
(the file is written and the gate's load completes):

- a short while (`GRACE_S`) after a `bind` loaded its model, unless another `bind` starts
  meanwhile: a script that binds its models one after the other never looks ready with only the
  first ones;
- at once when `run()` or `serve()` is called with models bound;
- at `stop()`, so that Triton's shutdown does not wait for a model still loading.

The gate then stays loaded, idle (its stub process holds 20 MiB of its own, measured): unloading
it would keep the server not ready for the second Triton takes to unload a model.

Models bound before the server starts (a lifecycle policy that waits for `run()`) are loaded
before Triton opens its ports, so they need no gate. A `RemoteTriton` binds into a server that
another process owns, and leaves its readiness to that process.
"""

from __future__ import annotations

import logging
import os
import pathlib
import threading
import time
from typing import Any, Callable, Dict, Optional, Sequence, Tuple

from pytriton.exceptions import PyTritonServerError
from pytriton.server.control import placeholder_config

logger = logging.getLogger("pytriton.server")

GATE_MODEL = "pytriton_readiness_gate"
"""The gate's model name (refused as a user's model name)."""
GRACE_S = 0.25
"""How long after a `bind` loaded its model the gate waits for another `bind` before opening."""
_HOLD_S = 7 * 24 * 3600.0
"""The gate's load call waits this long at most (the script decides when it opens)."""
_OPEN_WAIT_S = 10.0


def gate_model(backend: str, release_path: str, import_paths: Sequence[str] = ()) -> Tuple[str, Dict[str, bytes]]:
    """The gate's configuration and files, as its load call sends them.

    On pytriton's backend the gate is a model without a worker whose initialize returns once
    `release_path` exists, or fails once this process (which owns the server) is gone, so that
    a server whose owner was killed during its start does not wait for the gate to shut down.
    """
    instances = [{"kind": "KIND_CPU", "count": 1}]
    if backend == "python":
        return (placeholder_config(GATE_MODEL, instance_group=instances),
                {"1/model.py": gate_model_py(release_path, import_paths)})
    parameters = {"pytriton.gate_release": {"string_value": release_path},
                  "pytriton.worker_pid": {"string_value": str(os.getpid())}}
    config = placeholder_config(GATE_MODEL, backend=backend, instance_group=instances, parameters=parameters)
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
        release_path: the file whose creation opens the gate (in the server's private workspace).
        import_paths: the folders the stub imports NumPy from (`distribution.proxy_import_paths`).
        backend: the Triton backend the gate is a model of: ``pytriton`` (no stub: the backend's
            initialize waits for the file, and gives up when this process is gone) or ``python``.
    """

    def __init__(self, control: Any, release_path: pathlib.Path, import_paths: Sequence[str] = (),
                 backend: str = "python") -> None:
        self._control = control
        self._release_path = release_path
        self._import_paths = tuple(import_paths)
        self._backend = backend
        self._thread: Optional[threading.Thread] = None
        self._timer: Optional[threading.Timer] = None
        self._lock = threading.Lock()
        self._opened = False
        self._loaded = threading.Event()  # the gate's load call returned: it no longer holds readiness

    def close(self, deadline: float, alive: Callable[[], bool]) -> None:
        """Load the gate as soon as the starting server answers (from a thread of its own).

        Args:
            deadline: when to give up waiting for the server to answer.
            alive: whether the server process still runs.
        """
        self._thread = threading.Thread(target=self._hold, args=(deadline, alive), name="pytriton-readiness-gate",
                                        daemon=True)
        self._thread.start()

    def holding(self) -> bool:
        """Whether the started server answers and holds not ready, its gate loading (or the gate
        gave up and the server is ready): what the start waits for instead of readiness."""
        if self._loaded.is_set():
            return bool(self._control.is_ready(timeout_s=1.0))
        return self._control.is_live(timeout_s=1.0) and not self._control.is_ready(timeout_s=1.0)

    def _hold(self, deadline: float, alive: Callable[[], bool]) -> None:
        # The server opens its endpoints and is ready at once: every poll between then and the
        # gate's load is a window in which it looks ready, so poll often.
        while not self._control.is_live(timeout_s=0.5):
            if time.monotonic() > deadline or not alive():
                self._loaded.set()
                return
            time.sleep(0.002)
        try:
            # Sent with its load call, with no folder in the repository: Triton neither loads it at
            # start nor lists it in the repository index. One instance, on the CPU, GPU or not.
            config, files = gate_model(self._backend, str(self._release_path), self._import_paths)
            self._control.load_model(GATE_MODEL, _HOLD_S, config, files)
        except PyTritonServerError as exc:
            if not self._opened:
                logger.warning("pytriton's readiness gate failed (%s): the server may report ready before its models "
                               "are loaded", exc)
            # A failed load would keep a strict server unready for good: clear its record.
            self._control.forget_failed_model(GATE_MODEL, _OPEN_WAIT_S)
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
