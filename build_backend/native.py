"""Compile pytriton's Triton backend (``pytriton/backend/*.c``) into the server tree.

The library goes to ``pytriton/tritonserver/backends/pytriton/libtriton_pytriton.so``, where
``pytriton.server.distribution.NATIVE_LIBRARY`` looks for it. It is one ``cc`` call over a few
C files with no dependency but libc: Triton's own functions stay unresolved in the library and
are supplied by the tritonserver that loads it (the bundled ``libtritonserver`` carries a hash
in its file name that a Triton server image does not, so linking against it would tie the
library to one build).

Without a C compiler the build says so in one line and goes on: the models are then served
through Triton's Python backend (the proxy path). Environment:

    CC: the compiler (default ``cc``).
    PYTRITON_BACKEND_CFLAGS: extra flags, e.g. ``-fsanitize=address -g`` (see ``make asan``).
    PYTRITON_NATIVE_WERROR=1 (or CI=true): warnings are errors, as in CI.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import List, Mapping, Optional

PROJECT_ROOT = Path(__file__).resolve().parent.parent
SOURCE_DIR = PROJECT_ROOT / "pytriton" / "backend"
LIBRARY_RELATIVE = Path("backends") / "pytriton" / "libtriton_pytriton.so"
BASE_FLAGS = ("-std=c11", "-O2", "-Wall", "-Wextra", "-fPIC", "-shared", "-fvisibility=hidden", "-pthread")
_TRUE = ("1", "true", "yes", "on")


class NativeBuildError(RuntimeError):
    """The compiler ran and failed: a bug to fix, not a missing tool."""


def _log(message: str) -> None:
    print(f"pytriton-build: {message}", file=sys.stderr, flush=True)


def sources(source_dir: Path = SOURCE_DIR) -> List[Path]:
    return sorted(source_dir.glob("*.c"))


def compiler(environ: Mapping[str, str] = os.environ) -> Optional[List[str]]:
    """The compiler command, or None when there is none on PATH."""
    command = shlex.split(environ.get("CC", "") or "cc")
    return command if command and shutil.which(command[0]) else None


def flags(environ: Mapping[str, str] = os.environ) -> List[str]:
    extra = shlex.split(environ.get("PYTRITON_BACKEND_CFLAGS", ""))
    strict = environ.get("PYTRITON_NATIVE_WERROR", "").lower() in _TRUE or environ.get("CI", "").lower() in _TRUE
    return [*BASE_FLAGS, *(["-Werror"] if strict else []), *extra]


def is_current(library: Path, source_dir: Path = SOURCE_DIR) -> bool:
    """Whether `library` exists and is newer than every source file."""
    try:
        built = library.stat().st_mtime
    except OSError:
        return False
    return all(path.stat().st_mtime <= built for path in [*sources(source_dir), *source_dir.glob("*.h")])


def build(output: Path, source_dir: Path = SOURCE_DIR, environ: Mapping[str, str] = os.environ) -> Optional[Path]:
    """Compile the backend into `output`; None (after one line saying so) without a compiler.

    Raises:
        NativeBuildError: the compiler failed (its output included).
    """
    command = compiler(environ)
    if command is None:
        _log("no C compiler (cc) found: pytriton's Triton backend is not built; models will be served through "
             "Triton's Python backend (install a C compiler and reinstall to serve them through pytriton's own)")
        return None
    output.parent.mkdir(parents=True, exist_ok=True)
    # Written beside the target and renamed: a running server keeps the library it loaded.
    fd, temporary = tempfile.mkstemp(prefix=".libtriton_pytriton-", suffix=".so", dir=str(output.parent))
    os.close(fd)
    argv = [*command, *flags(environ), "-o", temporary, *(str(path) for path in sources(source_dir))]
    result = subprocess.run(argv, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        os.unlink(temporary)
        raise NativeBuildError(f"compiling pytriton's backend failed ({' '.join(argv)}):\n{result.stderr}")
    if result.stderr.strip():
        _log(result.stderr.strip())
    os.chmod(temporary, 0o755)
    os.replace(temporary, output)
    _log(f"built {output}")
    return output


def ensure_built(server_dir: Path, environ: Mapping[str, str] = os.environ) -> Optional[Path]:
    """Build the backend into `server_dir` unless the library there is current."""
    output = server_dir / LIBRARY_RELATIVE
    if is_current(output) and not environ.get("PYTRITON_BACKEND_CFLAGS"):
        return output
    return build(output, environ=environ)


if __name__ == "__main__":  # `python build_backend/native.py [OUTPUT]`: build (e.g. for make asan)
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else PROJECT_ROOT / "pytriton" / "tritonserver" / LIBRARY_RELATIVE
    sys.exit(0 if build(target) is not None else 1)
