"""Plays the proxy's side of the wire from a separate process, for tests/integration/test_worker_wire.py.

Uses only zmq, numpy and pytriton.ipc, like the real proxy inside Triton's Python backend: the
greeting over ZeroMQ, then the batches over the data channel the welcome names.

Usage: python wire_proxy_driver.py ENDPOINT SHM_PREFIX INSTANCE PLAN RESULT

PLAN is a pickled list of steps (an "infer" before any "hello" greets first, as the proxy does):
    ("hello", protocol_version, instance)          -> the Welcome received
    ("infer", [(inputs_dict, parameters_json), ...]) -> {"result": BatchResult, "payload_sizes": [...],
                                                         "outputs": [...], "writeable": [...], "kinds": [...],
                                                         "input_kinds": [...], "input_segment": str}
RESULT receives the pickled list of outcomes, one per step. Exit status 3: no answer in time.
"""

from __future__ import annotations

import os
import pickle
import sys

import numpy as np
import zmq

from pytriton.ipc import channel, codec, protocol
from pytriton.ipc.shm import Arena, SegmentReader

REPLY_TIMEOUT_MS = 10_000


def _kinds(columns, count):
    """Per request or response: tensor name -> "shm" or "inline", read from the columns."""
    kinds = [{} for _ in range(count)]
    for column in columns:
        for index, shape in enumerate(column.shapes):
            if shape is not None:
                kinds[index][column.name] = "shm" if column.in_shm[index] else "inline"
    return kinds


def _greet(socket, step):
    _, version, hello_instance = step
    socket.send(protocol.encode(protocol.Hello(version, hello_instance, os.getpid())))
    if not socket.poll(REPLY_TIMEOUT_MS):
        _no_reply()
    return protocol.decode(socket.recv())


def _no_reply():
    print("no reply from the worker", file=sys.stderr)
    sys.exit(3)


def main(endpoint, shm_prefix, instance, plan_path, result_path):
    instance = int(instance)
    with open(plan_path, "rb") as handle:
        plan = pickle.load(handle)
    context = zmq.Context()
    socket = context.socket(zmq.DEALER)
    socket.setsockopt(zmq.LINGER, 0)
    socket.connect(endpoint)
    arena = Arena(lambda generation: protocol.segment_name(shm_prefix, instance, "in", generation))
    reader = SegmentReader()
    outcomes = []
    batch_id = 0
    data = None
    try:
        for step in plan:
            if step[0] == "infer" and data is None:  # greet first, as the proxy does at load
                plan_hello = ("hello", protocol.PROTOCOL_VERSION, instance)
                greeted = _greet(socket, plan_hello)
                data = channel.connect(greeted.data_path)
                data.set_timeouts(REPLY_TIMEOUT_MS / 1000)
            if step[0] == "hello":
                message = _greet(socket, step)
                if message.error is None:
                    data = channel.connect(message.data_path)
                    data.set_timeouts(REPLY_TIMEOUT_MS / 1000)
                outcomes.append(message)
                continue
            _, requests = step
            batch_id += 1
            count = len(requests)
            columns, segment, parts = codec.pack([inputs for inputs, _ in requests], arena)
            header = protocol.infer_batch_header(batch_id=batch_id, parameters=tuple(p for _, p in requests),
                                                 columns=columns, segment=segment)
            data.send(header, parts)
            received = data.receive()
            if received is None:
                _no_reply()
            result, payload = protocol.decode(received[0]), received[1]
            groups = codec.unpack(result.columns, result.segment, payload, reader, count)  # as the proxy does
            # copies: the views die with the next message and the reader's mappings
            outputs = [{name: np.array(array, copy=True) for name, array in arrays.items()} for arrays in groups]
            writeable = [{name: bool(array.flags.writeable) for name, array in arrays.items()} for arrays in groups]
            del groups
            outcomes.append(
                {
                    "result": result,
                    "payload_sizes": [len(payload)] if len(payload) else [],
                    "outputs": outputs,
                    "writeable": writeable,
                    "kinds": _kinds(result.columns, count),
                    "input_kinds": _kinds(columns, count),
                    "input_segment": segment,
                }
            )
    finally:
        if data is not None:
            data.close()
        socket.close(linger=0)
        context.term()
        reader.close()
        arena.close()
    with open(result_path, "wb") as handle:
        pickle.dump(outcomes, handle)


if __name__ == "__main__":
    main(*sys.argv[1:])
