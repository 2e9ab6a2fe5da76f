"""pytriton.ipc.protocol: message encode/decode, and the names both sides of the wire build."""

from __future__ import annotations

import marshal
import re

import pytest

from pytriton.ipc import protocol
from pytriton.ipc.protocol import (
    BatchResult,
    Cancel,
    Hello,
    InferBatch,
    StepPart,
    StreamEnd,
    StreamPart,
    TensorColumn,
    Welcome,
)

# INPUT_1: inline in both requests (8-byte aligned offsets in the payload frame);
# INPUT_2: in the proxy's arena for request 0, absent from request 1.
_SMALL = TensorColumn("INPUT_1", "<f4", ((2, 3), (1, 3)), (0, 24), (24, 12), (False, False))
_LARGE = TensorColumn("INPUT_2", "bytes", ((1,), None), (128, 0), (70000, 0), (True, False))
_SEGMENT = "pytriton-1-abcd-0-in-1"

MESSAGES = [
    Hello(protocol=protocol.PROTOCOL_VERSION, instance=3, proxy_pid=1234),
    Welcome(protocol=protocol.PROTOCOL_VERSION, worker_pid=42),
    Welcome(protocol=protocol.PROTOCOL_VERSION, worker_pid=42, error="protocol mismatch"),
    Welcome(protocol=protocol.PROTOCOL_VERSION, worker_pid=42, data_path="/tmp/ws/sockets/mabc-0.d"),
    InferBatch(batch_id=7, parameters=('{"temperature": 0.5}', ""), columns=(_SMALL, _LARGE), segment=_SEGMENT),
    InferBatch(batch_id=9, parameters=("",), columns=(), segment="", stamps=tuple(range(10))),
    BatchResult(batch_id=7, errors=(None, "bad response"), columns=(_SMALL,), segment=""),
    BatchResult(batch_id=8, errors=(), columns=(), segment="", unrecoverable=True, stamps=(1, 2, 3)),
    StreamPart(batch_id=3, present=(True, False), errors=(None, None), columns=(_SMALL,)),
    StepPart(batch_ids=(3, 5), positions=(0, 2), present=(True, False), errors=(None, "bad"), final=(False, True),
             columns=(_SMALL,)),
    StreamEnd(batch_id=3, errors=("cut short", None), unrecoverable=False),
    Cancel(batch_id=3),
]


@pytest.mark.parametrize("message", MESSAGES, ids=lambda m: type(m).__name__)
def test_encode_decode_round_trip(message):
    header = protocol.encode(message)
    assert isinstance(header, bytes)

    decoded = protocol.decode(memoryview(header))  # the receiver reads a view of its buffer
    assert decoded == message
    assert type(decoded) is type(message)
    for column in getattr(decoded, "columns", ()):
        assert type(column) is TensorColumn


def test_the_columns_index_follows_the_fields_and_the_bytes_stay_as_the_backend_reads_them():
    """`_COLUMNS_AT` is derived from the messages' fields; the encoded tuple is the kind, then the
    fields in order, columns as plain tuples: the layout pytriton's C backend reads and writes."""
    assert protocol._COLUMNS_AT == {InferBatch: 3, BatchResult: 3, StreamPart: 4, StepPart: 6}
    batch = MESSAGES[4]
    fields = marshal.loads(protocol.encode(batch))
    assert fields[0] == 2 and fields[1:3] == (7, batch.parameters)
    assert fields[3] == tuple(tuple(column) for column in batch.columns)
    assert fields[4:] == (_SEGMENT, (), (), (), 0, ())


def test_a_batch_header_is_built_by_keyword_and_stamped_when_sent(monkeypatch):
    monkeypatch.setattr(protocol.time, "monotonic_ns", lambda: 123)
    header = protocol.infer_batch_header(batch_id=7, parameters=('{"temperature": 0.5}', ""),
                                         columns=(_SMALL, _LARGE), segment=_SEGMENT, requested=(("a",), ()),
                                         sequences=((5, 1), ("s", 2)), traces=("00-ab", ""), stamps=(1, 2))
    assert protocol.decode(header) == InferBatch(
        batch_id=7, parameters=('{"temperature": 0.5}', ""), columns=(_SMALL, _LARGE), segment=_SEGMENT,
        stamps=(1, 2), sequences=((5, 1), ("s", 2)), requested=(("a",), ()), sent_ns=123, traces=("00-ab", ""))
    with pytest.raises(TypeError):
        protocol.infer_batch_header(7, ("",), (), "")  # type: ignore[misc]  # by keyword only


def test_decode_refuses_what_is_not_a_message():
    with pytest.raises(ValueError, match="unreadable message"):
        protocol.decode(marshal.dumps({"batch_id": 1}))  # not a tuple with a kind
    with pytest.raises(ValueError, match="unreadable message"):
        protocol.decode(marshal.dumps((99, 1)))  # no such kind
    with pytest.raises(ValueError, match="unreadable message"):
        protocol.decode(b"\x00garbage")
    with pytest.raises(ValueError, match="Hello with the wrong fields"):
        protocol.decode(marshal.dumps((0, 1)))  # a Hello missing fields


@pytest.mark.parametrize("value", [*MESSAGES, _SMALL], ids=lambda m: type(m).__name__)
def test_messages_are_frozen(value):
    with pytest.raises(AttributeError):
        setattr(value, value._fields[0], 2)


def test_defaults():
    assert Welcome(protocol.PROTOCOL_VERSION, 42).error is None
    assert BatchResult(1, (None,), (), "").unrecoverable is False


def test_decoded_message_keeps_its_type_among_equal_tuples():
    """NamedTuples compare as tuples: Hello(1, 2, 3) == Welcome(1, 2, 3); decode keeps the class apart."""
    message = protocol.decode(protocol.encode(Welcome(1, 2, 3)))
    assert type(message) is Welcome
    assert not isinstance(message, Hello)


def test_data_socket_sits_beside_the_control_socket():
    assert protocol.data_socket_path("/tmp/ws/sockets/mabc-0") == "/tmp/ws/sockets/mabc-0.d"


def test_model_key_is_stable_short_and_safe():
    key = protocol.model_key("my model/with:odd chars ✓", 1)
    assert key == protocol.model_key("my model/with:odd chars ✓", 1)
    assert re.fullmatch(r"m[0-9a-f]{10}", key)
    assert key != protocol.model_key("my model/with:odd chars ✓", 2)
    assert key != protocol.model_key("other", 1)
    # the separator keeps ("a1", 1) and ("a", 11) apart
    assert protocol.model_key("a1", 1) != protocol.model_key("a", 11)


def test_instance_endpoint():
    assert protocol.instance_endpoint("ipc:///tmp/ws/sockets/mabc", 0) == "ipc:///tmp/ws/sockets/mabc-0"
    assert protocol.instance_endpoint("ipc:///tmp/ws/sockets/mabc", 12) == "ipc:///tmp/ws/sockets/mabc-12"


def test_segment_name():
    assert protocol.segment_name("pytriton-1-abcd-mkey", 2, "in", 1) == "pytriton-1-abcd-mkey-2-in-1"
    assert protocol.segment_name("pytriton-1-abcd-mkey", 2, "out", 3) == "pytriton-1-abcd-mkey-2-out-3"
    # generations of one arena differ only after the last "-" (what SegmentReader relies on)
    first, second = (protocol.segment_name("p", 0, "out", g) for g in (1, 2))
    assert first.rpartition("-")[0] == second.rpartition("-")[0]
    assert first != second


@pytest.mark.parametrize("name, expected", [("model_0", 0), ("my_model_12", 12), ("a_b_c_3", 3), ("_7", 7)])
def test_instance_index(name, expected):
    assert protocol.instance_index(name) == expected


@pytest.mark.parametrize("name", ["model", "model_", "model_x", "model_-1", "model_1.5", ""])
def test_instance_index_refuses_names_without_a_number(name):
    with pytest.raises(ValueError, match="cannot read an instance number from Triton instance name"):
        protocol.instance_index(name)
