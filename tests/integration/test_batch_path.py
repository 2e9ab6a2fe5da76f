"""Which of pytriton's modules one batch visits in the worker: the batch path reads top to bottom.

A batch of a plain callable goes endpoint -> blocking loop -> batches (the requests, the call,
the answer) -> endpoint, with the request objects (`request`), what the steps hand each other
(`outcomes`), the answer's checks and packing (`responses`), the instance's busy mark
(`instance`) and its metrics (`measures`) beside it; a ``@batch`` function's batch that the
whole-batch lane does not take adds the decorators; one the lane takes needs neither request
objects nor the general answer. The sets below are the worker's part of the path
docs/architecture.md counts (a test here checks the page's numbers against them); a module that
joins the path (or a step split into a new module) shows here first. The files are those whose
code runs on the handler's thread from receiving the batch to sending its answer, found with a
profile hook on that thread, which also counts how often the batch enters `worker/batches.py`
from another module: once, whichever way it goes.
"""

from __future__ import annotations

import collections
import json
import os
import pathlib
import re
import threading

import numpy as np
import pytest
import zmq

import pytriton
from pytriton.decorating.shaping import whole_batch
from pytriton.decorators import batch
from pytriton.ipc import codec, protocol
from pytriton.ipc.shm import SegmentReader
from pytriton.model_config import ModelConfig, Tensor
from pytriton.proxy.link import Link
from pytriton.worker.context import TritonContext
from pytriton.worker.handler import InstanceHandler
from pytriton.worker.instance import InstanceSpec

pytestmark = pytest.mark.integration

ROOT = os.path.dirname(pytriton.__file__) + os.sep
ARCHITECTURE = pathlib.Path(__file__).resolve().parents[2] / "docs" / "architecture.md"
X = (Tensor(name="x", shape=(-1,), dtype=np.float32),)
WORKER_PATH = {"worker/endpoint.py", "worker/blocking.py", "worker/batches.py", "worker/request.py",
               "worker/outcomes.py", "worker/responses.py", "worker/instance.py", "worker/measures.py"}
"""The worker's modules a batch visits the general way (before issue 34's regrouping: also
cancellation.py, deadline.py, and for ``@batch`` whole.py and results.py; `outcomes.py` holds the
types the steps share since issue 44, which took them out of `responses.py`)."""
WHOLE_LANE = {"worker/endpoint.py", "worker/blocking.py", "worker/batches.py", "worker/instance.py",
              "worker/measures.py"}
"""The worker's modules a batch the whole-batch lane takes visits: no request objects, no
general answer."""
WIRE = {"ipc/channel.py", "ipc/protocol.py", "ipc/codec.py", "metrics.py"}
"""The wire's modules a small batch visits: ``ipc/shm.py`` joins only when some tensor is large
(or the output arena still holds a segment from one), the arenas' module, or when the inputs are
read one request at a time, not gathered (the whole-batch lane's are, and it looks whether the
sender gave up an arena, as ``codec.unpack`` does)."""
DECORATORS = {"decorating/shaping.py", "decorating/results.py"}
"""``decorating/common.py`` joins only when a result needs converting or naming (a list, a torch
tensor): a dict of arrays is checked in `shaping.batch_outputs` itself."""
DEADLINE = json.dumps({protocol.DEADLINE_PARAMETER: 4e12})
"""The parameter pytriton's clients send with every request: the whole-batch lane takes such a batch."""


def plain(requests):
    return [{"x": request["x"] * 2} for request in requests]


@batch
def batched(x):
    return {"x": x * 2}


class Visits:
    """What the handler's thread ran for one batch: the pytriton files, and how often each was
    entered from another file (a call inside a file is no entry)."""

    def __init__(self) -> None:
        self.files: set = set()
        self.entries: collections.Counter = collections.Counter()


def _visited(tmp_path, func, parameter=DEADLINE) -> Visits:
    """The pytriton files run on the handler's thread for the second of two batches of `func`,
    its instance set up as `bind` sets it up (a plain ``@batch`` function taken apart for the
    whole-batch lane); each request carries `parameter`."""
    visits = Visits()
    recording = threading.Event()

    def profile(frame, event, arg):
        if event == "call" and recording.is_set() and frame.f_code.co_filename.startswith(ROOT):
            name = frame.f_code.co_filename[len(ROOT):]
            visits.files.add(name)
            if frame.f_back is None or frame.f_back.f_code.co_filename != frame.f_code.co_filename:
                visits.entries[name] += 1

    zmq_context = zmq.Context()
    endpoint = f"ipc://{tmp_path}/sock-0"
    context = TritonContext("Path", 1, X, X, ModelConfig(max_batch_size=8))
    spec = InstanceSpec(context=context, infer_func=func, endpoint=endpoint, instance=0,
                        shm_prefix=f"pytriton-{os.getpid()}-path", whole=whole_batch(func))
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
            channel.send(protocol.infer_batch_header(batch_id=batch_id, parameters=(parameter,) * 2, columns=columns,
                                                     segment=segment), payload)
            received = channel.receive()
            assert received is not None
            answer = protocol.decode(received[0])
            assert answer.errors == (None, None)
            reader = SegmentReader()
            try:
                answered = codec.unpack(answer.columns, answer.segment, received[1], reader, 2)
                np.testing.assert_array_equal(answered[1]["x"], np.full((2, 3), 2, np.float32))
            finally:
                reader.close()
        recording.clear()
    finally:
        link.close()
        assert handler.stop()
        zmq_context.term()
    return visits


def test_a_plain_callables_batch_visits_the_worker_path_and_the_wire_only(tmp_path):
    visits = _visited(tmp_path, plain)
    assert visits.files == WORKER_PATH | WIRE
    assert visits.entries["worker/batches.py"] == 1  # the loop hands it over once: the batch in, its answer out


def test_a_batch_the_whole_batch_lane_takes_visits_neither_requests_nor_the_general_answer(tmp_path):
    visits = _visited(tmp_path, batched)
    assert visits.files == WHOLE_LANE | WIRE | {"ipc/shm.py"}
    assert visits.entries["worker/batches.py"] == 1


def test_a_batch_functions_batch_the_lane_leaves_adds_only_the_decorators(tmp_path):
    chosen = json.dumps({protocol.DEADLINE_PARAMETER: 4e12, "mode": "fast"})  # a parameter: the requests carry it
    visits = _visited(tmp_path, batched, chosen)
    assert visits.files == WORKER_PATH | WIRE | DECORATORS
    assert visits.entries["worker/batches.py"] == 1


def test_architecture_md_counts_these_sets():
    """The page quotes the counts of the sets above; a path that changes changes them here first."""
    text = " ".join(ARCHITECTURE.read_text(encoding="utf-8").split())
    found = re.search(r"a plain callable's batch runs code in (\d+) of pytriton's files \((\d+) of them the "
                      r"worker's\), a `@batch` function's that the lane leaves in (\d+), and one the whole-batch "
                      r"lane takes in (\d+) \((\d+) of them the worker's", text)
    assert found, "docs/architecture.md no longer counts the batch path's files in the words this test reads"
    general = WORKER_PATH | WIRE
    lane = WHOLE_LANE | WIRE | {"ipc/shm.py"}
    assert [int(number) for number in found.groups()] == [
        len(general), len(WORKER_PATH), len(general | DECORATORS), len(lane), len(WHOLE_LANE)]
