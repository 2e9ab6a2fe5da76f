"""pytriton.ipc.shm: the writer's growable Arena and the reader's read-only SegmentReader."""

from __future__ import annotations

import mmap
import os
import stat

import numpy as np
import pytest
from support import shm_entries

from pytriton.ipc.shm import ALIGNMENT, MIN_ARENA_BYTES, SHM_DIR, Arena, SegmentReader, aligned


def _arena(prefix, direction="out"):
    return Arena(lambda generation: f"{prefix}-0-{direction}-{generation}")


def test_aligned():
    assert aligned(0) == 0
    assert aligned(1) == ALIGNMENT
    assert aligned(ALIGNMENT) == ALIGNMENT
    assert aligned(ALIGNMENT + 1) == 2 * ALIGNMENT
    assert ALIGNMENT == 64


def test_arena_has_no_segment_before_reserve(shm_prefix):
    arena = _arena(shm_prefix)
    assert arena.capacity == 0
    assert shm_entries(shm_prefix) == []
    arena.close()  # closing an arena that never reserved is fine
    assert shm_entries(shm_prefix) == []


def test_reserve_creates_a_private_segment_of_at_least_one_mib(shm_prefix):
    arena = _arena(shm_prefix)
    try:
        arena.reserve(10)
        assert arena.name == f"{shm_prefix}-0-out-1"
        assert arena.capacity == MIN_ARENA_BYTES
        assert shm_entries(shm_prefix) == [arena.name]
        info = os.stat(os.path.join(SHM_DIR, arena.name))
        assert stat.S_IMODE(info.st_mode) == 0o600
        assert info.st_size == MIN_ARENA_BYTES
        assert info.st_uid == os.getuid()
        assert len(arena.view) == MIN_ARENA_BYTES
        assert not arena.view.readonly
    finally:
        arena.close()
    assert shm_entries(shm_prefix) == []


def test_reserve_within_capacity_keeps_the_segment(shm_prefix):
    arena = _arena(shm_prefix)
    try:
        arena.reserve(1000)
        arena.view[:4] = b"keep"
        arena.reserve(MIN_ARENA_BYTES)
        assert arena.name == f"{shm_prefix}-0-out-1"
        assert bytes(arena.view[:4]) == b"keep"
    finally:
        arena.close()


def test_growing_creates_a_new_generation_and_unlinks_the_old(shm_prefix):
    arena = _arena(shm_prefix)
    try:
        arena.reserve(100)
        assert shm_entries(shm_prefix) == [f"{shm_prefix}-0-out-1"]
        arena.reserve(MIN_ARENA_BYTES + 1)
        assert arena.name == f"{shm_prefix}-0-out-2"
        assert arena.capacity == 2 * MIN_ARENA_BYTES  # the next whole MiB
        assert shm_entries(shm_prefix) == [f"{shm_prefix}-0-out-2"]
        arena.reserve(5 * MIN_ARENA_BYTES + 1)
        assert arena.name == f"{shm_prefix}-0-out-3"
        assert arena.capacity == 6 * MIN_ARENA_BYTES  # not 8: no power-of-two rounding
        assert shm_entries(shm_prefix) == [f"{shm_prefix}-0-out-3"]
        assert stat.S_IMODE(os.stat(os.path.join(SHM_DIR, arena.name)).st_mode) == 0o600
    finally:
        arena.close()
    assert shm_entries(shm_prefix) == []


def test_close_unlinks_and_is_idempotent(shm_prefix):
    arena = _arena(shm_prefix)
    arena.reserve(1)
    arena.close()
    assert shm_entries(shm_prefix) == []
    assert arena.capacity == 0
    arena.close()
    # a closed arena can be used again; it starts a new generation
    arena.reserve(1)
    assert arena.name == f"{shm_prefix}-0-out-2"
    arena.close()
    assert shm_entries(shm_prefix) == []


def test_reserve_refuses_to_take_over_an_existing_segment(shm_prefix):
    squatter = os.path.join(SHM_DIR, f"{shm_prefix}-0-out-1")
    with open(squatter, "wb") as handle:
        handle.write(b"not ours")
    arena = _arena(shm_prefix)
    try:
        with pytest.raises(FileExistsError):
            arena.reserve(1)
        with open(squatter, "rb") as handle:
            assert handle.read() == b"not ours"
    finally:
        arena.close()
        os.unlink(squatter)


def test_closing_the_arena_with_a_live_array_on_its_view_does_not_raise(shm_prefix):
    arena = _arena(shm_prefix)
    arena.reserve(16)
    array = np.frombuffer(arena.view, dtype=np.uint8, count=16)
    arena.view[:3] = b"abc"
    arena.close()
    assert shm_entries(shm_prefix) == []
    assert bytes(array[:3]) == b"abc"  # still mapped while the array lives
    del array


def test_reader_maps_read_only(shm_prefix):
    arena = _arena(shm_prefix)
    reader = SegmentReader()
    try:
        arena.reserve(64)
        arena.view[:5] = b"hello"
        buffer = reader.buffer(arena.name)
        assert buffer[:5] == b"hello"
        with pytest.raises(TypeError):
            buffer[0:1] = b"x"
        array = np.frombuffer(buffer, dtype=np.uint8, count=5)
        assert not array.flags.writeable
        with pytest.raises(ValueError):
            array[0] = 1
        # the same segment maps once; the writer's later bytes show through the mapping
        assert reader.buffer(arena.name) is buffer
        arena.view[:5] = b"HELLO"
        assert bytes(array) == b"HELLO"
        del array
    finally:
        reader.close()
        arena.close()


def test_reader_replaces_the_mapping_of_an_older_generation(shm_prefix):
    arena = _arena(shm_prefix)
    reader = SegmentReader()
    try:
        arena.reserve(10)
        arena.view[:3] = b"one"
        first = reader.buffer(arena.name)
        arena.reserve(MIN_ARENA_BYTES * 2)
        arena.view[:3] = b"two"
        second = reader.buffer(arena.name)
        assert second[:3] == b"two"
        assert first.closed
        assert not second.closed
        # another arena (another direction or instance) keeps its own mapping
        other = _arena(shm_prefix, direction="in")
        try:
            other.reserve(10)
            reader.buffer(other.name)
            assert reader.buffer(arena.name) is second
        finally:
            other.close()
    finally:
        reader.close()
        arena.close()
    assert second.closed


def test_reader_close_with_a_live_array_does_not_raise(shm_prefix):
    arena = _arena(shm_prefix)
    reader = SegmentReader()
    arena.reserve(10)
    arena.view[:4] = b"live"
    array = np.frombuffer(reader.buffer(arena.name), dtype=np.uint8, count=4)
    reader.close()
    arena.close()
    assert shm_entries(shm_prefix) == []
    assert bytes(array) == b"live"  # the mapping lives as long as the array
    del array


def test_reader_new_generation_with_a_live_array_on_the_old_does_not_raise(shm_prefix):
    arena = _arena(shm_prefix)
    reader = SegmentReader()
    try:
        arena.reserve(10)
        arena.view[:3] = b"old"
        old = np.frombuffer(reader.buffer(arena.name), dtype=np.uint8, count=3)
        arena.reserve(MIN_ARENA_BYTES * 2)
        arena.view[:3] = b"new"
        assert reader.buffer(arena.name)[:3] == b"new"
        assert bytes(old) == b"old"
        del old
    finally:
        reader.close()
        arena.close()


def test_reader_of_a_missing_segment_raises(shm_prefix):
    reader = SegmentReader()
    with pytest.raises(FileNotFoundError):
        reader.buffer(f"{shm_prefix}-0-in-1")
    reader.close()


def test_reader_mapping_is_a_real_mmap(shm_prefix):
    arena = _arena(shm_prefix)
    reader = SegmentReader()
    try:
        arena.reserve(1)
        assert isinstance(reader.buffer(arena.name), mmap.mmap)
        assert len(reader.buffer(arena.name)) == arena.capacity
    finally:
        reader.close()
        arena.close()
