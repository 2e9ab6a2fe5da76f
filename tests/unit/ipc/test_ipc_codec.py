"""pytriton.ipc.codec: BYTES serialisation and the pack/unpack of tensors into frames and arenas."""

from __future__ import annotations

import os
import secrets

import numpy as np
import pytest

from pytriton.ipc import codec
from pytriton.ipc.protocol import INLINE_MAX_BYTES, InlineData, ShmData
from pytriton.ipc.shm import ALIGNMENT, SHM_DIR, Arena, SegmentReader

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


def _shm_entries(prefix):
    return sorted(name for name in os.listdir(SHM_DIR) if name.startswith(prefix))


@pytest.fixture
def shm_prefix():
    """A unique segment-name prefix; the test must leave nothing with it in /dev/shm."""
    prefix = f"pytriton-test-{secrets.token_hex(4)}"
    yield prefix
    leftovers = _shm_entries(prefix)
    for name in leftovers:
        os.unlink(os.path.join(SHM_DIR, name))
    assert leftovers == []


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


def _wire(frames):
    """The payload frames as the receiving side gets them from ZeroMQ (immutable bytes)."""
    return [frame if isinstance(frame, bytes) else np.ascontiguousarray(frame).tobytes() for frame in frames]


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


@pytest.mark.parametrize("dtype", TRITON_DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shape", [(2, 3), (0,), (3, 0, 2), ()], ids=["2x3", "empty", "empty-3d", "0d"])
def test_small_tensors_travel_inline(dtype, shape, arena, reader, shm_prefix):
    array = _sample(dtype, shape)
    refs, frames = codec.pack([{"T": array}], arena)

    (ref,) = refs[0]
    assert ref.name == "T"
    assert ref.shape == shape
    assert np.dtype(ref.dtype) == np.dtype(dtype)
    assert ref.data == InlineData(1)
    assert len(frames) == 1
    assert _shm_entries(shm_prefix) == []  # nothing large: no segment created

    result = codec.unpack(refs[0], _wire(frames), reader)["T"]
    assert result.dtype == np.dtype(dtype)
    assert result.shape == shape
    np.testing.assert_array_equal(result, array)
    assert not result.flags.writeable


@pytest.mark.parametrize("dtype", TRITON_DTYPES, ids=lambda d: np.dtype(d).name)
def test_large_tensors_travel_in_the_arena(dtype, arena, reader, shm_prefix):
    count = INLINE_MAX_BYTES // np.dtype(dtype).itemsize + 7
    array = _sample(dtype, (1, count))
    refs, frames = codec.pack([{"T": array}], arena)

    (ref,) = refs[0]
    assert frames == []
    assert isinstance(ref.data, ShmData)
    assert ref.data.segment == arena.name == f"{shm_prefix}-0-out-1"
    assert ref.data.offset == 0
    assert ref.data.nbytes == array.nbytes

    result = codec.unpack(refs[0], [], reader)["T"]
    assert result.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(result, array)
    assert not result.flags.writeable
    with pytest.raises(ValueError):
        result[0, 0] = result[0, 1]
    del result


def test_exactly_inline_max_bytes_stays_inline(arena, reader):
    array = np.ones(INLINE_MAX_BYTES, dtype=np.uint8)
    bigger = np.ones(INLINE_MAX_BYTES + 1, dtype=np.uint8)
    refs, frames = codec.pack([{"A": array, "B": bigger}], arena)
    assert isinstance(refs[0][0].data, InlineData)
    assert isinstance(refs[0][1].data, ShmData)
    assert len(frames) == 1


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
    refs, frames = codec.pack([{"T": array}], arena)
    result = codec.unpack(refs[0], _wire(frames), reader)["T"]
    assert result.shape == array.shape
    np.testing.assert_array_equal(result, array)


def test_bytes_tensors_inline_and_in_the_arena(arena, reader):
    small = np.array([[b"a\x00", b""], [b"\x00", b"xyz"]], dtype=object)
    large = np.array([b"\x00" * 40_000 + b"end\x00", b"b" * 30_000], dtype=object)
    refs, frames = codec.pack([{"SMALL": small, "LARGE": large}], arena)

    small_ref, large_ref = refs[0]
    assert small_ref.dtype == large_ref.dtype == codec.BYTES
    assert isinstance(small_ref.data, InlineData)
    assert isinstance(large_ref.data, ShmData)

    result = codec.unpack(refs[0], _wire(frames), reader)
    assert result["SMALL"].tolist() == small.tolist()
    assert result["LARGE"].tolist() == large.tolist()
    assert result["LARGE"].shape == (2,)


def test_several_groups_in_one_message(arena, reader, shm_prefix):
    groups = [
        {"A": np.arange(5, dtype=np.float32), "B": np.arange(20_000, dtype=np.float64)},  # B: 160000 bytes
        {"A": np.array(True), "B": np.arange(17_000, dtype=np.int32).reshape(17, 1000)},  # B: 68000 bytes
        {},  # a group without tensors (e.g. a request that failed)
        {"A": np.array([b"x\x00"], dtype=object), "C": np.full((3, 7001), 3, dtype=np.uint8)},  # C: 21003 bytes
        {"D": np.arange(16_385, dtype=np.float32)},  # 65540 bytes: one over the inline limit
    ]
    refs, frames = codec.pack(groups, arena, first_frame=1)

    assert len(refs) == len(groups)
    assert refs[2] == ()
    inline = [ref for group in refs for ref in group if isinstance(ref.data, InlineData)]
    shm = [ref for group in refs for ref in group if isinstance(ref.data, ShmData)]
    assert [ref.data.frame for ref in inline] == list(range(1, len(frames) + 1))
    assert len(shm) == 3
    # one segment for the whole message, every tensor 64-byte aligned, no overlap
    assert {ref.data.segment for ref in shm} == {arena.name}
    assert _shm_entries(shm_prefix) == [arena.name]
    ends = 0
    for ref in shm:
        assert ref.data.offset % ALIGNMENT == 0
        assert ref.data.offset >= ends
        ends = ref.data.offset + ref.data.nbytes
    assert ends <= arena.capacity

    wire = _wire(frames)
    for group, group_refs in zip(groups, refs):
        result = codec.unpack(group_refs, wire, reader)
        assert sorted(result) == sorted(group)
        for name, array in group.items():
            assert result[name].shape == np.shape(array)
            if array.dtype == object:
                assert result[name].tolist() == array.tolist()
            else:
                assert result[name].dtype == array.dtype
                np.testing.assert_array_equal(result[name], array)


def test_first_frame_offsets_frame_numbers(arena, reader):
    refs, frames = codec.pack([{"A": np.arange(3)}, {"A": np.arange(4)}], arena, first_frame=3)
    assert [ref.data.frame for group in refs for ref in group] == [3, 4]
    # unpack counts frames after the header, which is frame 0: frame n is payload[n - 1]
    payload = [b"unused", b"unused", *_wire(frames)]
    np.testing.assert_array_equal(codec.unpack(refs[1], payload, reader)["A"], np.arange(4))


def test_unpacked_arena_tensors_are_views_not_copies(arena, reader):
    """Numeric arrays view the peer's arena: the next message in the same arena shows through."""
    first = np.zeros(50_000, dtype=np.float32)
    refs, _ = codec.pack([{"T": first}], arena)
    view = codec.unpack(refs[0], [], reader)["T"]
    np.testing.assert_array_equal(view, first)

    second = np.full(50_000, 7.0, dtype=np.float32)
    refs2, _ = codec.pack([{"T": second}], arena)
    assert refs2 == refs  # same segment, same offset: the arena is reused from offset 0
    np.testing.assert_array_equal(view, second)
    del view


def test_arena_grows_to_a_new_generation_for_a_bigger_message(arena, reader, shm_prefix):
    small = np.arange(100_000, dtype=np.uint8)
    refs, _ = codec.pack([{"T": small}], arena)
    assert refs[0][0].data.segment == f"{shm_prefix}-0-out-1"
    np.testing.assert_array_equal(codec.unpack(refs[0], [], reader)["T"], small)

    big = np.arange(3 << 20, dtype=np.uint8)  # over the 1 MiB first arena
    refs, _ = codec.pack([{"T": big}], arena)
    assert refs[0][0].data.segment == f"{shm_prefix}-0-out-2"
    assert _shm_entries(shm_prefix) == [f"{shm_prefix}-0-out-2"]
    np.testing.assert_array_equal(codec.unpack(refs[0], [], reader)["T"], big)
