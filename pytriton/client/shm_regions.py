"""A client's shared-memory regions and the layout of one request in them (no network here).

The client step of a request that passes its tensors through Triton's system shared-memory
protocol instead of the socket (``shared_memory=`` of the clients; the requests themselves go
through ``pytriton.client.shm``, written once for the blocking and the asyncio client). This
module holds what needs no server:

- `ShmChoice`: what the ``shared_memory`` argument decided, and the fallback of ``"auto"``
  (one log line, then the socket) when the server cannot use the client's memory;
- `plan`: which tensors of a request go into a region, and where (pure);
- `Region` and `RegionPool`: the /dev/shm segments of one client, created once, reused by its
  requests, replaced by a larger one when a request does not fit, unlinked on close.

A tensor goes through shared memory when Triton can place it there: inputs of a fixed-size
data type (not BYTES), and outputs whose size the model configuration fixes (a fixed-size data
type and no ``-1`` dimension; Triton refuses an output larger than the room the request gives
it, after running the model, so an output of unknown size stays on the socket). Inputs are
copied into the region once; outputs are copied out once, before the region serves the next
request. The names and the owner's lease are ``pytriton.client_regions``'s, which a server's
sweeps read to clear what a killed client left.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import logging
import mmap
import os
import socket
import threading
import weakref
from collections.abc import Mapping
from typing import Any, List, Optional, Tuple, Union

import numpy as np
from tritonclient.utils import np_to_triton_dtype

from pytriton.client.exceptions import PyTritonClientClosedError, PyTritonClientValueError
from pytriton.client.model_config import ClientModelConfig
from pytriton.client_regions import SHM_DIR, OwnerLease, new_owner_id, region_name

_LOGGER = logging.getLogger("pytriton.client")

AUTO_MIN_BYTES = 64 * 1024
"""With ``shared_memory="auto"``, the smallest tensor that goes through shared memory; smaller
ones cost less through the socket than their copy into the region."""
ALIGNMENT = 64
STEP_BYTES = 1 << 20
"""Regions are made in whole steps of this size, so that a request slightly larger than the last
does not need a new region."""

_FIXED_SIZE_KINDS = "biufc"
_MODES = ("auto", True, False)


def aligned(size: int) -> int:
    return (size + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT


def region_size(nbytes: int) -> int:
    """The size of a region made for `nbytes`: whole `STEP_BYTES` steps, at least one."""
    return max(1, -(-nbytes // STEP_BYTES)) * STEP_BYTES


@dataclasses.dataclass(frozen=True)
class Slot:
    """Where one tensor lies in a region: its name, byte offset and byte size."""

    name: str
    offset: int
    nbytes: int


@dataclasses.dataclass(frozen=True)
class Layout:
    """One request's tensors in a region.

    Attributes:
        inputs: the inputs that go through the region (the others go through the socket).
        outputs: every output of the model in order, with its slot, or None for the socket.
        size: the bytes the region needs.
    """

    inputs: Tuple[Slot, ...]
    outputs: Tuple[Tuple[str, Optional[Slot]], ...]
    size: int


def _fixed_size(dtype: Optional[np.dtype]) -> bool:
    return dtype is not None and dtype.kind in _FIXED_SIZE_KINDS and np_to_triton_dtype(dtype) is not None


def plan(config: ClientModelConfig, inputs: Mapping[str, np.ndarray], min_bytes: int) -> Optional[Layout]:
    """The layout of a request in a region: the inputs and outputs of at least `min_bytes` that
    Triton can place there (see the module doc), 64-byte aligned one after another.

    Returns:
        None when no tensor goes through the region.
    """
    offset = 0
    input_slots: List[Slot] = []
    for name, value in inputs.items():
        if _fixed_size(value.dtype) and value.nbytes >= max(min_bytes, 1):
            input_slots.append(Slot(name, offset, value.nbytes))
            offset = aligned(offset + value.nbytes)
    output_slots: List[Tuple[str, Optional[Slot]]] = []
    batch = _batch_size(config, inputs)
    for spec in config.outputs:
        nbytes = None
        if batch is not None and _fixed_size(spec.dtype) and all(dim >= 0 for dim in spec.shape):
            nbytes = batch * int(np.prod(spec.shape, dtype=np.int64)) * spec.dtype.itemsize
        if nbytes is not None and nbytes >= max(min_bytes, 1):
            output_slots.append((spec.name, Slot(spec.name, offset, nbytes)))
            offset = aligned(offset + nbytes)
        else:
            output_slots.append((spec.name, None))
    if not input_slots and all(slot is None for _, slot in output_slots):
        return None
    return Layout(tuple(input_slots), tuple(output_slots), offset)


def _batch_size(config: ClientModelConfig, inputs: Mapping[str, np.ndarray]) -> Optional[int]:
    """The number of samples the outputs have in front of their dims: Triton reads it off the first input."""
    if not config.batching:
        return 1
    first = next(iter(inputs.values()), None)
    return int(first.shape[0]) if first is not None and first.ndim > 0 else None


class Region:
    """One /dev/shm segment of a client, mapped; created with mode 0600 and its pages allocated
    at once (a full /dev/shm fails here, not as a SIGBUS on a later write).

    Raises:
        OSError: /dev/shm is missing or full.
    """

    def __init__(self, name: str, size: int) -> None:
        self.name = name
        self.key = f"/{name}"
        self.size = size
        self.path = os.path.join(SHM_DIR, name)
        fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
        try:
            os.posix_fallocate(fd, 0, size)
            self._map: Optional[mmap.mmap] = mmap.mmap(fd, size)
        except BaseException:
            os.unlink(self.path)
            raise
        finally:
            os.close(fd)

    def write(self, slot: Slot, value: np.ndarray) -> None:
        """Copy `value` into `slot`."""
        target = np.ndarray(value.shape, dtype=value.dtype, buffer=self._mapped(), offset=slot.offset)
        np.copyto(target, value, casting="no")

    def read(self, slot: Slot, dtype: np.dtype, shape: Tuple[int, ...]) -> np.ndarray:
        """A copy of the array of `dtype` and `shape` that Triton wrote into `slot`.

        Raises:
            PyTritonClientValueError: the array would not fit the slot (a server that wrote
                another size than it answered).
        """
        count = int(np.prod(shape, dtype=np.int64))
        if count * dtype.itemsize > slot.nbytes:
            raise PyTritonClientValueError(
                f"Output {slot.name!r} of shape {list(shape)} does not fit its {slot.nbytes} bytes of shared memory"
            )
        view = np.frombuffer(self._mapped(), dtype=dtype, count=count, offset=slot.offset)
        return view.reshape(shape).copy()

    def _mapped(self) -> mmap.mmap:
        if self._map is None:
            raise PyTritonClientClosedError(f"Shared-memory region {self.name} is released: its client was closed")
        return self._map

    def release(self) -> None:
        """Unmap and unlink the segment. Idempotent."""
        _unlink(self.path)
        mapped, self._map = self._map, None
        if mapped is not None:
            try:
                mapped.close()
            except BufferError:  # an array still views it: the mapping goes with the last view
                pass


@dataclasses.dataclass(frozen=True)
class SharedTensors:
    """A request's tensors placed in a region, for the codec: the region and the layout."""

    region: Region
    layout: Layout

    def input_slot(self, name: str) -> Optional[Slot]:
        return next((slot for slot in self.layout.inputs if slot.name == name), None)

    def output_slot(self, name: str) -> Optional[Slot]:
        return dict(self.layout.outputs).get(name)


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _release_all(regions: List[Region], leases: List[OwnerLease]) -> None:
    """Unlink what a pool still holds (at close, or when a pool nobody closed is collected or
    the interpreter exits); the lease goes last."""
    for region in regions:
        region.release()
    regions.clear()
    for lease in leases:
        lease.release()
    leases.clear()


class RegionPool:
    """The regions of one client: each request takes one for itself and gives it back afterwards.

    A blocking client holds at most one at a time; an asyncio client as many as it has requests
    in flight. The bookkeeping only: registering with the server is the caller's (it awaits in
    an asyncio client). The owner's lease is taken with the first region.
    """

    def __init__(self) -> None:
        self.owner_id = new_owner_id()
        self._count = 0
        self._free: List[Region] = []
        self._all: List[Region] = []  # free, in use and not yet unregistered ones alike
        self._stale: List[Region] = []  # to unregister, then release
        self._leases: List[OwnerLease] = []
        self._finalizer = weakref.finalize(self, _release_all, self._all, self._leases)

    def take(self, nbytes: int) -> Optional[Region]:
        """A free region of at least `nbytes`, now in use; None when there is none.

        A free region too small for `nbytes` is marked stale (see `stale`): a new one replaces it.
        """
        for region in self._free:
            if region.size >= nbytes:
                self._free.remove(region)
                return region
        if self._free:
            self.retire(self._free.pop(0))
        return None

    def create(self, nbytes: int) -> Region:
        """A new region (in use, not registered yet) of `region_size(nbytes)` bytes.

        Raises:
            OSError: /dev/shm is missing or has no room.
        """
        if not self._leases:
            self._leases.append(OwnerLease(self.owner_id))
        region = Region(region_name(self.owner_id, self._count), region_size(nbytes))
        self._count += 1
        self._all.append(region)
        return region

    def give_back(self, region: Region) -> None:
        """A request is done with `region`: the next may take it."""
        self._free.append(region)

    def retire(self, region: Region) -> None:
        """Never use `region` again (a request that failed may still be writing into it, or it is
        too small): it is unregistered and released at the next `stale` call."""
        self._stale.append(region)

    def discard(self, region: Region) -> None:
        """Release a region the server never registered."""
        region.release()
        self._all.remove(region)

    def stale(self) -> List[Region]:
        """The retired regions, handed over once: unregister each, then `discard` it."""
        stale, self._stale = self._stale, []
        return stale

    def regions(self) -> List[Region]:
        """Every region not discarded yet (registered, or about to be)."""
        return list(self._all)

    def close(self) -> None:
        """Release every region and the lease (after they are unregistered)."""
        self._free.clear()
        self._stale.clear()
        self._finalizer()


ShmMode = Union[bool, str]


class ShmChoice:
    """What a client's ``shared_memory`` argument decided; shared by the clients of one
    `FuturesModelClient`, so that a refusal is found and logged once for all of them.

    Args:
        mode: ``"auto"``, True or False (see `shm_arg`).
        hostname: the server's host; ``"auto"`` uses shared memory only when it is this host.
    """

    def __init__(self, mode: ShmMode, hostname: str) -> None:
        self.mode = mode
        self._hostname = hostname
        self._local: Optional[bool] = None
        self._lock = threading.Lock()
        self.refusal: Optional[str] = None
        """Why "auto" went back to the socket, None while it has not."""

    def layout(self, config: ClientModelConfig, inputs: Mapping[str, np.ndarray]) -> Optional[Layout]:
        """The request's layout in a region, or None to send it all through the socket."""
        if self.mode is False or self.refusal is not None:
            return None
        if self.mode == "auto":
            if self._local is None:
                self._local = is_this_host(self._hostname)
            if not self._local:
                return None
            return plan(config, inputs, AUTO_MIN_BYTES)
        return plan(config, inputs, 0)

    def refuse(self, model_name: str, url: str, reason: str) -> None:
        """``"auto"``: from now on, the socket (said in one log line). True: nothing; the caller raises."""
        with self._lock:
            if self.mode != "auto" or self.refusal is not None:
                return
            self.refusal = reason
        _LOGGER.warning("Model %r at %s: shared memory is not available (%s); sending tensors through the socket",
                        model_name, url, reason)


def shm_arg(value: Any, hostname: str) -> ShmChoice:
    """The checked ``shared_memory`` argument (an existing `ShmChoice` is shared as it is).

    Raises:
        PyTritonClientValueError: anything but ``"auto"``, True or False.
    """
    if isinstance(value, ShmChoice):
        return value
    if not any(value is mode or (isinstance(value, str) and value == mode) for mode in _MODES):
        raise PyTritonClientValueError(f"shared_memory must be 'auto', True or False, got {value!r}")
    if value is not False and not os.path.isdir(SHM_DIR):
        if value is True:
            raise PyTritonClientValueError(f"shared_memory=True needs {SHM_DIR}, which this system lacks")
        return ShmChoice(False, hostname)
    return ShmChoice(value, hostname)


def is_this_host(hostname: str) -> bool:
    """Whether `hostname` names this machine: a loopback address, or one a local socket can bind."""
    try:
        infos = socket.getaddrinfo(hostname, None, proto=socket.IPPROTO_TCP)
    except OSError:
        return False
    for family, _, _, _, address in infos:
        host = str(address[0]).split("%")[0]
        try:
            if ipaddress.ip_address(host).is_loopback:
                return True
        except ValueError:
            continue
        try:
            with socket.socket(family, socket.SOCK_DGRAM) as probe:
                probe.bind((host, 0))
            return True
        except OSError:
            continue
    return False
