"""pytriton.server.workspace.SharedWorkspace: a binding session's share of a workspace shared with a server."""

from __future__ import annotations

import os
import pathlib
import shutil
import stat
import tempfile

import pytest

from pytriton.exceptions import PyTritonBadParameterError, PyTritonInvalidOperationError
from pytriton.ipc.shm import SHM_DIR
from pytriton.server.workspace import OWNER_FILE, SharedWorkspace


@pytest.fixture
def shared():
    """A workspace folder with its `models` repository, as whoever starts the server prepares it."""
    path = pathlib.Path(tempfile.mkdtemp(prefix="ptsw-"))
    (path / "models").mkdir()
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _dead_session(shared: pathlib.Path, session_id: str, models=()) -> None:
    """What a session killed with SIGKILL leaves: its folder with an unlocked lock file, its models."""
    folder = shared / "sockets" / session_id
    folder.mkdir(parents=True)
    (folder / "lock").write_text("")
    (folder / "m0123456789-0").write_text("")  # a socket file, as far as a sweep cares
    for name in models:
        (shared / "models" / name / "1").mkdir(parents=True)
        (shared / "models" / name / OWNER_FILE).write_text(session_id)


def test_a_missing_folder_is_refused_with_the_server_flags(shared):
    bare = shared / "bare"  # exists, but has no models folder the server could serve
    bare.mkdir()
    for path, missing in ((shared / "absent", shared / "absent"), (bare, bare / "models")):
        with pytest.raises(PyTritonBadParameterError) as excinfo:
            SharedWorkspace(path)
        message = str(excinfo.value)
        assert f"{missing} is not a folder" in message
        assert f"--model-repository={path / 'models'} --model-control-mode=explicit" in message
    assert not (shared / "sockets").exists() and not (bare / "sockets").exists()


def test_a_session_has_a_private_locked_sockets_folder_and_names_of_its_own(shared):
    workspace = SharedWorkspace(shared)
    other = SharedWorkspace(shared)
    try:
        assert workspace.session_id.startswith(f"pytriton-{os.getpid()}-")
        assert workspace.shm_prefix == workspace.session_id != other.session_id
        assert workspace.model_repository == shared / "models"
        assert workspace.sockets == shared / "sockets" / workspace.session_id
        assert stat.S_IMODE(workspace.sockets.stat().st_mode) == 0o700
        assert sorted(p.name for p in (shared / "sockets").iterdir()) == sorted([workspace.session_id,
                                                                                 other.session_id])
    finally:
        workspace.cleanup()
        other.cleanup()
    assert list((shared / "sockets").iterdir()) == []


def test_a_path_too_long_for_unix_sockets_is_refused(shared):
    path = shared / ("w" * 60)
    (path / "models").mkdir(parents=True)
    with pytest.raises(PyTritonBadParameterError, match="too long for Unix sockets"):
        SharedWorkspace(path)


def test_a_claimed_name_is_taken_until_released(shared):
    workspace = SharedWorkspace(shared)
    other = SharedWorkspace(shared)
    try:
        folder = workspace.claim("Model")
        assert folder == shared / "models" / "Model"
        assert (folder / OWNER_FILE).read_text() == workspace.session_id
        with pytest.raises(PyTritonInvalidOperationError, match=f"by pytriton session {workspace.session_id}"):
            other.claim("Model")
        (shared / "models" / "Handmade").mkdir()
        with pytest.raises(PyTritonInvalidOperationError, match="no pytriton session owns it"):
            other.claim("Handmade")
        for bad in ("a/b", ".", ".."):
            with pytest.raises(PyTritonBadParameterError, match="must be a folder name"):
                workspace.claim(bad)
        workspace.release("Model")
        assert not folder.exists()
        assert other.claim("Model") == folder
    finally:
        workspace.cleanup()
        other.cleanup()
    assert sorted(p.name for p in (shared / "models").iterdir()) == ["Handmade"]  # not ours: kept


def test_cleanup_removes_the_sessions_models_sockets_and_segments(shared):
    workspace = SharedWorkspace(shared)
    workspace.claim("Mine")
    (workspace.sockets / "m0123456789-0").write_text("")
    segment = os.path.join(SHM_DIR, f"{workspace.session_id}-m0123456789-0-out-1")
    pathlib.Path(segment).write_bytes(b"x")
    keep = os.path.join(SHM_DIR, f"pytriton-{os.getpid()}-0badc0de-m0123456789-0-out-1")
    pathlib.Path(keep).write_bytes(b"x")
    try:
        workspace.cleanup()
        workspace.cleanup()  # twice is harmless
        assert list((shared / "models").iterdir()) == []
        assert list((shared / "sockets").iterdir()) == []
        assert not os.path.exists(segment)
        assert os.path.exists(keep)
    finally:
        for path in (segment, keep):
            if os.path.exists(path):
                os.unlink(path)


def test_sweep_unloads_and_removes_only_what_dead_sessions_left(shared):
    dead_id, gone_id = "pytriton-1-0badc0de", "pytriton-2-0badc0de"
    _dead_session(shared, dead_id, models=["Orphan"])
    (shared / "models" / "Stray" / "1").mkdir(parents=True)  # its session folder is gone entirely
    (shared / "models" / "Stray" / OWNER_FILE).write_text(gone_id)
    (shared / "models" / "Handmade" / "1").mkdir(parents=True)  # no owner: not pytriton's
    segments = [os.path.join(SHM_DIR, f"{session}-m0123456789-0-out-1") for session in (dead_id, gone_id)]
    for segment in segments:
        pathlib.Path(segment).write_bytes(b"x")
    live = SharedWorkspace(shared)
    live.claim("Alive")
    sweeper = SharedWorkspace(shared)
    unloaded = []
    try:
        removed = sweeper.sweep(unloaded.extend)
        assert sorted(unloaded) == ["Orphan", "Stray"]
        assert sorted(p.name for p in (shared / "models").iterdir()) == ["Alive", "Handmade"]
        assert sorted(p.name for p in (shared / "sockets").iterdir()) == sorted([live.session_id,
                                                                                 sweeper.session_id])
        assert not any(os.path.exists(segment) for segment in segments)
        assert str(shared / "sockets" / dead_id) in removed
        assert sweeper.sweep(unloaded.extend) == []  # nothing left to sweep
        assert len(unloaded) == 2
    finally:
        live.cleanup()
        sweeper.cleanup()
        for segment in segments:
            if os.path.exists(segment):
                os.unlink(segment)


def test_sweep_removes_a_session_that_died_while_starting(shared):
    staging = shared / "sockets" / ".pytriton-999999999-0badc0de"  # no such pid
    staging.mkdir(parents=True)
    workspace = SharedWorkspace(shared)
    try:
        workspace.sweep(lambda names: None)
        assert not staging.exists()
    finally:
        workspace.cleanup()
