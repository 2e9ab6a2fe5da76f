"""Tensor codec: numpy arrays <-> `TensorRef` headers plus inline frames or arena bytes.

Pure functions and two small stateful helpers (the arena writer is reused batch after batch).
BYTES tensors (numpy object or ``S`` arrays) are serialised as Triton does: for each element in
C order, a 4-byte little-endian length followed by the bytes, so trailing ``\\x00`` survive.
"""

from __future__ import annotations

import struct
from typing import Any, Dict, List, Mapping, Sequence, Tuple

import numpy as np

from pytriton.ipc.protocol import INLINE_MAX_BYTES, InlineData, ShmData, TensorRef
from pytriton.ipc.shm import Arena, SegmentReader, aligned

BYTES = "bytes"
_LEN = struct.Struct("<I")


def is_bytes_dtype(dtype: np.dtype) -> bool:
    """True for the dtypes that travel as Triton BYTES: object and fixed-size bytes/str."""
    return dtype.kind in ("O", "S", "U")


def serialize_bytes(array: np.ndarray) -> bytes:
    """Length-prefixed serialisation of a bytes/object/str array (C order)."""
    parts: List[bytes] = []
    for item in array.ravel(order="C"):
        if isinstance(item, str):
            item = item.encode("utf-8")
        elif not isinstance(item, (bytes, bytearray, memoryview)):
            item = str(item).encode("utf-8")
        parts.append(_LEN.pack(len(item)))
        parts.append(bytes(item))
    return b"".join(parts)


def deserialize_bytes(buffer: Any, shape: Tuple[int, ...]) -> np.ndarray:
    """Inverse of `serialize_bytes`: an object array of `bytes` with the given shape."""
    view = memoryview(buffer).cast("B")
    count = int(np.prod(shape)) if shape else 1
    out = np.empty(count, dtype=object)
    offset = 0
    size = len(view)
    for index in range(count):
        if offset + 4 > size:
            raise ValueError(f"BYTES tensor buffer ends inside the length of element {index}; it is corrupt")
        (length,) = _LEN.unpack_from(view, offset)
        offset += 4
        if offset + length > size:
            raise ValueError(
                f"BYTES tensor element {index} claims {length} bytes but only {size - offset} remain; it is corrupt"
            )
        out[index] = bytes(view[offset : offset + length])
        offset += length
    if offset != size:
        raise ValueError(f"BYTES tensor buffer has {len(view) - offset} trailing bytes; it is corrupt")
    return out.reshape(shape)


def _as_buffer(array: np.ndarray) -> Tuple[str, Any, int]:
    """dtype string, a buffer with the tensor bytes, and its size."""
    if is_bytes_dtype(array.dtype):
        data = serialize_bytes(array)
        return BYTES, data, len(data)
    array = np.ascontiguousarray(array)
    return array.dtype.str, array, array.nbytes


def _raw(array: np.ndarray) -> np.ndarray:
    """The bytes of a contiguous array as a flat uint8 view (0-d arrays included)."""
    return array.reshape(-1).view(np.uint8)


def pack(
    groups: Sequence[Mapping[str, np.ndarray]], arena: Arena, first_frame: int = 1
) -> Tuple[List[Tuple[TensorRef, ...]], List[Any]]:
    """Lay out the tensors of several requests (or responses) of one message.

    Small tensors become payload frames (numbered from `first_frame`, frame 0 being the
    header), large ones are copied into `arena`, grown once per message if needed.

    Returns:
        One tuple of `TensorRef` per group, and the payload frames.
    """
    prepared = [[(name, *_as_buffer(np.asarray(value))) for name, value in group.items()] for group in groups]
    shm_total = sum(aligned(size) for group in prepared for *_, size in group if size > INLINE_MAX_BYTES)
    if shm_total:
        arena.reserve(shm_total)
    frames: List[Any] = []
    refs: List[Tuple[TensorRef, ...]] = []
    offset = 0
    for group, source in zip(prepared, groups):
        group_refs = []
        for name, dtype, buffer, size in group:
            shape = tuple(np.shape(source[name]))
            if size > INLINE_MAX_BYTES:
                target = np.frombuffer(arena.view, dtype=np.uint8, count=size, offset=offset)
                target[:] = np.frombuffer(buffer, dtype=np.uint8) if isinstance(buffer, bytes) else _raw(buffer)
                group_refs.append(TensorRef(name, dtype, shape, ShmData(arena.name, offset, size)))
                offset += aligned(size)
            else:
                group_refs.append(TensorRef(name, dtype, shape, InlineData(first_frame + len(frames))))
                frames.append(buffer)
        refs.append(tuple(group_refs))
    return refs, frames


def unpack(refs: Sequence[TensorRef], frames: Sequence[Any], reader: SegmentReader) -> Dict[str, np.ndarray]:
    """Arrays for the tensors of one request or response, without copying numeric data.

    Numeric arrays are read-only views on the frame or the peer's arena: they stay valid
    until the peer writes its next message on this instance.
    """
    arrays = {}
    for ref in refs:
        data = ref.data
        if isinstance(data, InlineData):
            frame = frames[data.frame - 1]
            buffer: Any = getattr(frame, "buffer", frame)
            offset, nbytes = 0, memoryview(buffer).nbytes
        else:
            buffer = reader.buffer(data.segment)
            offset, nbytes = data.offset, data.nbytes
        if ref.dtype == BYTES:
            arrays[ref.name] = deserialize_bytes(memoryview(buffer)[offset : offset + nbytes], ref.shape)
        else:
            dtype = np.dtype(ref.dtype)
            count = nbytes // dtype.itemsize if dtype.itemsize else 0
            arrays[ref.name] = np.frombuffer(buffer, dtype=dtype, count=count, offset=offset).reshape(ref.shape)
    return arrays
