"""pytriton.ipc.codec: BYTES serialisation and the pack/unpack of tensors into columns, one frame and arenas."""

from __future__ import annotations

import numpy as np
import pytest
from support import shm_entries

from pytriton.ipc import codec
from pytriton.ipc.protocol import INLINE_MAX_BYTES
from pytriton.ipc.shm import ALIGNMENT, Arena, SegmentReader

# Every numeric dtype Triton has a numpy equivalent for (BF16 has none); BYTES is tested apart.
TRITON_DTYPES = [
    np.bool_,
    np.uint8,
    np.uint16,
    np.uint32,
    np.uint64,
    np.int8,
    np.int16,
    np.int32,
    np.int64,
    np.float16,
    np.float32,
    np.float64,
]


@pytest.fixture
def arena(shm_prefix):
    arena = Arena(lambda generation: f"{shm_prefix}-0-out-{generation}")
    yield arena
    arena.close()


@pytest.fixture
def reader():
    reader = SegmentReader()
    yield reader
    reader.close()


def _wire(parts):
    """The payload as the receiving side gets it: the parts `pack` returned, back to back, read-only."""
    return memoryview(b"".join(memoryview(part).cast("B") for part in parts)).toreadonly()


def _sample(dtype, shape):
    count = int(np.prod(shape))
    if np.dtype(dtype) == np.bool_:
        return (np.arange(count) % 3 == 0).reshape(shape)
    info = np.iinfo(dtype) if np.issubdtype(dtype, np.integer) else np.finfo(dtype)
    values = np.arange(count) % 100
    flat = values.astype(dtype)
    if count:
        flat[0] = info.max  # extremes survive the trip
        flat[-1] = info.min
    return flat.reshape(shape)


# --- BYTES serialisation -------------------------------------------------------------------------


def test_serialize_bytes_is_length_prefixed_in_c_order():
    array = np.array([[b"ab", b""], [b"c", b"\x00\x01"]], dtype=object)
    assert codec.serialize_bytes(array) == (
        b"\x02\x00\x00\x00ab\x00\x00\x00\x00\x01\x00\x00\x00c\x02\x00\x00\x00\x00\x01"
    )


def test_bytes_round_trip_keeps_trailing_nul_bytes():
    array = np.array([b"abc\x00", b"\x00\x00", b"", b"x\x00y\x00"], dtype=object)
    result = codec.deserialize_bytes(codec.serialize_bytes(array), array.shape)
    assert result.dtype == object
    assert list(result) == [b"abc\x00", b"\x00\x00", b"", b"x\x00y\x00"]


def test_str_elements_become_utf8_bytes():
    array = np.array(["héllo", "", "✓"], dtype=object)
    result = codec.deserialize_bytes(codec.serialize_bytes(array), (3,))
    assert list(result) == ["héllo".encode(), b"", "✓".encode()]
    # numpy unicode arrays too
    unicode = np.array(["ab", "ü"])
    assert list(codec.deserialize_bytes(codec.serialize_bytes(unicode), (2,))) == [b"ab", "ü".encode()]


def test_non_bytes_objects_are_serialised_as_their_text():
    array = np.array([1, 2.5, None], dtype=object)
    assert list(codec.deserialize_bytes(codec.serialize_bytes(array), (3,))) == [b"1", b"2.5", b"None"]


@pytest.mark.parametrize("shape", [(0,), (2, 0), (0, 3, 1)])
def test_empty_bytes_arrays(shape):
    array = np.empty(shape, dtype=object)
    data = codec.serialize_bytes(array)
    assert data == b""
    result = codec.deserialize_bytes(data, shape)
    assert result.shape == shape
    assert result.dtype == object


@pytest.mark.parametrize("shape", [(), (1,), (2, 3), (2, 1, 3)])
def test_multi_dimensional_bytes_keep_shape_and_order(shape):
    values = np.array([f"item-{i}".encode() for i in range(int(np.prod(shape)))], dtype=object).reshape(shape)
    result = codec.deserialize_bytes(codec.serialize_bytes(values), shape)
    assert result.shape == shape
    assert result.tolist() == values.tolist()


def test_deserialize_refuses_trailing_bytes():
    data = codec.serialize_bytes(np.array([b"ab"], dtype=object)) + b"\x00"
    with pytest.raises(ValueError, match="1 trailing bytes; it is corrupt"):
        codec.deserialize_bytes(data, (1,))


def test_deserialize_refuses_element_longer_than_buffer():
    with pytest.raises(ValueError, match="corrupt"):
        codec.deserialize_bytes(b"\x05\x00\x00\x00ab", (1,))


def test_deserialize_refuses_truncated_length_prefix_with_value_error():
    with pytest.raises(ValueError, match="corrupt"):
        codec.deserialize_bytes(b"\x01\x00", (1,))


def test_deserialize_error_for_overlong_element_does_not_report_negative_trailing_bytes():
    with pytest.raises(ValueError) as excinfo:
        codec.deserialize_bytes(b"\x05\x00\x00\x00ab", (1,))
    assert "-3" not in str(excinfo.value)


def test_is_bytes_dtype():
    assert codec.is_bytes_dtype(np.dtype(object))
    assert codec.is_bytes_dtype(np.dtype("S3"))
    assert codec.is_bytes_dtype(np.dtype("U3"))
    for dtype in TRITON_DTYPES:
        assert not codec.is_bytes_dtype(np.dtype(dtype))


# --- pack / unpack -------------------------------------------------------------------------------


def _placements(columns, count):
    """Per group: tensor name -> "inline" or "shm", read from the columns."""
    kinds = [{} for _ in range(count)]
    for column in columns:
        assert len(column.shapes) == len(column.offsets) == len(column.sizes) == len(column.in_shm) == count
        for index, shape in enumerate(column.shapes):
            if shape is not None:
                kinds[index][column.name] = "shm" if column.in_shm[index] else "inline"
    return kinds


def _entries(columns, in_shm):
    """(offset, size) of every present tensor in the payload frame (in_shm=False) or the arena (True)."""
    return sorted(
        (column.offsets[index], column.sizes[index])
        for column in columns
        for index, shape in enumerate(column.shapes)
        if shape is not None and column.in_shm[index] == in_shm
    )


def _padded(size):
    return -(-size // codec.INLINE_ALIGNMENT) * codec.INLINE_ALIGNMENT


@pytest.mark.parametrize("dtype", TRITON_DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shape", [(2, 3), (0,), (3, 0, 2), ()], ids=["2x3", "empty", "empty-3d", "0d"])
def test_small_tensors_travel_inline(dtype, shape, arena, reader, shm_prefix):
    array = _sample(dtype, shape)
    columns, segment, frames = codec.pack([{"T": array}], arena)

    (column,) = columns
    assert column.name == "T"
    assert column.shapes == (shape,)
    assert np.dtype(column.dtype) == np.dtype(dtype)
    assert column.in_shm == (False,)
    assert column.offsets == (0,)
    assert column.sizes == (array.nbytes,)
    assert segment == ""  # no arena named: nothing large
    assert len(_wire(frames)) == _padded(array.nbytes)  # padded to the inline alignment
    assert shm_entries(shm_prefix) == []  # nothing large: no segment created

    (group,) = codec.unpack(columns, segment, _wire(frames), reader, 1)
    result = group["T"]
    assert result.dtype == np.dtype(dtype)
    assert result.shape == shape
    np.testing.assert_array_equal(result, array)
    assert not result.flags.writeable
    assert result.flags.aligned


@pytest.mark.parametrize("dtype", TRITON_DTYPES, ids=lambda d: np.dtype(d).name)
def test_large_tensors_travel_in_the_arena(dtype, arena, reader, shm_prefix):
    count = INLINE_MAX_BYTES // np.dtype(dtype).itemsize + 7
    array = _sample(dtype, (1, count))
    columns, segment, frames = codec.pack([{"T": array}], arena)

    (column,) = columns
    assert frames == []
    assert column.in_shm == (True,)
    assert segment == arena.name == f"{shm_prefix}-0-out-1"
    assert column.offsets == (0,)
    assert column.sizes == (array.nbytes,)
    assert column.shapes == ((1, count),)

    (group,) = codec.unpack(columns, segment, b"", reader, 1)
    result = group["T"]
    assert result.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(result, array)
    assert not result.flags.writeable
    with pytest.raises(ValueError):
        result[0, 0] = result[0, 1]
    del result, group


def test_exactly_inline_max_bytes_stays_inline(arena, reader):
    array = np.ones(INLINE_MAX_BYTES, dtype=np.uint8)
    bigger = np.ones(INLINE_MAX_BYTES + 1, dtype=np.uint8)
    columns, segment, frames = codec.pack([{"A": array, "B": bigger}], arena)
    assert _placements(columns, 1) == [{"A": "inline", "B": "shm"}]
    assert segment == arena.name
    assert len(_wire(frames)) == INLINE_MAX_BYTES


@pytest.mark.parametrize(
    "make",
    [
        lambda: np.arange(60, dtype=np.int32).reshape(6, 10)[:, ::3],  # strided slice
        lambda: np.arange(60, dtype=np.float64).reshape(6, 10).T,  # transposed
        lambda: np.asfortranarray(np.arange(12, dtype=np.int16).reshape(3, 4)),
        lambda: np.arange(100_000, dtype=np.float32).reshape(100, 1000)[::2, 1::3],  # large, in the arena
        lambda: np.arange(40_000, dtype=np.int64).reshape(200, 200).T,  # large transposed
    ],
    ids=["sliced", "transposed", "fortran", "large-sliced", "large-transposed"],
)
def test_non_contiguous_inputs_keep_their_logical_values(make, arena, reader):
    array = make()
    assert not array.flags.c_contiguous
    columns, segment, frames = codec.pack([{"T": array}], arena)
    (group,) = codec.unpack(columns, segment, _wire(frames), reader, 1)
    assert group["T"].shape == array.shape
    np.testing.assert_array_equal(group["T"], array)


def test_bytes_tensors_inline_and_in_the_arena(arena, reader):
    small = np.array([[b"a\x00", b""], [b"\x00", b"xyz"]], dtype=object)
    large = np.array([b"\x00" * 40_000 + b"end\x00", b"b" * 30_000], dtype=object)
    columns, segment, frames = codec.pack([{"SMALL": small, "LARGE": large}], arena)

    small_column, large_column = columns
    assert small_column.dtype == large_column.dtype == codec.BYTES
    assert small_column.in_shm == (False,)
    assert large_column.in_shm == (True,)
    assert small_column.sizes == (len(codec.serialize_bytes(small)),)
    assert segment == arena.name

    (result,) = codec.unpack(columns, segment, _wire(frames), reader, 1)
    assert result["SMALL"].tolist() == small.tolist()
    assert result["SMALL"].shape == (2, 2)
    assert result["LARGE"].tolist() == large.tolist()
    assert result["LARGE"].shape == (2,)


def test_several_groups_in_one_message(arena, reader, shm_prefix):
    groups = [
        {"A": np.arange(5, dtype=np.float32), "B": np.arange(20_000, dtype=np.float64)},  # B: 160000 bytes
        {"A": np.array(True), "B": np.arange(17_000, dtype=np.int32).reshape(17, 1000)},  # B: 68000 bytes
        {},  # a group without tensors (e.g. a request that failed)
        {"A": np.array([b"x\x00"], dtype=object), "C": np.full((3, 7001), 3, dtype=np.uint8)},  # C: 21003 bytes
        {"D": np.arange(16_385, dtype=np.float32)},  # 65540 bytes: one over the inline limit
        {"A": np.arange(3, dtype=np.float32)},  # same name and dtype as group 0: the same column
    ]
    columns, segment, frames = codec.pack(groups, arena)

    # one column per (name, dtype) across the message, one entry per group in each
    assert sorted((column.name, column.dtype) for column in columns) == sorted(
        [("A", "<f4"), ("A", "|b1"), ("A", codec.BYTES), ("B", "<f8"), ("B", "<i4"), ("C", "|u1"), ("D", "<f4")]
    )
    (a_float,) = (column for column in columns if column.name == "A" and column.dtype == "<f4")
    assert a_float.shapes == ((5,), None, None, None, None, (3,))
    assert _placements(columns, len(groups)) == [
        {"A": "inline", "B": "shm"},
        {"A": "inline", "B": "shm"},
        {},
        {"A": "inline", "C": "inline"},
        {"D": "shm"},
        {"A": "inline"},
    ]

    # the small tensors: column by column, each column's back to back and 8-byte aligned, the
    # padding between columns zeroed
    payload = _wire(frames)
    assert len(_entries(columns, in_shm=False)) == 5
    end = 0
    runs = [[(o, z) for o, z, s, m in zip(column.offsets, column.sizes, column.shapes, column.in_shm)
             if s is not None and not m] for column in columns]
    for inline in sorted(run for run in runs if run):
        start = inline[0][0]
        assert start % codec.INLINE_ALIGNMENT == 0 and start == _padded(end) and not any(payload[end:start])
        for offset, size in inline:
            assert offset == start
            start += size
        end = start
    assert len(payload) == _padded(end)

    # the large ones: one segment for the whole message, every tensor 64-byte aligned, no overlap
    assert segment == arena.name
    assert shm_entries(shm_prefix) == [arena.name]
    shm = _entries(columns, in_shm=True)
    assert len(shm) == 3
    end = 0
    for offset, size in shm:
        assert offset % ALIGNMENT == 0
        assert offset >= end
        end = offset + size
    assert end <= arena.capacity

    results = codec.unpack(columns, segment, _wire(frames), reader, len(groups))
    assert len(results) == len(groups)
    for group, result in zip(groups, results):
        assert sorted(result) == sorted(group)
        for name, array in group.items():
            assert result[name].shape == np.shape(array)
            if array.dtype == object:
                assert result[name].tolist() == array.tolist()
            else:
                assert result[name].dtype == array.dtype
                assert result[name].flags.aligned
                assert not result[name].flags.writeable
                np.testing.assert_array_equal(result[name], array)


def test_inline_tensors_of_odd_sizes_keep_the_next_one_aligned(reader, arena):
    """1-, 3- and 5-byte tensors before 8-byte ones: every numeric view stays aligned (each column
    starts 8-byte aligned; inside one, every tensor is a whole number of items from its start)."""
    groups = [
        {"odd": np.arange(1, dtype=np.uint8), "f64": np.arange(3, dtype=np.float64)},
        {"odd": np.arange(3, dtype=np.uint8), "txt": np.array([b"abc"], dtype=object), "i64": np.arange(2)},
        {"odd": np.arange(5, dtype=np.uint8), "f64": np.arange(1, dtype=np.float64)},
    ]
    columns, segment, frames = codec.pack(groups, arena)
    assert segment == ""
    for column in columns:
        present = [offset for offset, shape in zip(column.offsets, column.shapes) if shape is not None]
        assert present[0] % codec.INLINE_ALIGNMENT == 0
        if column.dtype != codec.BYTES:
            assert all(offset % np.dtype(column.dtype).itemsize == 0 for offset in present)
    results = codec.unpack(columns, segment, _wire(frames), reader, len(groups))
    for group, result in zip(groups, results):
        assert sorted(result) == sorted(group)
        for name, array in group.items():
            if array.dtype == object:
                assert result[name].tolist() == array.tolist()
            else:
                assert result[name].flags.aligned
                assert result[name].ctypes.data % array.itemsize == 0
                np.testing.assert_array_equal(result[name], array)


def test_a_message_without_tensors_has_no_payload(arena, reader, shm_prefix):
    columns, segment, frames = codec.pack([{}, {}, {}], arena)
    assert (columns, segment, frames) == ((), "", [])
    assert shm_entries(shm_prefix) == []
    assert codec.unpack(columns, segment, b"", reader, 3) == [{}, {}, {}]
    assert codec.pack([], arena) == ((), "", [])


def test_unpack_reads_a_slice_of_a_reused_receive_buffer(arena, reader):
    """What `Channel.receive` gives: a read-only slice of a larger buffer, at a non-zero start."""
    groups = [
        {"A": np.arange(3, dtype=np.int32)},
        {"A": np.arange(4, dtype=np.int32), "S": np.array([b"q\x00"], dtype=object)},
    ]
    columns, segment, frames = codec.pack(groups, arena)
    buffer = bytearray(b"x" * 24) + bytearray(_wire(frames)) + bytearray(100)
    payload = memoryview(buffer)[24 : 24 + len(_wire(frames))].toreadonly()
    results = codec.unpack(columns, segment, payload, reader, 2)
    assert not results[0]["A"].flags.writeable
    np.testing.assert_array_equal(results[0]["A"], np.arange(3))
    np.testing.assert_array_equal(results[1]["A"], np.arange(4))
    assert results[1]["S"].tolist() == [b"q\x00"]


def test_unpack_refuses_a_corrupt_bytes_tensor(arena, reader):
    columns, segment, frames = codec.pack([{"S": np.array([b"abc"], dtype=object)}], arena)
    (column,) = columns
    truncated = column._replace(sizes=(column.sizes[0] - 1,))
    with pytest.raises(ValueError, match="corrupt"):
        codec.unpack((truncated,), segment, _wire(frames), reader, 1)


def test_unpacked_inline_tensors_are_views_of_the_frame(arena, reader):
    columns, segment, frames = codec.pack([{"T": np.arange(10, dtype=np.int64)}], arena)
    wire = _wire(frames)
    (group,) = codec.unpack(columns, segment, wire, reader, 1)
    assert np.shares_memory(group["T"], np.frombuffer(wire, dtype=np.uint8))
    assert not group["T"].flags.owndata


def test_unpacked_arena_tensors_are_views_not_copies(arena, reader):
    """Numeric arrays view the peer's arena: the next message in the same arena shows through."""
    first = np.zeros(50_000, dtype=np.float32)
    columns, segment, _ = codec.pack([{"T": first}], arena)
    (group,) = codec.unpack(columns, segment, b"", reader, 1)
    view = group["T"]
    np.testing.assert_array_equal(view, first)

    second = np.full(50_000, 7.0, dtype=np.float32)
    columns2, segment2, _ = codec.pack([{"T": second}], arena)
    # same segment, same offset: the arena is reused from offset 0
    assert (columns2, segment2) == (columns, segment)
    np.testing.assert_array_equal(view, second)
    del view, group


def test_arena_grows_to_a_new_generation_for_a_bigger_message(arena, reader, shm_prefix):
    small = np.arange(100_000, dtype=np.uint8)
    columns, segment, _ = codec.pack([{"T": small}], arena)
    assert segment == f"{shm_prefix}-0-out-1"
    np.testing.assert_array_equal(codec.unpack(columns, segment, b"", reader, 1)[0]["T"], small)

    big = np.arange(3 << 20, dtype=np.uint8)  # over the 1 MiB first arena
    columns, segment, _ = codec.pack([{"T": big}], arena)
    assert segment == f"{shm_prefix}-0-out-2"
    assert shm_entries(shm_prefix) == [f"{shm_prefix}-0-out-2"]
    np.testing.assert_array_equal(codec.unpack(columns, segment, b"", reader, 1)[0]["T"], big)

    # several large tensors of one message that together outgrow the arena: one growth
    parts = [{"T": np.full(1 << 20, i, dtype=np.uint8)} for i in range(5)]
    columns, segment, _ = codec.pack(parts, arena)
    assert segment == f"{shm_prefix}-0-out-3"
    assert shm_entries(shm_prefix) == [segment]
    for i, group in enumerate(codec.unpack(columns, segment, b"", reader, len(parts))):
        assert (group["T"] == i).all()
