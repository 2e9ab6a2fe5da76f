"""A client killed with its shared-memory regions: a starting server's sweep removes them, and
leaves a live client's alone (the client's lease is the one servers use, `pytriton.client_regions`)."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest
from support import shm_entries

from pytriton.client.shm_regions import RegionPool
from pytriton.server.workspace import sweep_stale

pytestmark = pytest.mark.integration

CLIENT = """
import sys
from pytriton.client.shm_regions import RegionPool
pool = RegionPool()
pool.create(10)
pool.create(10)
print(pool.owner_id, flush=True)
sys.stdin.readline()
"""


def test_the_next_start_sweeps_a_killed_clients_regions_and_keeps_a_live_ones(tmp_path):
    process = subprocess.Popen([sys.executable, "-c", CLIENT], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               text=True)
    live = RegionPool()
    try:
        owner = process.stdout.readline().strip()
        assert len(shm_entries(owner)) == 3  # two regions and the lease
        live.create(10)
        kept = shm_entries(live.owner_id)
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)

        removed = sweep_stale(tmp_dir=str(tmp_path))

        assert shm_entries(owner) == []
        assert sorted(name for name in removed if name.startswith(owner)) == [
            f"{owner}-client-0", f"{owner}-client-1", f"{owner}-lock"]
        assert shm_entries(live.owner_id) == kept
    finally:
        process.kill()
        process.wait(timeout=30)
        process.stdin.close()
        process.stdout.close()
        live.close()
    assert shm_entries(live.owner_id) == []
