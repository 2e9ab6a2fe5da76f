"""Container behaviour without a container engine: the serving script as PID 1, and as a non-root user.

A container runs the user's script as PID 1 of its own PID namespace (``unshare -p -f
--mount-proc`` here), often as an unprivileged user with a read-only root filesystem and a few
writable folders (``setpriv`` and a private TMPDIR here).
"""

from __future__ import annotations

import os
import pathlib
import shutil
import signal
import stat
import subprocess
import sys
import time

import numpy as np
import psutil
import pytest
from support import PROXY_ENV, SERVING_SCRIPT, ServingScript, http_status, stub_processes, wait_until

from pytriton.client import ModelClient

pytestmark = pytest.mark.functional

NOBODY = 65534


def _root_can(*argv: str) -> bool:
    if os.geteuid() != 0 or shutil.which(argv[0]) is None:
        return False
    return subprocess.run([*argv, "true"], capture_output=True).returncode == 0


def _unreachable_by_nobody(package: pathlib.Path) -> str:
    """Why uid 65534 cannot run what the test runs (this interpreter, reading the serving script,
    importing the package), or "" when it can."""
    check = (f"open({str(SERVING_SCRIPT)!r}).read(); import pytriton; "
             f"assert pytriton.__file__.startswith({str(package)!r})")
    probe = subprocess.run(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", sys.executable,
                            "-c", check], capture_output=True, text=True)
    if probe.returncode != 0:
        return (probe.stderr.strip().splitlines() or ["it cannot run " + sys.executable])[-1]
    return ""


def _zombies_under(process: psutil.Process) -> dict:
    """Defunct descendants of `process`: pid -> "name (parent pid)"."""
    zombies = {}
    for child in process.children(recursive=True):
        try:
            if child.status() == psutil.STATUS_ZOMBIE:
                zombies[child.pid] = f"{child.name()} (parent {child.ppid()})"
        except psutil.NoSuchProcess:
            pass
    return zombies


def _ask(base: str, seconds: float = 0.0) -> float:
    with ModelClient(base, "Sleep", init_timeout_s=10, inference_timeout_s=10) as client:
        return float(client.infer_sample(seconds=np.array([seconds], dtype=np.float32))["seconds"][0])


PID_1 = ("unshare", "-p", "-f", "--mount-proc")


@pytest.mark.skipif(not _root_can(*PID_1), reason="needs root and unshare for a PID namespace")
@pytest.mark.parametrize("fault", ["sigterm", "stub killed, then sigterm", "tritonserver killed"])
def test_as_pid_1_the_script_reaps_every_child_and_stops_within_the_exit_timeout(fault):
    exit_timeout_s = 10
    env = dict(os.environ, **PROXY_ENV) if fault == "stub killed, then sigterm" else None  # a stub to kill
    script = ServingScript(exit_timeout_s=exit_timeout_s, wrapper=PID_1, env=env)
    try:
        assert script.info["pid"] == 1
        root = script.root()
        if fault == "stub killed, then sigterm":
            stub_processes("Sleep", root.pid)[0].kill()
            assert wait_until(lambda: http_status(f"{script.base}/v2/models/Sleep/ready") != 200, timeout_s=2)
            assert wait_until(lambda: http_status(f"{script.base}/v2/models/Sleep/ready") == 200, timeout_s=10)
            assert _ask(script.base) == 0.0
            # The stub died idle, so Triton finished its unload and waited for it: nothing defunct.
            assert wait_until(lambda: not _zombies_under(root), timeout_s=3), _zombies_under(root)
        if fault == "tritonserver killed":
            script.server().kill()
            expected = lambda code: code != 0  # noqa: E731 - a crash is not a clean stop
        else:
            root.send_signal(signal.SIGTERM)
            expected = lambda code: code == 0  # noqa: E731
        started = time.monotonic()
        # Zombies are checked while the script still runs (afterwards the namespace is gone). A
        # process is defunct for a moment between its exit and its parent's wait, so a sample may
        # catch one; what must not happen is one that stays: defunct in samples 1 s apart.
        first_seen: dict = {}
        while script.process.poll() is None and time.monotonic() - started < exit_timeout_s + 5:
            time.sleep(0.1)
            try:
                if root.status() == psutil.STATUS_ZOMBIE:
                    break
                zombies = _zombies_under(root)
            except psutil.NoSuchProcess:
                break
            now = time.monotonic()
            first_seen = {pid: first_seen.get(pid, now) for pid in zombies}
            kept = {pid: zombies[pid] for pid, seen in first_seen.items() if now - seen >= 1.0}
            assert not kept, f"zombies kept 1 s under the PID-1 script, {now - started:.1f} s after the fault: {kept}"
        returncode, err = script.finish(timeout_s=5)
        took = time.monotonic() - started
    finally:
        if script.process.poll() is None:
            script.kill()
    assert expected(returncode), (returncode, err[-2000:])
    assert took < exit_timeout_s + 2, f"stopping took {took:.1f} s with an exit timeout of {exit_timeout_s} s"


@pytest.mark.skipif(not _root_can("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"),
                    reason="needs root and setpriv to run as another user")
def test_the_script_serves_as_an_unprivileged_user_with_only_tmpdir_writable(tmp_path):
    package = pathlib.Path(__import__("pytriton").__file__).parent
    reach = _unreachable_by_nobody(package)
    if reach:
        pytest.skip(f"uid {NOBODY} cannot reach this checkout ({reach}): a checkout in a folder only its owner may "
                    "enter (mktemp -d, a home folder) runs this test from nowhere another user can read; clone it "
                    "under /tmp or a world-traversable folder to run it")
    writable = tmp_path / "tmp"  # the only folder the user may write (an emptyDir in Kubernetes)
    writable.mkdir()
    os.chown(writable, NOBODY, NOBODY)
    tmp_path.chmod(tmp_path.stat().st_mode | stat.S_IXOTH)
    probe = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "test", "-w",
                            str(package)], capture_output=True)
    assert probe.returncode != 0, "the package must be read-only to the serving user"
    env = {key: value for key, value in os.environ.items() if key not in ("HOME", "TMPDIR")}
    env.update(TMPDIR=str(writable), HOME="/nonexistent")
    script = ServingScript(wrapper=("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"), env=env)
    try:
        root = script.root()
        assert root.uids().real == NOBODY
        assert all(child.uids().real == NOBODY for child in root.children(recursive=True))
        assert _ask(script.base, 0.0) == 0.0
        root.send_signal(signal.SIGTERM)
        returncode, err = script.finish(timeout_s=20)
    finally:
        if script.process.poll() is None:
            script.kill()
    assert returncode == 0, err[-2000:]
    assert list(writable.iterdir()) == [], "the workspace in TMPDIR was left behind"
    prefix = f"pytriton-{script.info['pid']}-"
    assert not [name for name in os.listdir("/dev/shm") if name.startswith(prefix)]


PRIVATE_SHM = ("unshare", "-m", "sh", "-c", 'mount -t tmpfs -o size=256m tmpfs /dev/shm && exec "$0" "$@"')
"""A container with a /dev/shm of its own and the host's /tmp (a shared volume)."""


@pytest.mark.skipif(not (_root_can(*PID_1) and _root_can(*PRIVATE_SHM)),
                    reason="needs root and unshare for a PID namespace and a private /dev/shm")
def test_a_start_in_another_pid_namespace_leaves_a_live_server_with_a_private_shm_alone():
    """Two containers sharing /tmp but not /dev/shm: the second, in a PID namespace of its own where
    the first's pid does not exist, starts pytriton, which sweeps what dead servers left. The first
    server's lease in /dev/shm is out of its sight; its folder's lease tells it the server lives."""
    script = ServingScript(wrapper=PRIVATE_SHM)
    try:
        prefix = f"pytriton-{script.info['pid']}-"
        folders = lambda: [name for name in os.listdir("/tmp") if name.startswith(prefix)]  # noqa: E731
        assert len(folders()) == 1, folders()
        sweep = subprocess.run([*PID_1, sys.executable, "-c",
                                "from pytriton.server.workspace import sweep_stale; print(sweep_stale('/tmp'))"],
                               capture_output=True, text=True, timeout=60)
        assert sweep.returncode == 0, sweep.stderr[-2000:]
        assert prefix not in sweep.stdout, sweep.stdout
        assert len(folders()) == 1, folders()
        assert _ask(script.base, 0.0) == 0.0
        script.root().send_signal(signal.SIGTERM)
        returncode, err = script.finish(timeout_s=30)
    finally:
        if script.process.poll() is None:
            script.kill()
    assert returncode == 0, err[-2000:]
    assert folders() == []
