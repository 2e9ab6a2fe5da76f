"""The clients without the server: the ``pytriton-client`` wheel, installed alone into a fresh virtual
environment, calls a model that the full package serves here, and says what to install for the rest.

The wheel is built from this checkout (``pytriton-client/``, no download: the test environment's
setuptools); the environment gets the wheel and its dependencies from the package index or pip's
cache, and nothing else of pytriton (its Python runs isolated: no PYTHONPATH, no user site). One
environment serves the module; it is removed afterwards.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import textwrap
import zipfile
from email.parser import Parser
from pathlib import Path
from typing import Dict, Iterator

import numpy as np
import pytest
from support import grpc_url, http_url, server_config

from pytriton.decorators import batch
from pytriton.model_config import ModelConfig, Tensor
from pytriton.triton import Triton

pytestmark = [pytest.mark.functional, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]

# Run by the fresh environment's Python: argv[1], argv[2] are the server's HTTP and gRPC URLs.
CALLER = textwrap.dedent(
    """
    import asyncio
    import importlib.metadata
    import json
    import sys

    import numpy as np

    import pytriton
    from pytriton.client import AsyncioModelClient, ModelClient
    from pytriton.exceptions import PyTritonError
    from pytriton.model_config import ModelConfig, Tensor

    x = np.array([1.0, 2.5], dtype=np.float32)
    found = {"pytriton": pytriton.__file__, "config": repr(ModelConfig(max_batch_size=4)),
             "tensor": Tensor(name="x", dtype=np.float32, shape=(-1,)).name, "errors": PyTritonError.__name__}
    for url in sys.argv[1:3]:
        with ModelClient(url, "Double", init_timeout_s=60) as client:
            found["sync " + url.split(":")[0]] = client.infer_sample(x=x)["y"].tolist()

    async def call(url):
        async with AsyncioModelClient(url, "Double", init_timeout_s=60) as client:
            return (await client.infer_sample(x=x))["y"].tolist()

    for url in sys.argv[1:3]:
        found["asyncio " + url.split(":")[0]] = asyncio.run(call(url))
    for module in ("pytriton.triton", "pytriton.decorators"):
        try:
            __import__(module)
        except ModuleNotFoundError as exc:
            found[module] = str(exc)
    found["distributions"] = sorted(d.metadata["Name"] for d in importlib.metadata.distributions()
                                    if d.metadata["Name"].lower().startswith("pytriton"))
    print(json.dumps(found))
    """
)


def _run(argv, **kwargs) -> subprocess.CompletedProcess:
    result = subprocess.run(argv, capture_output=True, text=True, **kwargs)
    assert result.returncode == 0, f"{argv}: exit {result.returncode}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result


@pytest.fixture(scope="module")
def client_only() -> Iterator[Dict[str, Path]]:
    """The client wheel built from this checkout, and a fresh environment with it installed."""
    with tempfile.TemporaryDirectory(prefix="pytriton-client-only-") as folder:
        base = Path(folder)
        # No build isolation: this environment's setuptools builds it, nothing is downloaded.
        _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
              "--wheel-dir", str(base / "dist"), str(ROOT / "pytriton-client")], timeout=300)
        (wheel,) = (base / "dist").glob("*.whl")
        # Without pip of its own (ensurepip takes seconds): this pip installs into it (--python).
        _run([sys.executable, "-m", "venv", "--without-pip", str(base / "venv")], timeout=120)
        python = base / "venv" / "bin" / "python"
        _run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-input", "--no-compile",
              "--progress-bar=off", "--constraint", str(ROOT / "constraints.txt"), str(wheel)], timeout=600)
        yield {"wheel": wheel, "python": python, "folder": base}


def test_the_client_wheel_holds_no_server_and_needs_nothing_linux_only(client_only):
    wheel = client_only["wheel"]
    assert wheel.name.endswith("-py3-none-any.whl"), wheel.name  # pure Python, any platform
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        (metadata_name,) = [name for name in names if name.endswith(".dist-info/METADATA")]
        metadata = Parser().parsestr(archive.read(metadata_name).decode())
    package = [name for name in names if ".dist-info/" not in name]
    assert "pytriton/client/client.py" in package  # generated from the asyncio client by the build
    assert "pytriton/model_config/tensor.py" in package
    assert "pytriton/__init__.py" in package and "pytriton/py.typed" in package
    server_side = [name for name in package if not name.startswith(("pytriton/client/", "pytriton/model_config/"))
                   and name.count("/") > 1]
    assert server_side == [], server_side  # no tritonserver/, ipc/, server/, proxy/, worker/ ...
    assert not {"pytriton/triton.py", "pytriton/decorators.py", "pytriton/remote.py"} & set(package)
    assert metadata["Name"] == "pytriton-client"
    requires = metadata.get_all("Requires-Dist")
    assert "tritonclient[grpc,http]" in requires, requires
    assert not [line for line in requires if "[all]" in line or line.split("[")[0].split(";")[0].strip().startswith(
        ("cuda", "nvidia", "perf-analyzer", "pytriton"))], requires
    assert "Operating System :: POSIX :: Linux" not in (metadata.get_all("Classifier") or [])


def test_a_client_only_environment_calls_a_served_model_and_names_the_package_for_the_rest(client_only):
    @batch
    def double(x):
        return {"y": x * 2}

    config = server_config()
    script = client_only["folder"] / "caller.py"
    script.write_text(CALLER)
    with Triton(config=config) as triton:
        triton.bind("Double", double, inputs=[Tensor(name="x", dtype=np.float32, shape=(-1,))],
                    outputs=[Tensor(name="y", dtype=np.float32, shape=(-1,))], config=ModelConfig(max_batch_size=8))
        triton.run()
        # -I: isolated, so nothing of this checkout (PYTHONPATH, the current folder) is importable.
        result = _run([str(client_only["python"]), "-I", str(script), http_url(config), grpc_url(config)],
                      cwd=str(client_only["folder"]), timeout=180)
    found = json.loads(result.stdout.strip().splitlines()[-1])
    assert found["pytriton"].startswith(str(client_only["folder"] / "venv")), found["pytriton"]
    assert found["distributions"] == ["pytriton-client"]
    for call in ("sync http", "sync grpc", "asyncio http", "asyncio grpc"):
        assert found[call] == [2.0, 5.0], (call, found)
    for module in ("pytriton.triton", "pytriton.decorators"):
        message = found.get(module, "")
        assert f"No module named '{module}'" in message and "pytriton-client" in message, found
        # pytriton is on no index: the message names what works (installed from a wheel file here: both forms).
        assert "on no package index yet" in message and "pip install pytriton==" not in message, message
        assert 'pip install /path/to/pytriton) or from its git URL (pip install "pytriton @ git+' in message, message
