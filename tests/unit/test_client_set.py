"""The split into two distributions (build_backend/client_set.py): the client files form a closed set
(a client-only install imports nothing it lacks), each file belongs to one distribution, the full
one requires the client one at its own version, and the client one needs nothing Linux-only.

tests/functional/test_client_only_install.py builds and installs the client distribution for real.
"""

from __future__ import annotations

import ast
import pathlib
import re
import sys
from typing import Dict, Set

import pytest

import pytriton

ROOT = pathlib.Path(__file__).resolve().parents[2]
tomllib = pytest.importorskip("tomllib")  # Python 3.11+; the suite runs there


@pytest.fixture(scope="module")
def client_set():
    sys.path.insert(0, str(ROOT / "build_backend"))
    try:
        import client_set

        yield client_set
    finally:
        sys.path.remove(str(ROOT / "build_backend"))


def _module_name(path: str) -> str:
    parts = pathlib.PurePosixPath(path).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _pytriton_imports(path: pathlib.Path) -> Set[str]:
    """Every ``pytriton`` module `path` imports, at the top or inside a function."""
    found: Set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "pytriton":
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.split(".")[0] == "pytriton")
    return found


def _outside(client_set, root: pathlib.Path) -> Dict[str, Set[str]]:
    """Client modules -> the pytriton modules they import that the client set lacks (a name
    imported from a module, `from pytriton.x import y`, counts only when y is a module)."""
    modules = {_module_name(name): root / name for name in client_set.files(root) if name.endswith(".py")}
    every = {_module_name(str(path.relative_to(root))) for path in (root / "pytriton").rglob("*.py")
             if "tritonserver" not in path.parts}
    missing = {}
    for name, path in modules.items():
        lacking = {target for target in _pytriton_imports(path) if target in every and target not in modules}
        if lacking:
            missing[name] = lacking
    return missing


def test_the_client_files_import_nothing_outside_them(client_set):
    names = client_set.files(ROOT)
    assert "pytriton/__init__.py" in names and "pytriton/client/asyncio_client.py" in names
    assert "pytriton/model_config/tensor.py" in names and "pytriton/py.typed" in names
    assert _outside(client_set, ROOT) == {}


def test_the_closure_check_sees_an_import_of_the_server_side(client_set, tmp_path):
    # The negative control: a client module that imports pytriton.triton (even inside a function).
    client_set.copy(ROOT, tmp_path)
    (tmp_path / "pytriton" / "triton.py").write_text("")
    (tmp_path / "pytriton" / "client" / "extra.py").write_text("def f():\n    from pytriton import triton\n")
    assert _outside(client_set, tmp_path) == {"pytriton.client.extra": {"pytriton.triton"}}


def test_each_file_belongs_to_one_distribution(client_set):
    assert client_set.owns("pytriton/client/core.py") and client_set.owns("pytriton/exceptions.py")
    assert client_set.owns("pytriton/model_config/common.py") and client_set.owns("pytriton/client_contract.py")
    for server_side in ("pytriton/triton.py", "pytriton/decorators.py", "pytriton/ipc/protocol.py",
                        "pytriton/launch.py", "pytriton/__main__.py", "pytriton/tritonserver/bin/tritonserver",
                        "pytriton/clientele.py"):
        assert not client_set.owns(server_side), server_side
    # The facade the client-only install looks for to tell itself apart is the full one's.
    assert not client_set.owns("pytriton/" + pytriton._SERVER_SIDE_MARKER)


def test_the_full_distribution_requires_the_client_one_at_its_own_version():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pins = [line for line in project["dependencies"] if re.match(r"pytriton-client\b", line)]
    assert pins == [f"pytriton-client=={pytriton.__version__}"]


def test_the_client_distribution_needs_nothing_linux_only():
    project = tomllib.loads((ROOT / "pytriton-client" / "pyproject.toml").read_text())["project"]
    assert project["name"] == "pytriton-client"
    tritonclient = [line for line in project["dependencies"] if line.startswith("tritonclient")]
    assert tritonclient == ["tritonclient[http,grpc]"]
    assert not [line for line in project["dependencies"] if re.match(r"(cuda|nvidia|perf-analyzer|pyzmq)", line)]


def test_an_editable_install_leaves_the_client_requirement_out(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "build_backend"))
    import pytriton_build

    metadata = ("Metadata-Version: 2.4\nName: pytriton\nRequires-Dist: pytriton-client==0.1.0\n"
                "Requires-Dist: numpy\nRequires-Dist: pytriton_client>=0.1; extra == 'x'\n\nThe README\n")
    assert pytriton_build.without_client_requirement(metadata) == (
        "Metadata-Version: 2.4\nName: pytriton\nRequires-Dist: numpy\n\nThe README\n")
    # A build from a source tree with the client project beside it names that folder (pip builds it from there).
    folder = (ROOT / "pytriton-client").resolve().as_uri()
    assert pytriton_build.with_local_client(metadata, ROOT / "pytriton-client") == (
        f"Metadata-Version: 2.4\nName: pytriton\nRequires-Dist: pytriton-client @ {folder}\nRequires-Dist: numpy\n"
        f"Requires-Dist: pytriton-client @ {folder} ; extra == 'x'\n\nThe README\n")
    for name in ("pytriton_build", "native", "stub_numpy", "unasync", "client_set"):
        sys.modules.pop(name, None)
