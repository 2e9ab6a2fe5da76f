"""The CPU-bound work of the ``cpu_5ms`` model: a pure-Python loop, the same code on both servers.

The harness calibrates the loop count once per run (`calibrate`, in its own process, which runs
the same interpreter as both servers) and hands that count to both, so the two do exactly the
same work per batch. The reference's ``model.py`` imports this file from its model folder, ours
from bench/.
"""

from __future__ import annotations

import time


def spin(count: int) -> int:
    """`count` iterations of integer arithmetic in Python bytecode: it holds the GIL throughout."""
    total = 0
    for index in range(count):
        total = (total + index * index) % 1_000_003
    return total


def calibrate(target_s: float = 0.005, probe: int = 50_000, repeats: int = 7) -> int:
    """The loop count that takes about `target_s` here (from the fastest of `repeats` timed probes)."""
    spin(probe)  # warm up
    timings = []
    for _ in range(repeats):
        started = time.perf_counter()
        spin(probe)
        timings.append(time.perf_counter() - started)
    return max(1, round(probe * target_s / min(timings)))  # the least: the unloaded speed
