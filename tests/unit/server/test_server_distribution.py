"""pytriton.server.distribution: finding a Triton installation and preparing its environment."""

from __future__ import annotations

import os
import pathlib
import re
import sys
import sysconfig

import numpy
import pytest
import zmq

import pytriton
from pytriton.environment import TRITON_SERVER_DIR as SERVER_DIR_ENV
from pytriton.exceptions import PyTritonServerStartupError
from pytriton.server import distribution
from pytriton.server.distribution import (
    ServerDistribution,
    assemble_backends,
    find_distribution,
    libpython_dir,
    proxy_import_paths,
    python_version_tag,
    server_environment,
    serving_backend,
)

TAG = python_version_tag()
OTHER_TAGS = ("2.7", "9.9")  # never the running Python


def _touch(path: pathlib.Path, text: str = "") -> pathlib.Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _server_core(root: pathlib.Path) -> None:
    _touch(root / "bin" / "tritonserver", "binary")
    _touch(root / "backends" / "python" / "libtriton_python.so", "backend")
    _touch(root / "backends" / "python" / "triton_python_backend_utils.py", "utils")


def _bundled_tree(root: pathlib.Path, tags=(TAG, *OTHER_TAGS), stub_python: bool = True) -> pathlib.Path:
    """A tree shaped like the one the build bundles: one stub per Python version."""
    _server_core(root)
    for tag in tags:
        _touch(root / "python_backend_stubs" / tag / "triton_python_backend_stub", f"stub {tag}")
    (root / "lib").mkdir()
    (root / "caches" / "local").mkdir(parents=True)
    if stub_python:
        (root / "stub_python" / TAG / "numpy").mkdir(parents=True)
    return root


def _ngc_tree(root: pathlib.Path, with_stub: bool = True, with_lib: bool = True) -> pathlib.Path:
    """A tree shaped like NVIDIA's container (/opt/tritonserver): one stub beside the backend."""
    _server_core(root)
    if with_stub:
        _touch(root / "backends" / "python" / "triton_python_backend_stub", "stub")
    if with_lib:
        (root / "lib").mkdir()
    return root


def _env(root: pathlib.Path) -> dict:
    return {SERVER_DIR_ENV: str(root)}


# --- find_distribution ---------------------------------------------------------------------------


def test_bundled_like_tree(tmp_path):
    root = _bundled_tree(tmp_path / "triton")
    found = find_distribution(_env(root))
    assert found == ServerDistribution(
        root=root,
        binary=root / "bin" / "tritonserver",
        python_backend=root / "backends" / "python",
        stub=root / "python_backend_stubs" / TAG / "triton_python_backend_stub",
        caches=root / "caches",
        library_dirs=(root / "lib",),
        stub_python_path=root / "stub_python" / TAG,
        native_backend=distribution.native_library(),
        stub_problem=found.stub_problem,  # None, unless this Python lacks a shared libpython
    )
    assert found.stub.read_text() == f"stub {TAG}"


def test_bundled_like_tree_without_stub_python_and_numpy_1(tmp_path, monkeypatch):
    monkeypatch.setattr(numpy, "__version__", "1.26.4")
    root = _bundled_tree(tmp_path / "triton", stub_python=False)
    assert find_distribution(_env(root)).stub_python_path is None


def _proxy_refused(found) -> str:
    """The error the proxy path gives on `found` (pytriton's own backend is not refused)."""
    with pytest.raises(PyTritonServerStartupError) as excinfo:
        serving_backend(found, "python")
    return str(excinfo.value)


@pytest.mark.parametrize("version", ["2.0.0", "2.4.6"])
def test_bundled_like_tree_without_stub_python_refuses_numpy_2_on_the_proxy_path_only(tmp_path, monkeypatch,
                                                                                        version):
    monkeypatch.setattr(numpy, "__version__", version)
    root = _bundled_tree(tmp_path / "triton", stub_python=False)
    (root / "stub_python" / OTHER_TAGS[0]).mkdir(parents=True)  # another Python's NumPy does not count
    found = find_distribution(_env(root))
    message = _proxy_refused(found)
    assert f"bundled none for Python {TAG}" in message
    assert f"NumPy {version}" in message
    assert "numpy<2" in message
    if found.native_backend is not None:
        assert serving_backend(found, None) == "pytriton"


def test_ngc_like_tree_does_not_check_numpy(tmp_path, monkeypatch):
    monkeypatch.setattr(numpy, "__version__", "2.4.6")
    root = _ngc_tree(tmp_path / "triton")
    assert find_distribution(_env(root)).stub_python_path is None


def test_ngc_like_tree(tmp_path):
    root = _ngc_tree(tmp_path / "opt" / "tritonserver")
    found = find_distribution(_env(root))
    assert found.binary == root / "bin" / "tritonserver"
    assert found.stub == root / "backends" / "python" / "triton_python_backend_stub"
    assert found.python_backend == root / "backends" / "python"
    assert found.library_dirs == (root / "lib",)
    assert found.stub_python_path is None


def test_tree_without_lib_has_no_library_dirs(tmp_path):
    root = _ngc_tree(tmp_path / "triton", with_lib=False)
    assert find_distribution(_env(root)).library_dirs == ()


def test_configured_root_expands_the_home_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    root = _ngc_tree(tmp_path / "triton")
    assert find_distribution({SERVER_DIR_ENV: "~/triton"}).root == root


def test_configured_root_without_binary(tmp_path):
    root = tmp_path / "empty"
    root.mkdir()
    with pytest.raises(PyTritonServerStartupError) as excinfo:
        find_distribution(_env(root))
    message = str(excinfo.value)
    assert f"{SERVER_DIR_ENV}={str(root)!r} has no bin/tritonserver" in message
    assert "/opt/tritonserver" in message


def test_missing_bundled_binary(tmp_path, monkeypatch):
    monkeypatch.setattr(distribution, "BUNDLED_ROOT", tmp_path / "not-built")
    with pytest.raises(PyTritonServerStartupError) as excinfo:
        find_distribution({})
    message = str(excinfo.value)
    assert "the bundled Triton server is missing" in message
    assert str(tmp_path / "not-built" / "bin" / "tritonserver") in message
    assert SERVER_DIR_ENV in message


def test_missing_python_backend(tmp_path):
    root = tmp_path / "triton"
    _touch(root / "bin" / "tritonserver")
    with pytest.raises(PyTritonServerStartupError, match="has no Python backend") as excinfo:
        find_distribution(_env(root))
    assert str(root / "backends" / "python") in str(excinfo.value)


def test_missing_stub_for_this_python_lists_available_versions(tmp_path):
    root = _bundled_tree(tmp_path / "triton", tags=OTHER_TAGS)
    found = find_distribution(_env(root))
    assert found.stub is None
    message = _proxy_refused(found)
    assert f"Python {TAG} is not supported by Triton's Python backend at {root}" in message
    assert "['2.7', '9.9']" in message
    assert "run with one of those Python versions" in message
    assert "pytriton's own backend serves any Python" in message


def test_missing_stub_in_ngc_like_tree(tmp_path):
    root = _ngc_tree(tmp_path / "triton", with_stub=False)
    assert re.search(f"Python {TAG} is not supported.*no version", _proxy_refused(find_distribution(_env(root))))


def test_stub_folder_without_binary_is_not_listed_as_available(tmp_path):
    root = _bundled_tree(tmp_path / "triton", tags=OTHER_TAGS)
    (root / "python_backend_stubs" / TAG).mkdir()
    assert f"'{TAG}'" not in _proxy_refused(find_distribution(_env(root)))


def test_pytriton_backend_serves_without_a_stub_and_the_proxy_path_can_be_chosen(tmp_path, monkeypatch):
    library = tmp_path / "libtriton_pytriton.so"
    library.write_bytes(b"")
    monkeypatch.setattr(distribution, "NATIVE_LIBRARY", library)
    found = find_distribution(_env(_bundled_tree(tmp_path / "triton", tags=OTHER_TAGS)))
    assert found.native_backend == library and found.stub is None
    assert serving_backend(found, None) == "pytriton" and serving_backend(found, "pytriton") == "pytriton"
    monkeypatch.setattr(distribution, "NATIVE_LIBRARY", tmp_path / "missing.so")
    unbuilt = find_distribution(_env(_bundled_tree(tmp_path / "other")))
    with pytest.raises(PyTritonServerStartupError, match="built without a C compiler"):
        serving_backend(unbuilt, "pytriton")


def test_bundled_distribution_has_a_stub_for_this_python():
    found = find_distribution({})
    assert found.root == distribution.BUNDLED_ROOT
    assert found.stub.is_file()
    assert found.stub.parent.name == TAG


# --- libpython_dir -------------------------------------------------------------------------------


def _fake_sysconfig(monkeypatch, **values):
    monkeypatch.setattr(sysconfig, "get_config_var", lambda name: values.get(name))


def test_libpython_dir_of_a_shared_build(monkeypatch):
    _fake_sysconfig(monkeypatch, LIBDIR="/opt/python/lib", LDLIBRARY="libpython3.11.so", Py_ENABLE_SHARED=1)
    assert libpython_dir() == pathlib.Path("/opt/python/lib")


def test_libpython_dir_accepts_a_versioned_so(monkeypatch):
    _fake_sysconfig(monkeypatch, LIBDIR="/usr/lib", LDLIBRARY="libpython3.11.so.1.0", Py_ENABLE_SHARED=1)
    assert libpython_dir() == pathlib.Path("/usr/lib")


@pytest.mark.parametrize(
    "values",
    [
        {"LIBDIR": "/usr/lib", "LDLIBRARY": "libpython3.11.a", "Py_ENABLE_SHARED": 0},
        {"LIBDIR": "/usr/lib", "LDLIBRARY": "libpython3.11.so", "Py_ENABLE_SHARED": 0},
        {"LIBDIR": "/usr/lib", "LDLIBRARY": "libpython3.11.a", "Py_ENABLE_SHARED": 1},
        {},
    ],
    ids=["static", "shared-disabled", "static-library", "unknown"],
)
def test_libpython_dir_refuses_a_static_python(monkeypatch, values):
    _fake_sysconfig(monkeypatch, **values)
    with pytest.raises(PyTritonServerStartupError) as excinfo:
        libpython_dir()
    message = str(excinfo.value)
    assert "built without a shared libpython" in message
    assert sys.executable in message
    assert TAG in message
    assert "--enable-shared" in message


# --- assemble_backends ---------------------------------------------------------------------------


def test_assemble_backends_links_the_backend_and_copies_the_stub_of_this_python(tmp_path):
    found = find_distribution(_env(_bundled_tree(tmp_path / "triton")))
    target = tmp_path / "workspace" / "backends"
    assert assemble_backends(found, target) == target

    python_dir = target / "python"
    assert sorted(p.name for p in python_dir.iterdir()) == [
        "libtriton_python.so",
        "triton_python_backend_stub",
        "triton_python_backend_utils.py",
    ]
    stub = python_dir / "triton_python_backend_stub"
    for link in python_dir.iterdir():
        assert link.is_symlink() is (link != stub)
    # The stub is this user's own copy: Triton changes its mode before each start (process.py).
    assert stub.stat().st_uid == os.getuid() and stub.stat().st_mode & 0o777 == 0o755
    assert os.readlink(python_dir / "libtriton_python.so") == str(found.python_backend / "libtriton_python.so")
    assert (python_dir / "triton_python_backend_stub").read_text() == f"stub {TAG}"
    assert (python_dir / "triton_python_backend_utils.py").read_text() == "utils"


def test_assemble_backends_is_idempotent_and_relinks(tmp_path):
    first = find_distribution(_env(_bundled_tree(tmp_path / "a")))
    second = find_distribution(_env(_ngc_tree(tmp_path / "b")))
    target = tmp_path / "backends"
    assemble_backends(first, target)
    assemble_backends(first, target)
    assert (target / "python" / "triton_python_backend_stub").read_text() == f"stub {TAG}"

    assemble_backends(second, target)
    assert os.readlink(target / "python" / "libtriton_python.so") == str(second.python_backend / "libtriton_python.so")
    assert (target / "python" / "triton_python_backend_stub").read_text() == "stub"


def test_an_unreadable_installed_stub_is_linked_instead(tmp_path, monkeypatch):
    found = find_distribution(_env(_bundled_tree(tmp_path / "triton")))

    def refused(source, target):  # what copying a root-owned stub of mode 0100 meets as another user
        raise PermissionError(13, "Permission denied", str(source))

    monkeypatch.setattr(distribution.shutil, "copyfile", refused)
    assemble_backends(found, tmp_path / "backends")
    assert os.readlink(tmp_path / "backends" / "python" / "triton_python_backend_stub") == str(found.stub)


def test_assemble_backends_replaces_stale_files_and_dangling_links(tmp_path):
    found = find_distribution(_env(_bundled_tree(tmp_path / "triton")))
    python_dir = tmp_path / "backends" / "python"
    python_dir.mkdir(parents=True)
    (python_dir / "libtriton_python.so").write_text("stale copy")
    (python_dir / "triton_python_backend_stub").symlink_to(tmp_path / "gone")
    assemble_backends(found, tmp_path / "backends")
    assert (python_dir / "libtriton_python.so").read_text() == "backend"
    assert (python_dir / "triton_python_backend_stub").read_text() == f"stub {TAG}"


# --- server_environment --------------------------------------------------------------------------


@pytest.fixture
def shared_python(monkeypatch):
    _fake_sysconfig(monkeypatch, LIBDIR="/fake/libpython", LDLIBRARY="libpython3.so", Py_ENABLE_SHARED=1)
    return "/fake/libpython"


def _with_libraries(tmp_path, *names):
    root = _bundled_tree(tmp_path / "triton")
    found = find_distribution(_env(root))
    dirs = tuple(tmp_path / name for name in names)
    return ServerDistribution(found.root, found.binary, found.python_backend, found.stub, found.caches, dirs)


def test_server_environment_puts_libpython_first(tmp_path, shared_python):
    found = _with_libraries(tmp_path, "lib", "lib2")
    base = {"LD_LIBRARY_PATH": "/existing:/other", "KEEP": "1"}
    env = server_environment(found, base)
    assert env["LD_LIBRARY_PATH"].split(os.pathsep) == [
        shared_python,
        str(tmp_path / "lib"),
        str(tmp_path / "lib2"),
        "/existing",
        "/other",
    ]
    assert env["KEEP"] == "1"
    assert base == {"LD_LIBRARY_PATH": "/existing:/other", "KEEP": "1"}  # not modified


@pytest.mark.parametrize("base", [{}, {"LD_LIBRARY_PATH": ""}])
def test_server_environment_without_a_previous_library_path(tmp_path, shared_python, base):
    found = _with_libraries(tmp_path, "lib")
    env = server_environment(found, base)
    assert env["LD_LIBRARY_PATH"] == f"{shared_python}{os.pathsep}{tmp_path / 'lib'}"


def test_server_environment_defaults_to_this_process_environment(tmp_path, shared_python, monkeypatch):
    monkeypatch.setenv("LD_LIBRARY_PATH", "/from/process")
    monkeypatch.setenv("PYTRITON_TEST_MARKER", "yes")
    env = server_environment(_with_libraries(tmp_path))
    assert env["LD_LIBRARY_PATH"] == f"{shared_python}{os.pathsep}/from/process"
    assert env["PYTRITON_TEST_MARKER"] == "yes"
    assert os.environ["LD_LIBRARY_PATH"] == "/from/process"


def test_without_a_shared_libpython_only_the_proxy_path_is_refused(tmp_path, monkeypatch):
    _fake_sysconfig(monkeypatch, LIBDIR="/usr/lib", LDLIBRARY="libpython3.11.a", Py_ENABLE_SHARED=0)
    env = server_environment(_with_libraries(tmp_path, "lib"), {})  # pytriton's backend needs no libpython
    assert env["LD_LIBRARY_PATH"] == str(tmp_path / "lib")
    found = find_distribution(_env(_bundled_tree(tmp_path / "other")))
    assert "shared libpython" in _proxy_refused(found)


# --- proxy_import_paths --------------------------------------------------------------------------


def _parent_of(module) -> str:
    return str(pathlib.Path(module.__file__).resolve().parent.parent)


def test_proxy_import_paths_start_with_the_stub_numpy(tmp_path):
    found = find_distribution(_env(_bundled_tree(tmp_path / "triton")))
    paths = proxy_import_paths(found)
    expected = [str(found.stub_python_path)]
    for module in (pytriton, numpy, zmq):
        if _parent_of(module) not in expected:
            expected.append(_parent_of(module))
    assert list(paths) == expected
    assert len(set(paths)) == len(paths)


def test_proxy_import_paths_without_stub_numpy(tmp_path):
    found = find_distribution(_env(_ngc_tree(tmp_path / "triton")))
    paths = proxy_import_paths(found)
    assert paths[0] == _parent_of(pytriton)
    assert _parent_of(numpy) in paths
    assert _parent_of(zmq) in paths
    assert paths.index(_parent_of(numpy)) <= paths.index(_parent_of(zmq))
