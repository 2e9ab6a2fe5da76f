"""pytriton/backend/wire.h mirrors the wire's Python definition (pytriton/ipc/protocol.py and
channel.py): the backend, written in C, cannot import it, so this test holds the two together."""

from __future__ import annotations

import pathlib
import re

from pytriton.ipc import channel, codec, protocol, shm, stopping

WIRE_H = pathlib.Path(__file__).resolve().parents[3] / "pytriton" / "backend" / "wire.h"


def _defines() -> dict:
    values = {}
    for name, value in re.findall(r"^#define (PYT_\w+) (.+?)\s*(?:/\*.*)?$", WIRE_H.read_text(), re.MULTILINE):
        try:
            values[name] = eval(value.replace("u", ""), {})  # numbers and products of numbers only
        except (SyntaxError, NameError):
            continue
    return values


def test_the_message_kinds_are_the_positions_of_protocols_message_types():
    defines = _defines()
    kinds = {name: value for name, value in defines.items() if name.startswith("PYT_KIND_")}
    assert kinds, "wire.h defines no message kinds"
    for name, value in kinds.items():
        camel = "".join(part.capitalize() for part in name[len("PYT_KIND_"):].split("_"))
        assert protocol._MESSAGE_TYPES[value].__name__ == camel, name


def test_the_framing_and_sizes_match():
    defines = _defines()
    assert defines["PYT_PROTOCOL_VERSION"] == protocol.PROTOCOL_VERSION
    assert defines["PYT_MAGIC"] == channel._MAGIC
    assert defines["PYT_PREFIX_BYTES"] == channel.PREFIX_BYTES
    assert defines["PYT_DATAGRAM_BYTES"] == channel.DATAGRAM_BYTES
    assert defines["PYT_INLINE_MAX_BYTES"] == protocol.INLINE_MAX_BYTES
    assert defines["PYT_INLINE_ALIGNMENT"] == codec.INLINE_ALIGNMENT
    assert defines["PYT_ARENA_ALIGNMENT"] == shm.ALIGNMENT
    assert defines["PYT_ARENA_STEP_BYTES"] == shm.ARENA_STEP_BYTES
    assert defines["PYT_STOPPING_BYTES"] == stopping.FLAG_BYTES
    assert defines["PYT_STOPPING_REFUSING"] == stopping.REFUSING
    assert defines["PYT_STOPPING_ABANDONED"] == stopping.ABANDONED


def test_the_stamp_positions_match():
    defines = _defines()
    assert defines["PYT_STAMP_EXECUTE"] == protocol.Stamp.EXECUTE
    assert defines["PYT_STAMP_SENT"] == protocol.Stamp.SENT
    assert defines["PYT_STAMP_RESULT"] == protocol.Stamp.RESULT
    assert defines["PYT_STAMP_RESPONDED"] == protocol.Stamp.RESPONDED
    assert defines["PYT_STAMP_COUNT"] == protocol.Stamp.COUNT


def test_the_fields_the_backend_reads_sit_where_it_reads_them():
    # backend/*.c read these messages by position (after the kind): keep them in this order.
    assert protocol.Welcome._fields[:7] == ("protocol", "worker_pid", "error", "data_path", "arena_stem",
                                            "metrics_path", "greeting")
    assert protocol.InferBatch._fields == ("batch_id", "parameters", "columns", "segment", "stamps", "sequences",
                                           "requested", "sent_ns", "traces")
    assert protocol.BatchResult._fields[:6] == ("batch_id", "errors", "columns", "segment", "unrecoverable",
                                                "stamps")
    assert protocol.StreamPart._fields == ("batch_id", "present", "errors", "columns")
    assert protocol.StreamEnd._fields[:2] == ("batch_id", "errors")
    assert protocol.Cancel._fields == ("batch_id", "requests")
    assert protocol.MetricsPoll._fields == ("instance", "proxy_pid", "greeting")
    assert protocol.MetricsReport._fields == ("families", "worker_pid", "superseded")
    assert protocol.TensorColumn._fields == ("name", "dtype", "shapes", "offsets", "sizes", "in_shm")
