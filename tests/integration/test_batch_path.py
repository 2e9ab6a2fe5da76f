"""Which of pytriton's modules one batch visits in the worker: the batch path reads top to bottom.

A batch of a plain callable goes endpoint -> blocking loop -> batches (the requests, the call)
-> responses (the answer) -> endpoint, with the request objects (`request`), the instance's busy
mark (`instance`) and its metrics (`measures`) beside it; a ``@batch`` function adds the
decorators. The sets below are the worker's part of the path docs/architecture.md counts; a
module that joins the path (or a step split into a new module) shows here first. The files are
those whose code runs on the handler's thread from receiving the batch to sending its answer,
found with a profile hook on that thread.
"""

from __future__ import annotations

import os
import threading

import numpy as np
import pytest
import zmq

import pytriton
from pytriton.decorators import batch
from pytriton.ipc import codec, protocol
from pytriton.model_config import ModelConfig, Tensor
from pytriton.proxy.link import Link
from pytriton.worker.context import TritonContext
from pytriton.worker.handler import InstanceHandler
from pytriton.worker.instance import InstanceSpec

pytestmark = pytest.mark.integration

ROOT = os.path.dirname(pytriton.__file__) + os.sep
X = (Tensor(name="x", shape=(-1,), dtype=np.float32),)
WORKER_PATH = {"worker/endpoint.py", "worker/blocking.py", "worker/batches.py", "worker/request.py",
               "worker/outcomes.py", "worker/responses.py", "worker/instance.py", "worker/measures.py"}
"""The worker's modules a plain batch visits (before issue 34's regrouping: also cancellation.py,
deadline.py, and for ``@batch`` whole.py and results.py)."""
WIRE = {"ipc/channel.py", "ipc/protocol.py", "ipc/codec.py", "metrics.py"}
"""The wire's modules a small batch visits: ``ipc/shm.py`` joins only when some tensor is large
(or the output arena still holds a segment from one), the arenas' module."""
DECORATORS = {"decorating/shaping.py", "decorating/results.py"}
"""``decorating/common.py`` joins only when a result needs converting or naming (a list, a torch
tensor): a dict of arrays is checked in `shaping.batch_outputs` itself."""


def plain(requests):
    return [{"x": request["x"] * 2} for request in requests]


@batch
def batched(x):
    return {"x": x * 2}


def _visited(tmp_path, func):
    """The pytriton files run on the handler's thread for the second of two batches."""
    visited: list = []
    recording = threading.Event()

    def profile(frame, event, arg):
        if event == "call" and recording.is_set() and frame.f_code.co_filename.startswith(ROOT):
            visited.append(frame.f_code.co_filename[len(ROOT):])

    zmq_context = zmq.Context()
    endpoint = f"ipc://{tmp_path}/sock-0"
    context = TritonContext("Path", 1, X, X, ModelConfig(max_batch_size=8))
    spec = InstanceSpec(context=context, infer_func=func, endpoint=endpoint, instance=0,
                        shm_prefix=f"pytriton-{os.getpid()}-path")
    handler = InstanceHandler(spec, zmq_context=zmq_context, on_unrecoverable=lambda name: None)
    threading.setprofile(profile)  # the handler's thread, started next, carries the hook
    try:
        handler.start()
    finally:
        threading.setprofile(None)  # type: ignore[arg-type]
    link = Link("Path", endpoint, protocol.Hello(protocol.PROTOCOL_VERSION, 0, os.getpid()), os.getpid())
    try:
        channel = link.connect(5.0, 5.0)
        for batch_id in (1, 2):
            if batch_id == 2:
                recording.set()
            groups = [{"x": np.ones((1, 3), np.float32)}, {"x": np.ones((2, 3), np.float32)}]
            columns, segment, payload = codec.pack(groups, None)
            # a deadline parameter, as pytriton's clients send: the general path, not the whole-batch one
            parameters = (f'{{"{protocol.DEADLINE_PARAMETER}": 4e12}}',) * 2
            channel.send(protocol.infer_batch_header(batch_id=batch_id, parameters=parameters, columns=columns,
                                                     segment=segment), payload)
            received = channel.receive()
            assert received is not None and protocol.decode(received[0]).errors == (None, None)
        recording.clear()
    finally:
        link.close()
        assert handler.stop()
        zmq_context.term()
    return set(visited)


def test_a_plain_callables_batch_visits_the_worker_path_and_the_wire_only(tmp_path):
    assert _visited(tmp_path, plain) == WORKER_PATH | WIRE


def test_a_batch_functions_batch_adds_only_the_decorators(tmp_path):
    assert _visited(tmp_path, batched) == WORKER_PATH | WIRE | DECORATORS
