"""pytriton.ipc.shm under a small /dev/shm: arena sizing, giving way, shrinking, and the messages.

The room left in /dev/shm is simulated by replacing `shm.shm_usage` (this host's /dev/shm is
large); the real 64 MB case runs in tests/functional/faults/test_small_shm.py.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from support import shm_entries

from pytriton.ipc import codec, shm
from pytriton.ipc.protocol import INLINE_MAX_BYTES
from pytriton.ipc.shm import MIB, SHM_DIR, Arena, SegmentReader, ShmUsage

GIB = 1 << 30


def _arena(prefix, direction="out"):
    return Arena(lambda generation: f"{prefix}-0-{direction}-{generation}")


@pytest.fixture
def free_space(monkeypatch):
    """Set what `shm_usage()` reports as free (the total is 64 MiB)."""

    def set_free(free):
        monkeypatch.setattr(shm, "shm_usage", lambda directory=SHM_DIR: ShmUsage(64 * MIB, free))

    return set_free


def test_arena_size_is_whole_mib_steps_not_powers_of_two():
    assert shm.arena_size(0) == MIB
    assert shm.arena_size(1) == MIB
    assert shm.arena_size(MIB) == MIB
    assert shm.arena_size(MIB + 1) == 2 * MIB
    assert shm.arena_size(24 * MIB) == 24 * MIB  # a power-of-two arena took 32 MiB here
    assert shm.arena_size(24 * MIB + 64) == 25 * MIB


def test_leaves_room_keeps_the_message_size_free_for_tritons_pool():
    # a 24 MiB message: the arena takes 24 MiB and must leave 24 MiB + one step for Triton's pool
    assert shm.leaves_room(24 * MIB, 24 * MIB, 49 * MIB)
    assert not shm.leaves_room(24 * MIB, 24 * MIB, 49 * MIB - 1)
    assert not shm.leaves_room(24 * MIB, 24 * MIB, 38 * MIB)  # what a 64 MB /dev/shm has left
    assert shm.leaves_room(MIB, 100_000, 8 * GIB)


def test_output_room_counts_free_space_and_the_pool_less_its_inputs_and_base():
    assert shm.output_room(13 * MIB, 51 * MIB, 40 * MIB) == 13 * MIB + 10 * MIB
    assert shm.output_room(13 * MIB, 10 * MIB, 40 * MIB) == 13 * MIB  # never below the free space
    assert shm.output_room(0, 0, 0) == 0


def test_suggested_size_is_at_least_256_mib_in_256_mib_steps():
    assert shm.suggested_shm_bytes(0) == 256 * MIB
    assert shm.suggested_shm_bytes(80 * MIB) == 256 * MIB  # 2 x 80 + 16 = 176
    assert shm.suggested_shm_bytes(120 * MIB) == 256 * MIB  # 256 exactly
    assert shm.suggested_shm_bytes(121 * MIB) == 512 * MIB
    assert shm.suggested_shm_bytes(GIB) == 2304 * MIB


def test_shortage_message_names_shm_sizes_model_and_both_fixes():
    message = shm.shortage_message("resnet", 40 * MIB, 41943040, ShmUsage(64 * MIB, 13 * MIB))
    assert message.startswith("Model 'resnet': ")
    assert "40.0 MiB (41943040 bytes) of output tensors" in message
    assert "/dev/shm has only 13.0 MiB free of 64.0 MiB" in message
    assert "40.0 MiB of inputs" in message
    assert "docker run --shm-size=256m" in message
    assert "emptyDir" in message and "medium: Memory" in message and "sizeLimit: 256Mi" in message


def test_reserve_takes_its_pages_up_front(shm_prefix):
    arena = _arena(shm_prefix)
    try:
        assert arena.reserve(3 * MIB + 5)
        info = os.stat(os.path.join(SHM_DIR, arena.name))
        assert info.st_size == 4 * MIB
        # allocated, not sparse: a full /dev/shm would have refused here instead of a SIGBUS later
        assert info.st_blocks * 512 >= 4 * MIB
    finally:
        arena.close()


def test_reserve_gives_way_when_growing_would_starve_tritons_pool(shm_prefix, free_space):
    arena = _arena(shm_prefix)
    try:
        free_space(60 * MIB)
        assert arena.reserve(4 * MIB)
        assert arena.capacity == 4 * MIB
        free_space(38 * MIB)
        assert not arena.reserve(24 * MIB)
        # it holds nothing now: its 4 MiB went back to /dev/shm for Triton's pool
        assert arena.capacity == 0
        assert shm_entries(shm_prefix) == []
        assert arena.refusals == 1
        free_space(60 * MIB)
        assert arena.reserve(4 * MIB)  # room again: the fast path comes back
        assert shm_entries(shm_prefix) == [arena.name]
    finally:
        arena.close()


def test_reserve_within_capacity_needs_no_room(shm_prefix, free_space):
    arena = _arena(shm_prefix)
    try:
        assert arena.reserve(8 * MIB)
        free_space(0)
        name = arena.name
        assert arena.reserve(8 * MIB)  # the pages are already ours
        assert arena.name == name
    finally:
        arena.close()


def test_a_refused_posix_fallocate_is_a_refusal_not_an_error(shm_prefix, monkeypatch):
    import errno

    def full(fd, offset, length):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "posix_fallocate", full)
    arena = _arena(shm_prefix)
    try:
        assert not arena.reserve(2 * MIB)
        assert arena.capacity == 0
        assert shm_entries(shm_prefix) == []  # the half-made segment is gone
    finally:
        arena.close()


def test_other_errors_still_raise(shm_prefix, monkeypatch):
    import errno

    def broken(fd, offset, length):
        raise OSError(errno.EIO, "I/O error")

    monkeypatch.setattr(os, "posix_fallocate", broken)
    arena = _arena(shm_prefix)
    try:
        with pytest.raises(OSError, match="I/O error"):
            arena.reserve(2 * MIB)
        assert shm_entries(shm_prefix) == []
    finally:
        arena.close()


def test_arena_shrinks_after_a_window_of_smaller_messages(shm_prefix):
    arena = _arena(shm_prefix)
    try:
        assert arena.reserve(20 * MIB)
        big = arena.name
        for _ in range(shm.SHRINK_WINDOW - 2):
            assert arena.reserve(3 * MIB)
            assert arena.name == big  # no churn inside a window
        assert arena.reserve(2 * MIB)  # the window closes: its peak was 20 MiB, keep
        assert arena.name == big
        for _ in range(shm.SHRINK_WINDOW - 1):
            assert arena.reserve(3 * MIB)
        assert arena.name == big
        assert arena.reserve(MIB)  # this window's peak was 3 MiB: shrink to it
        assert arena.capacity == 3 * MIB
        assert shm_entries(shm_prefix) == [arena.name] != [big]
    finally:
        arena.close()


def test_steady_traffic_never_recreates_its_arena(shm_prefix):
    arena = _arena(shm_prefix)
    try:
        arena.reserve(10 * MIB)
        name = arena.name
        for index in range(5 * shm.SHRINK_WINDOW):
            assert arena.reserve((6 + index % 5) * MIB)
        assert arena.name == name
    finally:
        arena.close()


def test_an_arena_whose_messages_stop_using_it_is_released(shm_prefix):
    arena = _arena(shm_prefix)
    arena.reserve(5 * MIB)
    for _ in range(shm.SHRINK_WINDOW - 1):
        assert arena.reserve(0)
    assert arena.capacity == 5 * MIB  # the window that saw 5 MiB keeps them
    for _ in range(shm.SHRINK_WINDOW):
        assert arena.reserve(0)
    assert arena.capacity == 0
    assert shm_entries(shm_prefix) == []
    arena.close()


class _Clock:
    """A monotonic clock the test moves by hand (the arena reads `time.monotonic`)."""

    def __init__(self, monkeypatch):
        self.now = 1000.0
        monkeypatch.setattr(shm.time, "monotonic", lambda: self.now)


def test_after_a_quiet_spell_the_next_message_alone_sizes_the_arena(shm_prefix, monkeypatch):
    clock = _Clock(monkeypatch)
    arena = _arena(shm_prefix)
    try:
        assert arena.reserve(20 * MIB)
        big = arena.name
        clock.now += shm.IDLE_RELEASE_S - 0.1
        assert arena.reserve(MIB) and arena.name == big  # not quiet long enough: the window goes on
        clock.now += shm.IDLE_RELEASE_S
        assert arena.reserve(2 * MIB)
        assert arena.capacity == 2 * MIB and shm_entries(shm_prefix) == [arena.name] != [big]
        clock.now += shm.IDLE_RELEASE_S
        assert arena.reserve(0)  # a small message after a quiet spell: nothing is kept at all
        assert arena.capacity == 0 and shm_entries(shm_prefix) == []
    finally:
        arena.close()


def test_an_arena_found_idle_is_released_and_comes_back_on_demand(shm_prefix, monkeypatch):
    clock = _Clock(monkeypatch)
    arena = _arena(shm_prefix)
    try:
        assert not arena.release_if_idle(clock.now + 3600)  # holds nothing yet
        assert arena.reserve(8 * MIB)
        assert not arena.release_if_idle(clock.now + shm.IDLE_RELEASE_S - 0.1)
        assert shm_entries(shm_prefix) == [arena.name]
        clock.now += shm.IDLE_RELEASE_S
        assert arena.release_if_idle(clock.now)
        assert arena.capacity == 0 and shm_entries(shm_prefix) == []
        assert arena.reserve(3 * MIB) and arena.capacity == 3 * MIB
    finally:
        arena.close()


def test_a_one_step_arena_is_released_when_no_message_needs_it(shm_prefix):
    arena = _arena(shm_prefix)
    try:
        assert arena.reserve(100_000) and arena.capacity == MIB  # the smallest arena: one step
        for _ in range(2 * shm.SHRINK_WINDOW):
            assert arena.reserve(0)
        assert arena.capacity == 0 and shm_entries(shm_prefix) == []
    finally:
        arena.close()


def test_pack_sends_large_tensors_inline_when_the_arena_gives_way(shm_prefix, free_space):
    arena = _arena(shm_prefix)
    reader = SegmentReader()
    large = np.arange(3 * MIB // 4, dtype=np.float32)
    try:
        columns, segment, frames = codec.pack([{"A": large}], arena)
        assert segment == arena.name and columns[0].in_shm == (True,)
        codec.unpack(columns, segment, b"".join(frames), reader, 1)  # the reader maps the arena
        mapping = reader.buffer(segment)
        free_space(MIB)
        larger = np.concatenate([large, large])  # 6 MiB: the 3 MiB arena would have to grow
        columns, segment, frames = codec.pack([{"A": larger}, {"A": large[:10]}], arena)
        assert segment == ""
        assert columns[0].in_shm == (False, False)
        assert shm_entries(shm_prefix) == []
        result = codec.unpack(columns, segment, b"".join(frames), reader, 2)
        np.testing.assert_array_equal(result[0]["A"], larger)
        np.testing.assert_array_equal(result[1]["A"], large[:10])
        assert mapping.closed  # the arena given up is unmapped on the reader side too
        assert large.nbytes > INLINE_MAX_BYTES
    finally:
        reader.close()
        arena.close()


def test_reader_forgets_a_segment_its_owner_gave_up(shm_prefix):
    arena = _arena(shm_prefix)
    reader = SegmentReader()
    try:
        arena.reserve(MIB)
        mapping = reader.buffer(arena.name)
        reader.forget_gone()
        assert not mapping.closed  # still the owner's: kept
        arena.close()
        reader.forget_gone()
        assert mapping.closed  # unlinked: its pages go back to /dev/shm now, not at exit
    finally:
        reader.close()
        arena.close()


def test_mapped_segments_reads_the_shm_entries_of_a_maps_file(tmp_path):
    maps = tmp_path / "maps"
    maps.write_text(
        "7f00-7f10 r-xp 00000000 08:01 12 /usr/lib/libc.so.6\n"
        "7f10-7f20 rw-s 00000000 00:1b 217 /dev/shm/pytriton-1-ab-tpb5fa4\n"
        "7f20-7f30 rw-s 00000000 00:1b 217 /dev/shm/pytriton-1-ab-tpb5fa4\n"
        "7f30-7f40 r--s 00000000 00:1b 218 /dev/shm/pytriton-1-ab-m1-0-out-3 (deleted)\n"
        "7f40-7f50 rw-p 00000000 00:00 0 \n"
    )
    assert shm.mapped_segments(str(maps)) == ["pytriton-1-ab-tpb5fa4", "pytriton-1-ab-m1-0-out-3"]
    assert shm.mapped_segments(str(tmp_path / "missing")) == []


def test_segment_size(shm_prefix):
    arena = _arena(shm_prefix)
    try:
        arena.reserve(2 * MIB)
        assert shm.segment_size(arena.name) == 2 * MIB
        assert shm.segment_size("") == 0
        assert shm.segment_size(f"{shm_prefix}-none") == 0
    finally:
        arena.close()
