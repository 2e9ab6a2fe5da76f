"""Shared-memory arenas for tensor bytes that are too large for a ZeroMQ frame.

Each side of an instance owns one arena per direction and is its only writer: the proxy writes
the inputs of a batch, the worker the outputs. A batch is laid out from offset 0 each time, so
there is no allocator; an arena that is too small is replaced by a larger one under the next
generation's name. The owner unlinks its segments; the reader only maps and closes them.

Segments are plain files in /dev/shm created with mode 0600, without `multiprocessing`'s
resource tracker (which would start a process of its own inside Triton's stub).
"""

from __future__ import annotations

import mmap
import os
from typing import Callable, Dict, Optional, Tuple

SHM_DIR = "/dev/shm"
ALIGNMENT = 64
MIN_ARENA_BYTES = 1 << 20


def aligned(size: int) -> int:
    """`size` rounded up to the arena alignment (keeps every tensor's start 64-byte aligned)."""
    return (size + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT


def _path(name: str) -> str:
    return os.path.join(SHM_DIR, name)


class Arena:
    """A growable shared-memory buffer with a single writer (its owner).

    Args:
        name_for: builds the segment name for a generation number; the same function the
            reader side uses to recognise successive generations.
    """

    def __init__(self, name_for: Callable[[int], str]) -> None:
        self._name_for = name_for
        self._generation = 0
        self._name: Optional[str] = None
        self._mmap: Optional[mmap.mmap] = None
        self._view: Optional[memoryview] = None
        self.capacity = 0

    @property
    def name(self) -> str:
        assert self._name is not None, "reserve() first"
        return self._name

    @property
    def view(self) -> memoryview:
        assert self._view is not None, "reserve() first"
        return self._view

    def reserve(self, nbytes: int) -> None:
        """Make sure `nbytes` fit; replaces the segment with a larger one when they do not."""
        if nbytes <= self.capacity:
            return
        size = max(MIN_ARENA_BYTES, 1 << (max(nbytes, 1) - 1).bit_length())
        self._release()
        self._generation += 1
        name = self._name_for(self._generation)
        fd = os.open(_path(name), os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
        try:
            os.ftruncate(fd, size)
            self._mmap = mmap.mmap(fd, size)
        except BaseException:
            os.unlink(_path(name))
            raise
        finally:
            os.close(fd)
        self._name = name
        self._view = memoryview(self._mmap)
        self.capacity = size

    def _release(self) -> None:
        if self._view is not None:
            self._view.release()
            self._view = None
        if self._mmap is not None:
            try:
                self._mmap.close()
            except BufferError:
                pass  # a reader-side array still points here; the mapping dies with it
            self._mmap = None
        if self._name is not None:
            try:
                os.unlink(_path(self._name))
            except FileNotFoundError:
                pass
            self._name = None
        self.capacity = 0

    def close(self) -> None:
        """Unmap and unlink the current segment."""
        self._release()


class SegmentReader:
    """Maps segments written by the peer, read-only, one mapping per arena at a time.

    A new generation of an arena (same name up to the last ``-``) replaces the old mapping.
    """

    def __init__(self) -> None:
        self._maps: Dict[str, Tuple[str, mmap.mmap]] = {}

    def buffer(self, segment: str) -> mmap.mmap:
        """The read-only mapping of `segment`, opened on first use."""
        base = segment.rpartition("-")[0]
        entry = self._maps.get(base)
        if entry is not None and entry[0] == segment:
            return entry[1]
        fd = os.open(_path(segment), os.O_RDONLY)
        try:
            mapping = mmap.mmap(fd, 0, prot=mmap.PROT_READ)
        finally:
            os.close(fd)
        if entry is not None:
            _close_quietly(entry[1])
        self._maps[base] = (segment, mapping)
        return mapping

    def close(self) -> None:
        for _, mapping in self._maps.values():
            _close_quietly(mapping)
        self._maps.clear()


def _close_quietly(mapping: mmap.mmap) -> None:
    try:
        mapping.close()
    except BufferError:
        pass  # arrays handed to a callable still view it; it is unmapped when they are freed
