"""Tensor codec: numpy arrays <-> `TensorColumn` headers plus an inline payload or arena bytes.

Pure functions and two small stateful helpers (the arena writer is reused batch after batch).
BYTES tensors (numpy object or ``S`` arrays) are serialised as Triton does: for each element in
C order, a 4-byte little-endian length followed by the bytes, so trailing ``\\x00`` survive.
"""

from __future__ import annotations

import itertools
import math
import struct
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from pytriton.ipc.protocol import INLINE_MAX_BYTES, TensorColumn
from pytriton.ipc.shm import Arena, SegmentReader, aligned

BYTES = "bytes"
INLINE_ALIGNMENT = 8
_LEN = struct.Struct("<I")
_PAD = bytes(INLINE_ALIGNMENT)


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
    dtype = array.dtype
    if dtype.kind in ("O", "S", "U"):
        data = serialize_bytes(array)
        return BYTES, data, len(data)
    if not array.flags.c_contiguous:
        array = np.ascontiguousarray(array)
    return dtype.str, array, array.nbytes


def _raw(buffer: Any) -> np.ndarray:
    """The bytes of a buffer (bytes or a contiguous array, 0-d included) as a flat uint8 array."""
    if isinstance(buffer, np.ndarray):
        return buffer.reshape(-1).view(np.uint8)
    return np.frombuffer(buffer, dtype=np.uint8)


def _padding(size: int) -> int:
    return -size % INLINE_ALIGNMENT


class _Column:
    """A column being built: one (name, dtype) across the groups of a message.

    Either one buffer per group (`buffers`), or one array holding every group's rows back to
    back (`whole`, from `pack_rows`).
    """

    __slots__ = ("name", "dtype", "shapes", "offsets", "sizes", "in_shm", "buffers", "whole")

    def __init__(self, name: str, dtype: str, count: int) -> None:
        self.name, self.dtype = name, dtype
        self.shapes: List[Optional[Tuple[int, ...]]] = [None] * count
        self.offsets = [0] * count
        self.sizes = [0] * count
        self.in_shm = [False] * count
        self.buffers: List[Any] = [None] * count
        self.whole: Optional[np.ndarray] = None

    def frozen(self) -> TensorColumn:
        return TensorColumn(
            self.name, self.dtype, tuple(self.shapes), tuple(self.offsets), tuple(self.sizes), tuple(self.in_shm)
        )


def pack(
    groups: Sequence[Mapping[str, np.ndarray]], arena: Optional[Arena]
) -> Tuple[Tuple[TensorColumn, ...], str, List[Any]]:
    """Lay out the tensors of several requests (or responses) of one message (see `pack_columns`)."""
    count = len(groups)
    columns: Dict[str, List[Any]] = {}
    for index, group in enumerate(groups):
        for name, value in group.items():
            column = columns.get(name)
            if column is None:
                column = columns[name] = [None] * count
            column[index] = value
    return pack_columns(columns, count, arena)


def pack_columns(
    columns: Mapping[str, Sequence[Any]], count: int, arena: Optional[Arena]
) -> Tuple[Tuple[TensorColumn, ...], str, List[Any]]:
    """Lay out the tensors of `count` requests (or responses), given column by column.

    `columns` maps a tensor name to one value per group (None where the group lacks it); a
    name whose values have several dtypes gets one column per dtype. Small tensors go into the
    message's payload, column by column: a column's tensors back to back (so the tensors of one
    input across a batch form one contiguous run, which the worker reads as one array, see
    `gathered`), each column starting 8-byte aligned. Large ones are copied into `arena`,
    64-byte aligned, grown at most once per message. Without an arena everything goes inline: a
    sender with several messages in flight (streams, overlapping coroutines) cannot reuse one
    arena, since the receiver may still read the previous message from it. When /dev/shm has no
    room for the arena (`Arena.reserve` refuses), the large tensors go inline too: slower, but
    the message still goes through and Triton's own pool keeps the room it needs.

    Returns:
        The columns describing every tensor, the arena's segment name ("" when unused), and the
        payload as a list of buffers (the arrays themselves and padding), which
        `pytriton.ipc.channel.Channel.send` gathers without copying them in Python.
    """
    built: List[_Column] = []
    shm_total = 0
    for name, values in columns.items():
        by_dtype: Dict[str, _Column] = {}
        for index, value in enumerate(values):
            if value is None:
                continue
            array = value if type(value) is np.ndarray else np.asarray(value)
            dtype, buffer, size = _as_buffer(array)
            column = by_dtype.get(dtype)
            if column is None:
                column = by_dtype[dtype] = _Column(name, dtype, count)
                built.append(column)
            column.shapes[index] = array.shape
            column.sizes[index] = size
            column.buffers[index] = buffer
            if size > INLINE_MAX_BYTES and arena is not None:
                column.in_shm[index] = True
                shm_total += aligned(size)
    return _lay_out(built, shm_total, arena)


def pack_rows(
    arrays: Mapping[str, np.ndarray], rows: Sequence[int], arena: Optional[Arena]
) -> Tuple[Tuple[TensorColumn, ...], str, List[Any]]:
    """`pack` for tensors given whole: each numeric array holds the rows of every group back to
    back, `rows[i]` of them for group i (a `@batch` callable's outputs). One buffer per tensor,
    however many groups: the columns' per-group shapes and offsets are arithmetic."""
    count = len(rows)
    inline = True
    if arena is not None:
        for array in arrays.values():
            if array.nbytes > INLINE_MAX_BYTES:
                inline = False
                break
    if inline:
        if arena is not None and arena.capacity:
            arena.reserve(0)  # counts in the arena's window: a big arena shrinks back after small messages
        return pack_rows_inline(arrays, rows)
    columns = []
    shm_total = 0
    for name, value in arrays.items():
        array = np.ascontiguousarray(value)
        trailing = array.shape[1:]
        row_bytes = array.itemsize * math.prod(trailing)
        column = _Column(name, array.dtype.str, count)
        column.shapes = [(size, *trailing) for size in rows]
        column.sizes = [size * row_bytes for size in rows]
        column.whole = array
        if array.nbytes > INLINE_MAX_BYTES and arena is not None:
            column.in_shm = [True] * count
            shm_total += aligned(array.nbytes)
        columns.append(column)
    return _lay_out(columns, shm_total, arena)


def pack_rows_inline(arrays: Mapping[str, np.ndarray], rows: Sequence[int]) -> Tuple[
        Tuple[TensorColumn, ...], str, List[Any]]:
    """`pack_rows` when every tensor travels in the message (the small answers that dominate a
    server's traffic): the columns built directly, no arena to reserve."""
    columns = []
    pieces: List[Any] = []
    offset = 0
    in_shm = (False,) * len(rows)
    for name, value in arrays.items():
        array = value if value.flags.c_contiguous else np.ascontiguousarray(value)
        trailing = array.shape[1:]
        row_bytes = array.itemsize * math.prod(trailing)
        sizes = tuple([size * row_bytes for size in rows])
        ends = tuple(itertools.accumulate(sizes, initial=offset))
        offset = ends[-1]
        columns.append(TensorColumn(name, array.dtype.str, tuple([(size, *trailing) for size in rows]),
                                    ends[:-1], sizes, in_shm))
        if array.nbytes:
            pieces.append(array)
        pad = _padding(offset)
        if pad:
            pieces.append(_PAD[:pad])
            offset += pad
    return tuple(columns), "", pieces


def _lay_out(columns: List[_Column], shm_total: int, arena: Optional[Arena]) -> Tuple[
        Tuple[TensorColumn, ...], str, List[Any]]:
    """Offsets of every tensor, arena copies and payload buffers (see `pack`)."""
    view: Any = None  # only read when some tensor went to the arena, which needs one
    if arena is not None and (shm_total or arena.capacity):
        if not arena.reserve(shm_total):  # called with 0 too: lets a big arena shrink back
            for column in columns:
                column.in_shm = [False] * len(column.in_shm)
            shm_total = 0
        elif shm_total:
            view = arena.view
    pieces: List[Any] = []
    inline_offset = shm_offset = 0
    for column in columns:
        whole = column.whole
        if whole is not None:
            in_shm = bool(column.in_shm) and column.in_shm[0]
            start = shm_offset if in_shm else inline_offset
            for index, size in enumerate(column.sizes):
                column.offsets[index] = start
                start += size
            if in_shm:
                np.frombuffer(view, dtype=np.uint8, count=whole.nbytes, offset=shm_offset)[:] = _raw(whole)
                shm_offset += aligned(whole.nbytes)
            elif whole.nbytes:
                pieces.append(_raw(whole) if not whole.ndim else whole)
                inline_offset += whole.nbytes
        else:
            for index, buffer in enumerate(column.buffers):
                if buffer is None:
                    continue
                size = column.sizes[index]
                if column.in_shm[index]:
                    np.frombuffer(view, dtype=np.uint8, count=size, offset=shm_offset)[:] = _raw(buffer)
                    column.offsets[index] = shm_offset
                    shm_offset += aligned(size)
                else:
                    column.offsets[index] = inline_offset
                    if size:
                        pieces.append(_raw(buffer) if isinstance(buffer, np.ndarray) and not buffer.ndim else buffer)
                    inline_offset += size
        pad = _padding(inline_offset)
        if pad:
            pieces.append(_PAD[:pad])
            inline_offset += pad
    return tuple(c.frozen() for c in columns), (arena.name if shm_total and arena else ""), pieces


_DTYPES: Dict[str, np.dtype] = {}


def _dtype(name: str) -> np.dtype:
    """`np.dtype(name)`, looked up once per name (it is read for every tensor of every batch)."""
    dtype = _DTYPES.get(name)
    if dtype is None:
        dtype = _DTYPES[name] = np.dtype(name)
    return dtype


def gathered(column: TensorColumn, segment: str, payload: Any, reader: SegmentReader,
             writable: bool = False) -> Optional[np.ndarray]:
    """Every group's tensor of a numeric column as one array, rows back to back, or None.

    Possible when every group has the tensor, all of one trailing shape, laid out back to back
    in one buffer (`pack` lays columns out that way). The array views the buffer: read-only,
    unless `writable` and the column is in the arena (see `SegmentReader`).
    """
    shapes: Sequence[Tuple[int, ...]] = column.shapes  # type: ignore[assignment]  # no None, checked below
    if len(shapes) == 1:  # one request: its own tensor, viewed as it is
        shape = shapes[0]
        if shape is None or not shape or column.dtype == BYTES:
            return None
        dtype = _dtype(column.dtype)
        buffer = reader.buffer(segment, writable) if column.in_shm[0] else payload
        return np.frombuffer(buffer, dtype=dtype, count=column.sizes[0] // dtype.itemsize if dtype.itemsize else 0,
                             offset=column.offsets[0]).reshape(shape)
    if column.dtype == BYTES or None in shapes or not shapes or not shapes[0]:
        return None
    trailing = shapes[0][1:]
    in_shm = column.in_shm[0]
    offsets, sizes = column.offsets, column.sizes
    rows = 0
    expected = offsets[0]
    for shape, offset, size, shm in zip(shapes, offsets, sizes, column.in_shm):
        if shape[1:] != trailing or offset != expected or shm != in_shm:
            return None
        rows += shape[0]
        expected += size
    dtype = _dtype(column.dtype)
    buffer = reader.buffer(segment, writable) if in_shm else payload
    items = (expected - offsets[0]) // dtype.itemsize if dtype.itemsize else 0
    return np.frombuffer(buffer, dtype=dtype, count=items, offset=offsets[0]).reshape(rows, *trailing)


def group_sizes(columns: Sequence[TensorColumn], count: int) -> List[int]:
    """The tensor bytes of each of the `count` requests (or responses) of one message."""
    sizes = [0] * count
    for column in columns:
        for index, size in enumerate(column.sizes):
            sizes[index] += size
    return sizes


def unpack(
    columns: Sequence[TensorColumn], segment: str, payload: Any, reader: SegmentReader, count: int
) -> List[Dict[str, np.ndarray]]:
    """Arrays of every request (or response) of one message, without copying numeric data.

    Numeric arrays are read-only views on the message's `payload` (a bytes-like object) or on
    the peer's arena: those on the arena stay valid until the peer writes its next message on
    this instance, those on a reused receive buffer until the next message is received.
    """
    groups: List[Dict[str, np.ndarray]] = [{} for _ in range(count)]
    shm: Any = None
    if segment:
        shm = reader.buffer(segment)
    else:
        reader.forget_gone()  # the peer may have given its arena up; its pages live while mapped
    for column in columns:
        whole = gathered(column, segment, payload, reader) if count > 1 else None
        if whole is not None:  # one view, sliced per group: cheaper than a view per group
            start = 0
            for group, shape in zip(groups, column.shapes):
                stop = start + shape[0]  # type: ignore[index]  # no None in a gathered column
                group[column.name] = whole[start:stop]
                start = stop
            continue
        is_bytes = column.dtype == BYTES
        dtype = None if is_bytes else np.dtype(column.dtype)
        for index, shape in enumerate(column.shapes):
            if shape is None:
                continue
            buffer = shm if column.in_shm[index] else payload
            offset, size = column.offsets[index], column.sizes[index]
            if is_bytes:
                groups[index][column.name] = deserialize_bytes(memoryview(buffer)[offset : offset + size], shape)
            else:
                assert dtype is not None
                items = size // dtype.itemsize if dtype.itemsize else 0
                groups[index][column.name] = np.frombuffer(buffer, dtype=dtype, count=items, offset=offset).reshape(
                    shape
                )
    return groups
