"""Shared-memory arenas for tensor bytes that are too large for a ZeroMQ frame.

Each side of an instance owns one arena per direction and is its only writer: the proxy writes
the inputs of a batch, the worker the outputs. A batch is laid out from offset 0 each time, so
there is no allocator; an arena that is too small is replaced by a larger one under the next
generation's name. The owner unlinks its segments; the reader only maps and closes them.

Segments are plain files in /dev/shm created with mode 0600, without `multiprocessing`'s
resource tracker (which would start a process of its own inside Triton's stub).

/dev/shm is often small (64 MB in a Docker container by default) and Triton's Python backend
needs room there too: its own pool holds every request's inputs and outputs while the request
is served, and it never shrinks. So an arena is a fast path that gives way when room is short:

- its pages are allocated when it is created (``posix_fallocate``), so a full /dev/shm shows as
  a refused growth, never as a SIGBUS on a later write (which kills the whole process);
- it grows in 1 MiB steps to what a message needs, and only while /dev/shm keeps at least as
  much free again for Triton's pool; when it cannot grow, `Arena.reserve` says so and the
  caller sends the message's tensors inline (through the socket) instead;
- it shrinks back when a window of messages needed far less than it holds, so one large batch
  does not keep its peak for the rest of the server's life;
- an arena left unused for `IDLE_RELEASE_S` is given back: by an owner that wakes up while idle
  (`Arena.release_if_idle`), else at its next message, which then sizes it alone. A burst of
  large requests followed by a quiet spell thus leaves neither /dev/shm nor RSS at its peak.

So an arena's size follows the payloads it carried last, within a stated bound (`arena_bound`):
at most ``2 * arena_size(m) - ARENA_STEP_BYTES`` when the largest of its last `ARENA_MEMORY`
messages had ``m`` bytes, nothing when none of them needed it, one segment at a time. Under a
mix of payload sizes it moves anywhere between 0 and that bound (the soak, ``harness/soak.py``,
judges the bound rather than the size at two moments); the C backend's arenas (``arena.c``)
follow the same rule.
"""

from __future__ import annotations

import errno
import logging
import mmap
import os
import time
from typing import Callable, Dict, List, NamedTuple, Optional, Tuple

SHM_DIR = "/dev/shm"
ALIGNMENT = 64
ARENA_STEP_BYTES = 1 << 20
"""Arenas grow in steps of this size (and are never smaller than one step)."""
MIN_ARENA_BYTES = ARENA_STEP_BYTES
SHRINK_WINDOW = 64
"""Messages after which an arena larger than twice what they needed shrinks to that need (to
nothing when none of them needed it)."""
IDLE_RELEASE_S = 5.0
"""An arena unused this long holds nothing back: released when found idle, or resized to the next message."""
ARENA_MEMORY = 2 * SHRINK_WINDOW
"""How many of an arena's latest messages bound its size (`arena_bound`): the window being filled
and the one before it."""
MIB = 1 << 20

logger = logging.getLogger("pytriton.ipc")

_NO_ROOM = frozenset({errno.ENOSPC, errno.ENOMEM, errno.EDQUOT})


def aligned(size: int) -> int:
    """`size` rounded up to the arena alignment (keeps every tensor's start 64-byte aligned)."""
    return (size + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT


def arena_size(nbytes: int) -> int:
    """The segment size an arena takes for `nbytes`: whole 1 MiB steps, at least one.

    Steps, not powers of two: the pages are allocated up front, so every byte of rounding is
    a byte of /dev/shm taken (a 24 MiB tensor would take 32 MiB with powers of two).
    """
    steps = max(1, -(-nbytes // ARENA_STEP_BYTES))
    return steps * ARENA_STEP_BYTES


def arena_bound(largest: int) -> int:
    """The most an arena holds once the largest of its last `ARENA_MEMORY` messages had `largest` bytes.

    An arena takes whole steps for a message (`arena_size`) and keeps them until a window of
    `SHRINK_WINDOW` messages needed at most half of them; so it holds less than twice the steps
    of the largest message of the window being filled or the one before it, and nothing once
    neither needed it. Its size at a given moment says which payloads came last, not whether it
    leaks: this bound, and one segment per arena, are what hold whatever the mix.
    """
    return 0 if largest <= 0 else 2 * arena_size(largest) - ARENA_STEP_BYTES


def leaves_room(size: int, nbytes: int, free: int) -> bool:
    """Whether taking a `size`-byte segment for an `nbytes` message leaves Triton's pool room.

    Triton's Python backend copies the same tensors into its own pool in /dev/shm (the inputs
    before the proxy sees them, the outputs after), so an arena may only take space that
    leaves at least `nbytes` plus one growth step free for it.
    """
    return free - size >= nbytes + ARENA_STEP_BYTES


class ShmUsage(NamedTuple):
    """Size and free space of the file system behind /dev/shm, in bytes."""

    total: int
    free: int


def shm_usage(directory: str = SHM_DIR) -> ShmUsage:
    """`ShmUsage` of `directory` (the space an unprivileged writer can still take)."""
    info = os.statvfs(directory)
    return ShmUsage(info.f_blocks * info.f_frsize, info.f_bavail * info.f_frsize)


def suggested_shm_bytes(request_bytes: int) -> int:
    """A /dev/shm size that serves requests of `request_bytes` (inputs plus outputs) on the fast path.

    Measured: Triton's pool holds a request's inputs and outputs at once (their bytes plus
    about 3 MiB, and it keeps its peak), and pytriton's two arenas hold them once more; 16 MiB
    covers the pool's start. Rounded up to whole 256 MiB, and never under 256 MiB.
    """
    step = 256 * MIB
    return max(step, -(-(2 * request_bytes + 16 * MIB) // step) * step)


def shm_fix(request_bytes: int) -> str:
    """How to give /dev/shm room for requests of `request_bytes`: the Docker and Kubernetes settings."""
    mib = suggested_shm_bytes(request_bytes) // MIB
    return (
        f"give {SHM_DIR} more room: start the container with `docker run --shm-size={mib}m ...` (Docker's "
        f"default is 64 MB), or in Kubernetes mount an emptyDir with `medium: Memory` and `sizeLimit: {mib}Mi` "
        f"at {SHM_DIR}"
    )


def shortage_message(model_name: str, input_bytes: int, output_bytes: int, usage: ShmUsage) -> str:
    """The error a requester gets when its response cannot fit in shared memory.

    Names only this request's own sizes, never another requester's.
    """
    return (
        f"Model '{model_name}': the response to this request holds {output_bytes / MIB:.1f} MiB "
        f"({output_bytes} bytes) of output tensors, which Triton's Python backend must copy into shared memory "
        f"next to the request's {input_bytes / MIB:.1f} MiB of inputs, but {SHM_DIR} has only "
        f"{usage.free / MIB:.1f} MiB free of {usage.total / MIB:.1f} MiB. To serve it, "
        f"{shm_fix(input_bytes + output_bytes)}."
    )


POOL_BASE_BYTES = 1 << 20
"""What Triton's pool keeps for itself (its default size, ``shm-default-byte-size``)."""


def output_room(free: int, pool_size: int, input_bytes: int) -> int:
    """The most output bytes Triton's pool could still take for a batch whose inputs it holds.

    An upper bound: /dev/shm's free space (the pool may grow into it) plus whatever of the
    pool is neither its own base nor the batch's inputs (which stay there until the outputs
    have been copied in). A response larger than this cannot fit, however the pool is laid out.
    """
    return free + max(0, pool_size - input_bytes - POOL_BASE_BYTES)


def mapped_segments(maps_path: str = "/proc/self/maps") -> List[str]:
    """The /dev/shm segments this process maps, in the order first mapped."""
    marker = f" {SHM_DIR}/"
    found: List[str] = []
    try:
        with open(maps_path, encoding="utf-8", errors="replace") as maps:
            for line in maps:
                at = line.find(marker)
                if at >= 0:
                    name = line[at + len(marker):].rstrip("\n")
                    if name.endswith(" (deleted)"):
                        name = name[: -len(" (deleted)")]
                    if name not in found:
                        found.append(name)
    except OSError:
        return []
    return found


def segment_size(name: str) -> int:
    """The size of segment `name` (0 when there is none)."""
    if not name:
        return 0
    try:
        return os.stat(_path(name)).st_size
    except OSError:
        return 0


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
        self._window_count = 0
        self._window_peak = 0
        self._refusals = 0
        self._last_use = time.monotonic()

    @property
    def name(self) -> str:
        assert self._name is not None, "reserve() first"
        return self._name

    @property
    def view(self) -> memoryview:
        assert self._view is not None, "reserve() first"
        return self._view

    @property
    def refusals(self) -> int:
        """How many `reserve` calls found no room (their messages went inline)."""
        return self._refusals

    def reserve(self, nbytes: int) -> bool:
        """Make sure `nbytes` fit, for one message; called for every message, 0 when it needs none.

        Returns:
            True when the arena holds `nbytes`. False when /dev/shm cannot spare them (see
            `leaves_room`): the arena then holds no segment at all, giving its space back to
            Triton's pool, and the caller must send this message's tensors another way.

        Raises:
            OSError: creating the segment failed for another reason than a lack of room.
        """
        target = nbytes
        now = time.monotonic()
        after_quiet = now - self._last_use >= IDLE_RELEASE_S  # a quiet spell ends the window: this message sizes it
        self._last_use = now
        self._window_count += 1
        self._window_peak = nbytes if after_quiet else max(self._window_peak, nbytes)
        if self._window_count >= SHRINK_WINDOW or after_quiet:
            peak = self._window_peak
            self._window_count = self._window_peak = 0
            if self.capacity and (peak == 0 or arena_size(peak) * 2 <= self.capacity):
                self._release()  # steady traffic never gets here: its peak fills the arena
                target = peak
        if nbytes <= self.capacity:  # 0 always fits: an idle arena waits for a message to need it
            return True
        size = arena_size(target)
        self._release()
        try:
            created = leaves_room(size, nbytes, shm_usage().free) and self._create(size)
        except OSError as exc:
            if exc.errno not in _NO_ROOM:
                raise
            created = False
        if not created:
            self._refusals += 1
            if self._refusals == 1:
                usage = shm_usage()
                logger.warning(
                    "%s has %.1f MiB free of %.1f MiB: a message of %.1f MiB goes through the socket instead of "
                    "shared memory (slower). Give /dev/shm more room (docker run --shm-size=...).",
                    SHM_DIR, usage.free / MIB, usage.total / MIB, nbytes / MIB,
                )
        return created

    def release_if_idle(self, now: float) -> bool:
        """Give the segment back when no message used it for `IDLE_RELEASE_S`; True when it did.

        For an owner that wakes up between messages (the worker's receive timeout): an idle
        server then holds no arena at all. The next message creates one of its own size.
        """
        if self.capacity and now - self._last_use >= IDLE_RELEASE_S:
            self._release()
            self._window_count = self._window_peak = 0
            return True
        return False

    def _create(self, size: int) -> bool:
        self._generation += 1
        name = self._name_for(self._generation)
        fd = os.open(_path(name), os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
        try:
            os.posix_fallocate(fd, 0, size)  # pages taken now: ENOSPC here, never SIGBUS later
            self._mmap = mmap.mmap(fd, size)
        except BaseException:
            os.unlink(_path(name))
            raise
        finally:
            os.close(fd)
        self._name = name
        self._view = memoryview(self._mmap)
        self.capacity = size
        return True

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
    """Maps segments written by the peer, one mapping per arena (and access) at a time.

    A new generation of an arena (same name up to the last ``-``) replaces the old mapping.
    An arena its owner gave up (unlinked) keeps its memory while it is mapped, so `forget_gone`
    drops such mappings when the peer's messages stop using shared memory.

    Mappings are read-only unless asked otherwise: only the whole-batch path maps the sender's
    input arena writable, to hand its arrays to a ``@batch`` function without a copy (the
    sender writes that segment again only once the batch is answered, and gives it up when the
    function kept the arrays, `protocol.BatchResult.inputs_kept`).
    """

    def __init__(self) -> None:
        self._maps: Dict[Tuple[str, bool], Tuple[str, mmap.mmap]] = {}

    def buffer(self, segment: str, writable: bool = False) -> mmap.mmap:
        """The mapping of `segment` (read-only unless `writable`), opened on first use."""
        key = (segment.rpartition("-")[0], writable)
        entry = self._maps.get(key)
        if entry is not None and entry[0] == segment:
            return entry[1]
        fd = os.open(_path(segment), os.O_RDWR if writable else os.O_RDONLY)
        try:
            mapping = mmap.mmap(fd, 0, prot=mmap.PROT_READ | (mmap.PROT_WRITE if writable else 0))
        finally:
            os.close(fd)
        if entry is not None:
            _close_quietly(entry[1])
        self._maps[key] = (segment, mapping)
        return mapping

    def forget_gone(self) -> None:
        """Unmap the segments whose owner has unlinked them (one ``stat`` per mapping held)."""
        if not self._maps:
            return
        for base, (segment, mapping) in list(self._maps.items()):
            if not os.path.exists(_path(segment)):
                _close_quietly(mapping)
                del self._maps[base]

    def close(self) -> None:
        for _, mapping in self._maps.values():
            _close_quietly(mapping)
        self._maps.clear()


def _close_quietly(mapping: mmap.mmap) -> None:
    try:
        mapping.close()
    except BufferError:
        pass  # arrays handed to a callable still view it; it is unmapped when they are freed
