"""The worker's InstanceHandler over the real wire: greeting, data channel and shared memory across processes.

The handler runs in this process; the proxy's side is played by `wire_proxy_driver.py` in a
subprocess, with only zmq, numpy and pytriton.ipc, as Triton's Python-backend stub would.
"""

from __future__ import annotations

import json
import os
import pathlib
import pickle
import secrets
import subprocess
import sys
import threading

import numpy as np
import pytest
import zmq

from pytriton.decorators import batch
from pytriton.exceptions import PyTritonUnrecoverableError
from pytriton.ipc import codec, protocol
from pytriton.ipc.shm import ALIGNMENT, SHM_DIR
from pytriton.model_config import ModelConfig, Tensor
from pytriton.worker.context import TritonContext
from pytriton.worker.handler import InstanceHandler
from pytriton.worker.instance import InstanceSpec

pytestmark = pytest.mark.integration

DRIVER = pathlib.Path(__file__).with_name("wire_proxy_driver.py")
MODEL = "wire"
INPUTS = (
    Tensor(name="INPUT_1", shape=(-1,), dtype=np.float32),
    Tensor(name="INPUT_2", shape=(-1,), dtype=object),
)
OUTPUTS = (
    Tensor(name="OUTPUT_1", shape=(-1,), dtype=np.float32),
    Tensor(name="OUTPUT_2", shape=(-1,), dtype=object),
)


class Wire:
    """One handler serving instance 0 of model `wire`, and a way to talk to it from another process."""

    def __init__(self, tmp_path: pathlib.Path, infer_func, *, strict: bool) -> None:
        self.tmp_path = tmp_path
        self.shm_prefix = f"pytriton-{os.getpid()}-test{secrets.token_hex(4)}"
        self.endpoint = protocol.instance_endpoint(f"ipc://{tmp_path}/sock", 0)
        self.unrecoverable: list = []
        self.unrecoverable_event = threading.Event()
        self.zmq_context = zmq.Context()
        context = TritonContext(
            model_name=MODEL, model_version=1, inputs=INPUTS, outputs=OUTPUTS, config=ModelConfig(max_batch_size=8)
        )
        spec = InstanceSpec(context=context, infer_func=infer_func, endpoint=self.endpoint, instance=0,
                            shm_prefix=self.shm_prefix, strict=strict)
        self.handler = InstanceHandler(spec, zmq_context=self.zmq_context, on_unrecoverable=self._on_unrecoverable)
        self.handler.start()
        self._runs = 0

    def _on_unrecoverable(self, model_name: str) -> None:
        self.unrecoverable.append(model_name)
        self.unrecoverable_event.set()

    def run(self, plan: list) -> list:
        """Run the proxy driver through `plan` in a subprocess; its outcomes, one per step."""
        self._runs += 1
        plan_path = self.tmp_path / f"plan-{self._runs}.pkl"
        result_path = self.tmp_path / f"result-{self._runs}.pkl"
        plan_path.write_bytes(pickle.dumps(plan))
        completed = subprocess.run(
            [sys.executable, str(DRIVER), self.endpoint, self.shm_prefix, "0", str(plan_path), str(result_path)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert completed.returncode == 0, completed.stderr
        return pickle.loads(result_path.read_bytes())

    def segments(self) -> list:
        return sorted(name for name in os.listdir(SHM_DIR) if name.startswith(self.shm_prefix))

    def close(self) -> None:
        try:
            assert self.handler.stop(timeout_s=5.0)
        finally:
            self.zmq_context.term()


@pytest.fixture
def serve(tmp_path):
    """serve(infer_func, strict=True) -> a started `Wire`; stopped, and /dev/shm checked, after the test."""
    wires = []

    def start(infer_func, *, strict: bool = True) -> Wire:
        wire = Wire(tmp_path, infer_func, strict=strict)
        wires.append(wire)
        return wire

    yield start
    for wire in wires:
        wire.close()
        leftovers = wire.segments()
        for name in leftovers:
            os.unlink(os.path.join(SHM_DIR, name))
        assert leftovers == [], "shared-memory segments left behind"
        assert not os.path.exists(wire.endpoint[len("ipc://") :]), "socket file left behind"


def _request(rows: int, width: int, seed: int, text_size: int = 3):
    """One request's inputs: a float batch and a bytes batch (with trailing NUL bytes)."""
    floats = (np.arange(rows * width, dtype=np.float32) + seed).reshape(rows, width)
    texts = np.array(
        [[(f"{seed}-{r}-{c}".encode() * text_size)[:text_size] + b"\x00" for c in range(2)] for r in range(rows)],
        dtype=object,
    )
    return {"INPUT_1": floats, "INPUT_2": texts}


def _assert_same(outputs: dict, inputs: dict) -> None:
    assert sorted(outputs) == ["OUTPUT_1", "OUTPUT_2"]
    assert outputs["OUTPUT_1"].dtype == np.float32
    np.testing.assert_array_equal(outputs["OUTPUT_1"], inputs["INPUT_1"])
    assert outputs["OUTPUT_2"].dtype == object
    assert outputs["OUTPUT_2"].tolist() == inputs["INPUT_2"].tolist()


def _assert_layout(message, payload_sizes) -> None:
    """Where a message's columns put each tensor: inline, column by column, each column 8-byte
    aligned and its tensors back to back; 64-byte aligned, without overlap, in its arena (named
    only when used)."""
    count = len(message.errors) if isinstance(message, protocol.BatchResult) else len(message.parameters)
    inline, shm = [], []
    for column in message.columns:
        assert len(column.shapes) == len(column.offsets) == len(column.sizes) == len(column.in_shm) == count
        for index, shape in enumerate(column.shapes):
            if shape is not None:
                entry = (column.offsets[index], column.sizes[index])
                (shm if column.in_shm[index] else inline).append(entry)
    assert len(payload_sizes) == (1 if inline else 0)
    end = 0
    for column in message.columns:
        runs = [(column.offsets[i], column.sizes[i]) for i, shape in enumerate(column.shapes)
                if shape is not None and not column.in_shm[i]]
        if not runs:
            continue
        assert runs[0][0] == end and end % codec.INLINE_ALIGNMENT == 0
        for offset, size in runs:
            assert offset == end
            end += size
        end += -end % codec.INLINE_ALIGNMENT
    assert payload_sizes == ([end] if inline else [])
    assert bool(message.segment) == bool(shm)
    end = 0
    for offset, size in sorted(shm):
        assert offset >= end and offset % ALIGNMENT == 0
        end = offset + size


def test_handshake_welcomes_the_proxy(serve):
    wire = serve(lambda requests: requests)
    (welcome,) = wire.run([("hello", protocol.PROTOCOL_VERSION, 0)])
    assert welcome == protocol.Welcome(protocol.PROTOCOL_VERSION, os.getpid(), None,
                                       protocol.data_socket_path(protocol.ipc_socket_path(wire.endpoint)))


def test_handshake_reports_a_protocol_or_instance_mismatch(serve):
    wire = serve(lambda requests: requests)
    version, instance = wire.run(
        [("hello", protocol.PROTOCOL_VERSION + 98, 0), ("hello", protocol.PROTOCOL_VERSION, 5)]
    )
    assert isinstance(version, protocol.Welcome)
    assert version.protocol == protocol.PROTOCOL_VERSION
    assert version.worker_pid == os.getpid()
    assert "protocol mismatch" in version.error
    expected = f"server side speaks version {protocol.PROTOCOL_VERSION + 98}, the worker {protocol.PROTOCOL_VERSION}"
    assert expected in version.error
    assert instance.error == "instance 5 connected to the handler of instance 0"


def test_greetings_between_batches_are_answered(serve):
    # The handler waits in one poll(2) that holds ZeroMQ's edge-triggered descriptor, with the
    # data connection's: greetings on the control socket and batches on the data one interleave.
    wire = serve(lambda requests: requests)
    request = _request(1, 4, seed=1)
    steps = []
    for _ in range(3):
        steps += [("infer", [(request, "")]), ("hello", protocol.PROTOCOL_VERSION, 0)]
    outcomes = wire.run(steps)
    welcomes = [outcome for outcome in outcomes if isinstance(outcome, protocol.Welcome)]
    answers = [outcome for outcome in outcomes if not isinstance(outcome, protocol.Welcome)]
    assert len(welcomes) == 3 and all(welcome.error is None for welcome in welcomes), welcomes
    assert len(answers) == 3
    for answer in answers:
        _assert_same(answer["outputs"][0], request)


def test_identity_round_trips_inline_and_shared_memory_tensors(serve):
    wire = serve(lambda requests: requests)
    first = [
        _request(1, 10, seed=1),  # small: inline frames
        _request(2, 20_000, seed=2, text_size=70_000),  # 160 kB floats, 140 kB of text: shared memory
        _request(1, 0, seed=3),  # an empty float row
    ]
    second = [
        _request(3, 300_000, seed=4),  # 3.6 MB: both arenas grow to a new generation
        _request(1, 5, seed=5),
    ]
    hello, one, two = wire.run(
        [
            ("hello", protocol.PROTOCOL_VERSION, 0),
            ("infer", [(r, "") for r in first]),
            ("infer", [(r, "") for r in second]),
        ]
    )
    assert hello.error is None

    for outcome, requests in ((one, first), (two, second)):
        result = outcome["result"]
        assert isinstance(result, protocol.BatchResult)
        assert not result.unrecoverable
        assert list(result.errors) == [None] * len(requests)
        _assert_layout(result, outcome["payload_sizes"])
        for outputs, inputs in zip(outcome["outputs"], requests):
            _assert_same(outputs, inputs)
        # numeric outputs reached the proxy as read-only views (BYTES are decoded into new objects)
        assert all(not writeable["OUTPUT_1"] for writeable in outcome["writeable"])

    # the sizes took the paths we meant, in both directions
    assert one["input_kinds"][0] == {"INPUT_1": "inline", "INPUT_2": "inline"}
    assert one["input_kinds"][1] == {"INPUT_1": "shm", "INPUT_2": "shm"}
    assert one["kinds"] == [
        {"OUTPUT_1": "inline", "OUTPUT_2": "inline"},
        {"OUTPUT_1": "shm", "OUTPUT_2": "shm"},
        {"OUTPUT_1": "inline", "OUTPUT_2": "inline"},
    ]
    assert two["kinds"][0] == {"OUTPUT_1": "shm", "OUTPUT_2": "inline"}
    assert two["input_kinds"][0] == {"INPUT_1": "shm", "INPUT_2": "inline"}
    # one arena per direction and message, the second batch in a new generation of each
    assert [one["result"].segment, two["result"].segment] == [
        protocol.segment_name(wire.shm_prefix, 0, "out", 1),
        protocol.segment_name(wire.shm_prefix, 0, "out", 2),
    ]
    assert [one["input_segment"], two["input_segment"]] == [
        protocol.segment_name(wire.shm_prefix, 0, "in", 1),
        protocol.segment_name(wire.shm_prefix, 0, "in", 2),
    ]
    # the worker owns only its newest output arena; the proxy's inputs went with the driver
    assert wire.segments() == [protocol.segment_name(wire.shm_prefix, 0, "out", 2)]


def test_a_raising_callable_fails_every_request_of_its_batch_and_serving_goes_on(serve):
    def infer(requests):
        if any(request.parameters.get("fail") for request in requests):
            raise ValueError(f"refusing {len(requests)} requests")
        return [
            {"OUTPUT_1": request["INPUT_1"] * request.parameters["scale"], "OUTPUT_2": request["INPUT_2"]}
            for request in requests
        ]

    wire = serve(infer)
    failing = [(_request(1, 4, seed=1), json.dumps({"fail": True})), (_request(1, 20_000, seed=2), "")]
    scaled = [(_request(1, 4, seed=3), json.dumps({"scale": 2})), (_request(2, 3, seed=4), json.dumps({"scale": -1}))]
    broken, fine = wire.run([("infer", failing), ("infer", scaled)])

    assert list(broken["result"].errors) == [f"Model '{MODEL}' failed: ValueError: refusing 2 requests"] * 2
    assert broken["result"].columns == ()
    assert broken["result"].segment == ""
    assert broken["payload_sizes"] == []
    assert broken["outputs"] == [{}, {}]
    assert not broken["result"].unrecoverable

    assert list(fine["result"].errors) == [None, None]
    _assert_layout(fine["result"], fine["payload_sizes"])
    for outputs, (inputs, parameters) in zip(fine["outputs"], scaled):
        np.testing.assert_array_equal(outputs["OUTPUT_1"], inputs["INPUT_1"] * json.loads(parameters)["scale"])
        assert outputs["OUTPUT_2"].tolist() == inputs["INPUT_2"].tolist()


def test_one_bad_response_fails_only_its_request(serve):
    def infer(requests):
        responses = list(requests)  # the requests themselves: an identity, matched by position
        responses[1] = "not a mapping"
        responses[2] = {"OUTPUT_1": requests[2]["INPUT_1"].astype(np.float64), "OUTPUT_2": requests[2]["INPUT_2"]}
        return responses

    wire = serve(infer, strict=True)
    requests = [_request(1, 3, seed=s) for s in range(4)]
    (outcome,) = wire.run([("infer", [(r, "") for r in requests])])
    errors = list(outcome["result"].errors)

    assert errors[0] is None and errors[3] is None
    _assert_same(outcome["outputs"][0], requests[0])
    _assert_same(outcome["outputs"][3], requests[3])
    assert errors[1].startswith(f"Model '{MODEL}': the inference callable returned str for request 1")
    assert errors[2] == f"Model '{MODEL}': output 'OUTPUT_1' of request 2 has dtype float64; expected float32"
    assert outcome["outputs"][1] == {} and outcome["outputs"][2] == {}
    # the failed responses have no tensor in any column
    assert all(column.shapes[1] is None and column.shapes[2] is None for column in outcome["result"].columns)
    _assert_layout(outcome["result"], outcome["payload_sizes"])


def test_a_response_list_of_the_wrong_length_fails_the_batch(serve):
    wire = serve(lambda requests: list(requests)[:1])
    (outcome,) = wire.run([("infer", [(_request(1, 2, seed=s), "") for s in range(3)])])
    errors = set(outcome["result"].errors)
    assert len(outcome["result"].errors) == 3
    assert errors == {
        f"Model '{MODEL}': the inference callable returned a list of 1 for a batch of 3 requests; "
        "expected a list with one mapping of output name to array per request"
    }


def test_unrecoverable_error_fails_the_batch_and_tells_the_owner(serve):
    def infer(requests):
        raise PyTritonUnrecoverableError("device lost")

    wire = serve(infer)
    (outcome,) = wire.run([("infer", [(_request(1, 2, seed=s), "") for s in range(2)])])
    assert outcome["result"].unrecoverable
    assert list(outcome["result"].errors) == [f"Model '{MODEL}' failed: PyTritonUnrecoverableError: device lost"] * 2
    assert outcome["result"].columns == ()
    assert wire.unrecoverable_event.wait(5)
    assert wire.unrecoverable == [MODEL]


def test_batch_decorated_callable(serve):
    calls = []

    @batch
    def infer(INPUT_1, INPUT_2):
        calls.append(INPUT_1.shape)
        # a list in the model's output order: @batch maps it with the handler thread's TritonContext
        return [INPUT_1 * 2, INPUT_2[:, ::-1]]

    wire = serve(infer)
    requests = [_request(1, 6, seed=1), _request(3, 6, seed=2), _request(2, 20_000, seed=3)]
    small_widths = [_request(2, 6, seed=4)]
    one, two = wire.run([("infer", [(r, "") for r in requests[:2]]), ("infer", [(r, "") for r in small_widths])])

    assert calls == [(4, 6), (2, 6)]  # one call per Triton batch, requests concatenated
    for outcome, sent in ((one, requests[:2]), (two, small_widths)):
        assert list(outcome["result"].errors) == [None] * len(sent)
        for outputs, inputs in zip(outcome["outputs"], sent):
            np.testing.assert_array_equal(outputs["OUTPUT_1"], inputs["INPUT_1"] * 2)
            assert outputs["OUTPUT_2"].tolist() == inputs["INPUT_2"][:, ::-1].tolist()

    # requests whose widths differ cannot be concatenated: @batch's error reaches every requester
    (mixed,) = wire.run([("infer", [(r, "") for r in requests[1:]])])
    assert len(mixed["result"].errors) == 2
    for error in mixed["result"].errors:
        assert error.startswith(f"Model '{MODEL}' failed: PyTritonValidationError: @batch cannot concatenate")


def test_the_callable_gets_read_only_aligned_views_of_its_inputs(serve):
    seen = []

    def infer(requests):
        for request in requests:
            array = request["INPUT_1"]
            seen.append((array.shape, array.flags.writeable, array.flags.aligned, array.ctypes.data % array.itemsize))
        return [{"OUTPUT_1": request["INPUT_1"], "OUTPUT_2": request["INPUT_2"]} for request in requests]

    wire = serve(infer)
    # 12-byte inline tensors (3 floats; two 1-byte texts + NUL): each next one starts after padding
    requests = [_request(1, 3, seed=1, text_size=1), _request(1, 5, seed=2), _request(2, 20_000, seed=3)]
    (outcome,) = wire.run([("infer", [(r, "") for r in requests])])
    assert list(outcome["result"].errors) == [None] * 3
    for outputs, inputs in zip(outcome["outputs"], requests):
        _assert_same(outputs, inputs)
    assert outcome["input_kinds"] == [
        {"INPUT_1": "inline", "INPUT_2": "inline"},
        {"INPUT_1": "inline", "INPUT_2": "inline"},
        {"INPUT_1": "shm", "INPUT_2": "inline"},
    ]
    assert seen == [((1, 3), False, True, 0), ((1, 5), False, True, 0), ((2, 20_000), False, True, 0)]


def test_a_request_keeps_its_own_input_order_whatever_its_batch(serve):
    """A request (in its own order INPUT_1, INPUT_2) batched after one that lacks INPUT_1 (an optional input)."""
    wire = serve(lambda requests: requests)  # identity: outputs matched to the inputs by position
    full = _request(1, 3, seed=1)
    (outcome,) = wire.run([("infer", [({"INPUT_2": full["INPUT_2"]}, ""), (full, "")])])
    assert outcome["result"].errors[0] is not None  # one input for two outputs: this one cannot be served
    assert outcome["result"].errors[1] is None
    _assert_same(outcome["outputs"][1], full)


def test_output_shapes_are_checked_against_the_batch_size_that_was_sent(serve):
    def infer(requests):
        return [{"OUTPUT_1": r.pop("INPUT_1"), "OUTPUT_2": r.pop("INPUT_2")} for r in requests]

    wire = serve(infer, strict=True)
    requests = [_request(2, 3, seed=1), _request(1, 20_000, seed=2)]
    (outcome,) = wire.run([("infer", [(r, "") for r in requests])])
    assert list(outcome["result"].errors) == [None, None]
    for outputs, inputs in zip(outcome["outputs"], requests):
        _assert_same(outputs, inputs)
