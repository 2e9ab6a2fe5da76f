"""The hop micro-benchmark (bench/hop.py) in its shortest form, so that it cannot rot.

It forks real processes over real transports (ZeroMQ, Unix sockets, a shared-memory ring with
eventfds) for a hundred round trips each, idle and under two CPU burners, and checks that every
variant gave positive figures and that nothing is left in /dev/shm.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
HOP = REPO / "bench" / "hop.py"
SIZES = (64, 1024 * 1024)  # inline and arena; 64 KiB only differs by the payload's length
VARIANTS = (
    "zmq_dealer_ipc", "zmq_dealer_ipc_nocopy", "zmq_dealer_ipc_poller", "zmq_dealer_ipc_opts",
    "zmq_dealer_tcp", "zmq_dealer_ipc_spin", "zmq_pair_ipc", "unix_stream", "unix_seqpacket",
    "shm_eventfd", "shm_eventfd_zmqpoll", "shm_eventfd_spin", "shm_sockbell",
)  # fmt: skip


def _leftovers() -> list:
    return sorted(name for name in os.listdir("/dev/shm") if name.startswith("pytriton-hopbench-"))


@pytest.mark.timeout(120)
def test_quick_hop_bench_measures_every_variant_idle_and_loaded(tmp_path):
    before = _leftovers()
    out = tmp_path / "hop.json"
    args = [sys.executable, str(HOP), "--quick", "--sizes", *map(str, SIZES), "--json", str(out)]
    result = subprocess.run(args, cwd=REPO, capture_output=True, text=True, timeout=110, check=False)
    assert result.returncode == 0, f"stdout:\n{result.stdout}\nstderr:\n{result.stderr[-4000:]}"

    document = json.loads(out.read_text())
    rows = {(r["variant"], r["size"], r["load"]): r for r in document["results"]}
    expected = {(v, s, load) for v in VARIANTS for s in SIZES for load in (0, 2)}
    assert set(rows) == expected
    for key, row in rows.items():
        assert "error" not in row, (key, row.get("error"))
        assert row["count"] >= 20, key  # the bench measures 20 at least, however slow
        assert 0 < row["median_us"] <= row["p90_us"] <= row["p99_us"], (key, row)
        assert row["round_trips_per_s"] > 0, key
        assert row["cpu_client_s_per_10k"] > 0 and row["cpu_server_s_per_10k"] > 0, (key, row)
    assert set(document["meta"]["variants"]) == set(VARIANTS)

    # stdout: one markdown table per (load, size), every variant a row, ours the 1.00 baseline
    assert result.stdout.count("| variant | median µs |") == len(SIZES) * 2
    assert result.stdout.count("| zmq_dealer_ipc | ") == len(SIZES) * 2
    assert _leftovers() == before


def test_hop_bench_refuses_a_size_under_its_message_floor():
    args = [sys.executable, str(HOP), "--quick", "--sizes", "8"]
    result = subprocess.run(args, cwd=REPO, capture_output=True, text=True, timeout=30, check=False)
    assert result.returncode == 2
    assert "--sizes: 8 is out of range" in result.stderr
