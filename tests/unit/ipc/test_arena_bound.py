"""The stated bound of a shared-memory arena (`pytriton.ipc.shm.arena_bound`), on both sides of the hop.

The worker's arenas are `pytriton.ipc.shm.Arena`; the backend's are ``pytriton/backend/arena.c``,
compiled here into a small library and driven through ctypes. Under any mix of message sizes,
quiet spells included, each holds one segment at a time, of at most `arena_bound` of the largest
of its last `ARENA_MEMORY` messages, and the two take the same sizes. This is what `make soak`
judges instead of the size at two moments (which only says which payloads came last).
"""

from __future__ import annotations

import ctypes
import os
import pathlib
import random
import subprocess
from typing import List

import pytest
from support import shm_entries

from pytriton.ipc import shm
from pytriton.ipc.shm import ARENA_MEMORY, ARENA_STEP_BYTES, IDLE_RELEASE_S, Arena, arena_bound, arena_size

BACKEND = pathlib.Path(__file__).resolve().parents[3] / "pytriton" / "backend"
MIB = 1 << 20
SIZES = [0, 100 << 10, MIB - 1, MIB + 1, 5 * MIB // 2, 4 * MIB, 9 * MIB]
WEIGHTS = [20, 30, 10, 10, 6, 3, 1]


class CArena(ctypes.Structure):
    """`pyt_arena` of arena.h."""

    _fields_ = [
        ("stem", ctypes.c_char * 200),
        ("name", ctypes.c_char * 224),
        ("base", ctypes.c_void_p),
        ("capacity", ctypes.c_size_t),
        ("window_count", ctypes.c_uint32),
        ("window_peak", ctypes.c_size_t),
        ("last_use", ctypes.c_double),
        ("refusals", ctypes.c_uint32),
    ]


@pytest.fixture(scope="module")
def arena_c(tmp_path_factory):
    """arena.c as a shared library (the backend's own code, built with the system's C compiler)."""
    library = tmp_path_factory.mktemp("arena") / "libarena.so"
    compiler = os.environ.get("CC", "cc")
    subprocess.run([compiler, "-O1", "-shared", "-fPIC", "-o", str(library), str(BACKEND / "arena.c")], check=True)
    lib = ctypes.CDLL(str(library))
    lib.pyt_arena_reserve.argtypes = [ctypes.POINTER(CArena), ctypes.c_size_t, ctypes.c_double]
    lib.pyt_arena_reserve.restype = ctypes.c_int
    lib.pyt_arena_close.argtypes = [ctypes.POINTER(CArena)]
    return lib


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def drive(arena_c, shm_prefix: str, sizes: List[int], gaps: List[float], monkeypatch) -> List[tuple]:
    """Send `sizes` through a Python and a C arena (`gaps[i]` seconds before message i); after each,
    check the bound and one segment per arena. Returns (capacity, bound) per message."""
    clock = Clock()
    monkeypatch.setattr(shm.time, "monotonic", clock)
    worker = Arena(lambda generation: f"{shm_prefix}-0-out-{generation}")
    backend = CArena(stem=f"{shm_prefix}-0-in-".encode(), last_use=clock.now)
    seen = []
    try:
        for index, (nbytes, gap) in enumerate(zip(sizes, gaps)):
            clock.now += gap
            assert worker.reserve(nbytes)
            assert arena_c.pyt_arena_reserve(ctypes.byref(backend), nbytes, clock.now) == 1
            bound = arena_bound(max(sizes[max(0, index + 1 - ARENA_MEMORY):index + 1]))
            assert worker.capacity == backend.capacity, f"message {index}: the C arena differs"
            assert nbytes <= worker.capacity <= bound, f"message {index} of {nbytes} bytes"
            for direction in ("in", "out"):
                assert len(shm_entries(f"{shm_prefix}-0-{direction}-")) == (1 if worker.capacity else 0)
            seen.append((worker.capacity, bound))
    finally:
        worker.close()
        arena_c.pyt_arena_close(ctypes.byref(backend))
    return seen


@pytest.mark.parametrize("seed", range(3))
def test_under_a_random_mix_each_arena_keeps_within_its_bound_and_one_segment(arena_c, shm_prefix, monkeypatch, seed):
    rng = random.Random(seed)
    sizes = rng.choices(SIZES, WEIGHTS, k=1500)
    gaps = [IDLE_RELEASE_S + 1 if rng.random() < 0.01 else 0.001 for _ in sizes]  # a few quiet spells
    seen = drive(arena_c, shm_prefix, sizes, gaps, monkeypatch)
    capacities = {capacity for capacity, _ in seen}
    assert len(capacities) > 3, capacities  # the mix moved the arenas (not a trivially flat run)


def test_the_bound_is_reached_and_the_arena_shrinks_once_the_large_message_is_out_of_its_memory(
        arena_c, shm_prefix, monkeypatch):
    large, medium = 9 * MIB, 9 * MIB // 2  # steps: 9 and 5
    sizes = [large] + [medium] * (2 * ARENA_MEMORY) + [100 << 10] * (2 * ARENA_MEMORY)
    seen = drive(arena_c, shm_prefix, sizes, [0.001] * len(sizes), monkeypatch)
    # Windows of 4.5 MiB messages keep the 9 MiB arena: 9 < 2 x 5 steps, which is the bound itself.
    assert seen[ARENA_MEMORY + 10] == (9 * MIB, 9 * MIB) == (9 * MIB, 2 * arena_size(medium) - ARENA_STEP_BYTES)
    # Windows of small messages shrink it to one step.
    assert seen[-1][0] == MIB


def test_an_arena_whose_messages_need_nothing_holds_nothing(arena_c, shm_prefix, monkeypatch):
    sizes = [4 * MIB] + [0] * ARENA_MEMORY
    seen = drive(arena_c, shm_prefix, sizes, [0.001] * len(sizes), monkeypatch)
    assert seen[-1] == (0, 0)
    assert arena_bound(0) == 0 and arena_bound(1) == MIB
