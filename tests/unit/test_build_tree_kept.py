"""A regular build removes from the source tree what it created there, and only that."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def backend(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "build_backend"))
    import pytriton_build

    yield pytriton_build
    for name in ("pytriton_build", "native", "stub_numpy", "unasync"):
        sys.modules.pop(name, None)


def _make(path: Path, is_dir: bool = True) -> None:
    if is_dir:
        (path / "inner").mkdir(parents=True)
        (path / "inner" / "file").write_text("x")
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("x")


def test_what_the_build_made_goes_and_what_was_there_stays(backend, tmp_path):
    (tmp_path / "pytriton" / "client").mkdir(parents=True)
    _make(tmp_path / "build")                                     # there before: a user's own build/api
    _make(tmp_path / "pytriton" / "client" / "waits.py", is_dir=False)  # generated before, by make
    with backend.source_tree_kept(tmp_path):
        _make(tmp_path / "pytriton" / "tritonserver")
        _make(tmp_path / "pytriton.egg-info")
        _make(tmp_path / "pytriton" / "client" / "client.py", is_dir=False)
        (tmp_path / "build" / "lib").mkdir()
    assert not (tmp_path / "pytriton" / "tritonserver").exists()
    assert not (tmp_path / "pytriton.egg-info").exists()
    assert not (tmp_path / "pytriton" / "client" / "client.py").exists()
    assert (tmp_path / "build" / "inner" / "file").is_file()
    assert (tmp_path / "pytriton" / "client" / "waits.py").is_file()


def test_a_failed_build_leaves_nothing_either(backend, tmp_path):
    with pytest.raises(RuntimeError), backend.source_tree_kept(tmp_path):
        _make(tmp_path / "build")
        raise RuntimeError("the compiler failed")
    assert list(tmp_path.iterdir()) == []


def test_a_linked_server_tree_is_kept(backend, tmp_path):
    (tmp_path / "pytriton").mkdir()
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "pytriton" / "tritonserver").symlink_to(tmp_path / "elsewhere")
    with backend.source_tree_kept(tmp_path):
        pass
    assert (tmp_path / "pytriton" / "tritonserver").is_symlink()
