"""pytriton: serve Python inference callables through the NVIDIA Triton Inference Server.

The two flows, one folder each step:

* setup: ``model_config`` (what the user declares) -> ``repository`` (config.pbtxt on disk)
  -> ``binding`` (worker handlers and the model folder of each bound callable) -> ``server``
  (the tritonserver process) -> ``triton`` (the facade wiring them), or ``remote`` (the facade
  binding to a tritonserver that something else started);
* one request: ``client`` -> tritonserver -> pytriton's own Triton backend (``backend/``, C,
  inside tritonserver; or, on the proxy path, ``proxy`` inside Triton's Python backend)
  -> ``ipc`` (a SEQPACKET socket per instance, /dev/shm tensors; the C side reads the generated
  ``backend/contract.h``) -> ``worker`` (the user's process) -> ``decorators`` -> the user's
  callable, and back; a streaming callable's answers go back step by step through the backend's
  relay thread (``backend/relay.c``; on the proxy path ``proxy.relay``).

Two distributions install into this package: ``pytriton-client`` (this file, ``client``,
``model_config``, ``exceptions`` and the few modules they import; ``build_backend/client_set.py``
lists them) and ``pytriton``, the server side, which requires it. Where the client distribution
is installed alone, importing a server-side module raises a `ModuleNotFoundError` that says
which package to install.
"""

import os
import sys
from importlib.abc import MetaPathFinder
from importlib.machinery import ModuleSpec
from pkgutil import extend_path
from types import ModuleType
from typing import Optional, Sequence

__version__ = "0.1.0"

# The two distributions normally share one folder; where they do not (one in the user site, the
# other in a virtual environment with the system's packages), the package spans both.
__path__ = extend_path(__path__, __name__)

_SERVER_SIDE_MARKER = "triton.py"
"""A module of the full distribution: its absence tells a client-only install."""


class _ServerSideMissing(MetaPathFinder):
    """Last on `sys.meta_path` in a client-only install: a ``pytriton.*`` name no other finder
    found is one of the server side's (or a typo), and the import error says where it comes from."""

    def find_spec(
        self, fullname: str, path: Optional[Sequence[str]], target: Optional[ModuleType] = None
    ) -> Optional[ModuleSpec]:
        if not fullname.startswith(__name__ + "."):
            return None
        # No `name=`: `from pytriton import triton` would then drop this message for a bare
        # "cannot import name" (the import system ignores a fromlist's ModuleNotFoundError that
        # names the module it tried).
        raise ModuleNotFoundError(
            f"No module named {fullname!r}: this environment has pytriton-client {__version__}, pytriton's "
            "clients only (pytriton.client, pytriton.model_config, pytriton.exceptions). The server side "
            "(pytriton.triton, pytriton.decorators, pytriton.remote, ...) comes with the full package, pytriton, "
            f"which runs on Linux and is on no package index yet: {_full_package_hint()}"
        )


def _full_package_hint() -> str:
    """The pip line that installs the full package from where this pytriton-client came from."""
    from importlib import metadata

    try:
        from pytriton.install_hints import full_package_hint
    except ImportError:  # a pytriton-client older than this file: the hint is all that is lost
        return "install it from a checkout of pytriton's repository or from its git URL"
    try:
        recorded = metadata.distribution("pytriton-client").read_text("direct_url.json")
    except (metadata.PackageNotFoundError, OSError):
        recorded = None
    return full_package_hint(recorded)


if not any(os.path.isfile(os.path.join(folder, _SERVER_SIDE_MARKER)) for folder in __path__) and not any(
    type(finder).__name__ == _ServerSideMissing.__name__ for finder in sys.meta_path
):
    sys.meta_path.append(_ServerSideMissing())
