"""pytriton.server.workspace: per-server folders and names, cleanup, and the sweep of dead servers' leftovers."""

from __future__ import annotations

import fcntl
import os
import pathlib
import re
import stat
import subprocess
import sys
import tempfile

import psutil
import pytest

from pytriton.exceptions import PyTritonBadParameterError
from pytriton.ipc.shm import SHM_DIR
from pytriton.server.workspace import Workspace, remove_segments, sweep_stale


def _mode(path: pathlib.Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _shm(name: str) -> str:
    path = os.path.join(SHM_DIR, name)
    with open(path, "wb") as handle:
        handle.write(b"leftover")
    return path


def test_names_carry_the_owner_pid():
    workspace = Workspace()
    try:
        assert re.fullmatch(rf"pytriton-{os.getpid()}-[0-9a-f]{{8}}", workspace.server_id)
        assert workspace.shm_prefix == workspace.server_id
        assert workspace.path.name.startswith(f"{workspace.server_id}-")
        assert workspace.path.parent == pathlib.Path(tempfile.gettempdir())
        other = Workspace()
        try:
            assert other.server_id != workspace.server_id
        finally:
            other.cleanup()
    finally:
        workspace.cleanup()


def test_folders_are_private():
    workspace = Workspace()
    try:
        assert workspace.model_repository == workspace.path / "models"
        assert workspace.sockets == workspace.path / "sockets"
        assert workspace.backends == workspace.path / "backends"
        for folder in (workspace.path, workspace.model_repository, workspace.sockets, workspace.backends):
            assert folder.is_dir()
            assert _mode(folder) == 0o700
    finally:
        workspace.cleanup()


def test_cleanup_removes_the_owned_temporary_folder_and_segments():
    workspace = Workspace()
    (workspace.model_repository / "model" / "1").mkdir(parents=True)
    (workspace.model_repository / "model" / "config.pbtxt").write_text("name: 'model'")
    segment = _shm(f"{workspace.shm_prefix}-mkey-0-out-1")
    try:
        workspace.cleanup()
        assert not workspace.path.exists()
        assert not os.path.exists(segment)
        workspace.cleanup()  # twice is harmless
    finally:
        if os.path.exists(segment):
            os.unlink(segment)


def test_user_folder_that_existed_is_kept_but_emptied_of_our_subfolders(short_dir):
    (short_dir / "user-notes.txt").write_text("mine")
    workspace = Workspace(short_dir)
    assert workspace.path == short_dir.resolve()
    (workspace.sockets / "sock-0").write_text("")
    workspace.cleanup()
    assert short_dir.is_dir()
    assert sorted(p.name for p in short_dir.iterdir()) == ["user-notes.txt"]
    assert (short_dir / "user-notes.txt").read_text() == "mine"


def test_user_folder_that_did_not_exist_is_created_private_and_removed(short_dir):
    path = short_dir / "new" / "ws"
    workspace = Workspace(path)
    assert path.is_dir()
    assert _mode(path) == 0o700
    assert _mode(workspace.sockets) == 0o700
    workspace.cleanup()
    assert not path.exists()
    assert (short_dir / "new").is_dir()  # only the workspace folder itself was ours


def test_user_folder_expands_the_home_folder(short_dir, monkeypatch):
    monkeypatch.setenv("HOME", str(short_dir))
    workspace = Workspace(pathlib.Path("~/ws"))
    try:
        assert workspace.path == (short_dir / "ws").resolve()
    finally:
        workspace.cleanup()
    assert not (short_dir / "ws").exists()


def test_too_long_path_is_refused_and_nothing_is_left(short_dir):
    path = short_dir / ("x" * 90)
    with pytest.raises(PyTritonBadParameterError) as excinfo:
        Workspace(path)
    message = str(excinfo.value)
    assert "too long for Unix sockets" in message
    assert str(path) in message
    assert "at most 80" in message
    assert not path.exists()


def test_too_long_existing_user_path_is_kept(short_dir):
    path = short_dir / ("y" * 90)
    path.mkdir()
    (path / "keep.txt").write_text("mine")
    with pytest.raises(PyTritonBadParameterError, match="too long"):
        Workspace(path)
    assert sorted(p.name for p in path.iterdir()) == ["keep.txt"]


def test_remove_segments_only_touches_its_prefix():
    mine = _shm(f"pytriton-{os.getpid()}-0badc0de-m1-0-in-1")
    other = _shm(f"pytriton-{os.getpid()}-0badc0df-m1-0-in-1")
    try:
        assert remove_segments(f"pytriton-{os.getpid()}-0badc0de") == [os.path.basename(mine)]
        assert not os.path.exists(mine)
        assert os.path.exists(other)
    finally:
        for path in (mine, other):
            if os.path.exists(path):
                os.unlink(path)


def _dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait(timeout=30)
    assert not psutil.pid_exists(process.pid)
    return process.pid


def test_sweep_stale_removes_what_dead_servers_left_and_keeps_live_ones(tmp_path):
    dead = _dead_pid()
    dead_id = f"pytriton-{dead}-abcd1234"
    live_id = f"pytriton-{os.getpid()}-abcd1234"

    dead_segment = _shm(f"{dead_id}-x")
    dead_tpb_segment = _shm(f"{dead_id}-tpb-region")
    live_segment = _shm(f"{live_id}-x")
    dead_folder = tmp_path / f"{dead_id}-k3j4l5"
    (dead_folder / "models").mkdir(parents=True)
    (dead_folder / "models" / "config.pbtxt").write_text("x")
    live_folder = tmp_path / f"{live_id}-a1b2c3"
    live_folder.mkdir()
    unrelated = [tmp_path / "pytriton-notapid-abcd", tmp_path / "other-1-abcd", tmp_path / "pytriton-1"]
    for folder in unrelated:
        folder.mkdir()
    try:
        removed = sweep_stale(tmp_dir=str(tmp_path))

        assert not os.path.exists(dead_segment)
        assert not os.path.exists(dead_tpb_segment)
        assert not dead_folder.exists()
        assert os.path.basename(dead_segment) in removed
        assert os.path.basename(dead_tpb_segment) in removed
        assert str(dead_folder) in removed

        assert os.path.exists(live_segment)
        assert live_folder.is_dir()
        assert all(folder.is_dir() for folder in unrelated)
        assert not any(live_id in name for name in removed)

        # nothing is left to sweep for this dead server
        assert not any(dead_id in name for name in sweep_stale(tmp_dir=str(tmp_path)))
    finally:
        for path in (dead_segment, dead_tpb_segment, live_segment):
            if os.path.exists(path):
                os.unlink(path)
    assert not [name for name in os.listdir(SHM_DIR) if name.startswith((dead_id, live_id))]


def test_subfolders_left_with_a_wider_mode_are_made_private_again(short_dir):
    (short_dir / "sockets").mkdir(mode=0o755)
    (short_dir / "sockets").chmod(0o755)
    workspace = Workspace(short_dir)
    try:
        assert _mode(workspace.sockets) == 0o700
    finally:
        workspace.cleanup()


def test_restrict_segments_makes_this_servers_segments_private():
    workspace = Workspace()
    wide = _shm(f"{workspace.shm_prefix}-tpb0123")
    private = _shm(f"{workspace.shm_prefix}-mkey-0-out-1")
    foreign = _shm(f"pytriton-{os.getpid()}-0badc0de-tpb0123")
    try:
        for path in (wide, foreign):
            os.chmod(path, 0o644)
        os.chmod(private, 0o600)
        assert workspace.restrict_segments() == [os.path.basename(wide)]
        assert stat.S_IMODE(os.stat(wide).st_mode) == 0o600
        assert stat.S_IMODE(os.stat(private).st_mode) == 0o600
        assert stat.S_IMODE(os.stat(foreign).st_mode) == 0o644  # another server's: not ours to change
    finally:
        workspace.cleanup()
        if os.path.exists(foreign):
            os.unlink(foreign)


def test_a_server_holds_a_lease_until_everything_else_is_gone():
    workspace = Workspace()
    lease = os.path.join(SHM_DIR, f"{workspace.server_id}-lock")
    assert not os.path.exists(lease)  # taken when the server starts, not before
    workspace.hold_lease()
    assert os.path.exists(lease)
    _shm(f"{workspace.server_id}-seg")
    workspace.cleanup()
    assert not [name for name in os.listdir(SHM_DIR) if name.startswith(workspace.server_id)]


def _lease_holder(path: str) -> subprocess.Popen:
    """Another process holding the lease file `path` (as a live server in another container would)."""
    code = (
        "import fcntl, os, sys\n"
        f"fd = os.open({path!r}, os.O_CREAT | os.O_RDWR, 0o600)\n"
        "fcntl.flock(fd, fcntl.LOCK_EX)\n"
        "print('held', flush=True)\n"
        "sys.stdin.read()\n"
    )
    holder = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    return holder


def test_sweep_judges_pid_1_names_by_their_lease_not_their_pid(tmp_path):
    # In a container every server is PID 1, which always exists: only the lease tells.
    dead_id, live_id = "pytriton-1-deadbeef", "pytriton-1-a11ce000"
    _shm(f"{dead_id}-lock")  # a lease file nobody holds: its owner died
    dead_segment = _shm(f"{dead_id}-m0-0-in-1")
    (tmp_path / f"{dead_id}-xyz").mkdir()
    holder = _lease_holder(os.path.join(SHM_DIR, f"{live_id}-lock"))
    live_segment = _shm(f"{live_id}-m0-0-in-1")
    try:
        removed = sweep_stale(str(tmp_path))
        assert os.path.basename(dead_segment) in removed
        assert not os.path.exists(dead_segment)
        assert not os.path.exists(os.path.join(SHM_DIR, f"{dead_id}-lock"))
        assert not (tmp_path / f"{dead_id}-xyz").exists()
        assert os.path.exists(live_segment), "a live owner's segment (lease held elsewhere) was removed"
    finally:
        holder.stdin.close()
        holder.wait(5)
        remove_segments(live_id)


def test_sweep_judges_a_folder_without_a_visible_shm_lease_by_the_folders_own_lease(tmp_path):
    # A server with a private /dev/shm seen from another PID namespace: no lease in our /dev/shm,
    # and its pid looks dead. The lease in its folder tells whether it lives.
    live_id, dead_id = f"pytriton-{_dead_pid()}-a11ce000", f"pytriton-{_dead_pid()}-deadbeef"
    live_folder, dead_folder = tmp_path / f"{live_id}-abc", tmp_path / f"{dead_id}-abc"
    for folder in (live_folder, dead_folder):
        (folder / "models").mkdir(parents=True)
    (dead_folder / ".lease").write_text("")  # a lease nobody holds: its owner died
    holder = _lease_holder(str(live_folder / ".lease"))
    try:
        removed = sweep_stale(str(tmp_path))
        assert (live_folder / "models").is_dir(), "a live server's folder (its lease held) was removed"
        assert not any(live_id in name for name in removed)
        assert str(dead_folder) in removed and not dead_folder.exists()
    finally:
        holder.stdin.close()
        holder.wait(5)
    assert str(live_folder) in sweep_stale(str(tmp_path))  # its owner gone, the lease is free


def test_a_temporary_workspace_holds_its_folders_lease_from_the_start_and_a_users_folder_gets_none(short_dir):
    workspace = Workspace()
    try:
        fd = os.open(workspace.path / ".lease", os.O_RDWR)
        try:
            with pytest.raises(BlockingIOError):  # held: a sweep elsewhere takes the folder for a live one
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        finally:
            os.close(fd)
    finally:
        workspace.cleanup()
    assert not workspace.path.exists()
    users = Workspace(short_dir)  # never swept: it does not carry a server's name
    try:
        assert not (short_dir / ".lease").exists()
    finally:
        users.cleanup()


def test_load_copies_of_pytritons_own_models_are_swept_once_old_and_nothing_else(tmp_path):
    import os

    from pytriton.server import workspace
    from pytriton.server.readiness import RESERVED_MODELS, stopping_config

    assert workspace._RESERVED_NAME_LINES == {f'name: "{name}"' for name in RESERVED_MODELS}

    def copy(name, text, age_s):
        folder = tmp_path / name
        (folder / "1").mkdir(parents=True)
        (folder / "config.pbtxt").write_text(text)
        stamp = 1_000_000.0 - age_s
        os.utime(folder, (stamp, stamp))
        return folder

    old = copy("folderAbC123", stopping_config(), 120)
    young = copy("folderXyZ789", stopping_config(), 5)  # its load may still run
    users = copy("folderUsr000", 'name: "Remote"\nbackend: "python"\n', 120)  # a user's model: never ours to take
    other = copy("folder-x_y-z", stopping_config(), 120)  # not Triton's name pattern
    removed = workspace.sweep_load_copies(tmp_path, now=1_000_000.0)
    assert removed == [str(old)]
    assert not old.exists() and young.exists() and users.exists() and other.exists()
