"""pytriton/backend/wire.h mirrors the wire's framing as pytriton/ipc/channel.py, codec.py, shm.py and
stopping.py define it: the backend, written in C, cannot import them, so this test holds the two
together. (The message kinds, field positions, parameters and stamps come from contract.h,
generated from protocol.py: tests/unit/backend/test_contract.py.)"""

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


def test_the_framing_and_sizes_match():
    defines = _defines()
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
