"""LitServe's own environment for the continuous-batching peer, built once in the bench's cache.

LitServe is never a dependency of pytriton (nor in the lock, constraints.txt): the bench makes a
virtual environment of its own, ``${PYTRITON_CACHE_DIR:-${XDG_CACHE_HOME:-~/.cache}/pytriton}/
bench/litserve-venv``, from the interpreter running the bench, and installs ``litserve==0.2.19``
from the package index with pip (which brings fastapi, uvicorn and pyzmq). A stamp file names the
version installed; a missing stamp (a broken or older environment) builds it again.
"""

from __future__ import annotations

import json
import pathlib
import shutil
import subprocess
import sys
from typing import Any, Dict

from perfanalyzer import BenchError, cache_dir

LITSERVE_VERSION = "0.2.19"


def environment() -> pathlib.Path:
    return cache_dir() / "litserve-venv"


def ensure(log: pathlib.Path) -> pathlib.Path:
    """The Python of LitServe's environment, built first if needed (pip's output goes to `log`)."""
    venv = environment()
    python = venv / "bin" / "python"
    stamp = venv / f".litserve-{LITSERVE_VERSION}"
    if python.is_file() and stamp.is_file():
        return python
    shutil.rmtree(venv, ignore_errors=True)
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as output:
        pip = [str(python), "-m", "pip", "install", "--disable-pip-version-check", f"litserve=={LITSERVE_VERSION}"]
        for argv in ([sys.executable, "-m", "venv", str(venv)], pip):
            status = subprocess.run(argv, stdout=output, stderr=subprocess.STDOUT, check=False).returncode
            if status != 0:
                shutil.rmtree(venv, ignore_errors=True)
                raise BenchError(f"building LitServe's environment failed: `{' '.join(argv)}` exited with {status}; "
                                 f"see {log}")
    stamp.write_text(f"litserve=={LITSERVE_VERSION}\n")
    return python


def versions(python: pathlib.Path) -> Dict[str, Any]:
    """The versions LitServe's environment runs (LitServe, FastAPI, uvicorn, Python)."""
    code = ("import json, platform, importlib.metadata as m; print(json.dumps({n: m.version(n) for n in "
            "('litserve', 'fastapi', 'uvicorn', 'pyzmq')} | {'python': platform.python_version()}))")
    try:
        done = subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=True, timeout=60)
        return dict(json.loads(done.stdout))
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        return {"error": repr(exc)}
