"""The Python proxy's reading of Triton's requests into the wire's batch, without a server.

`pytriton.proxy.model` runs inside Triton's Python backend stub, whose
``triton_python_backend_utils`` is stood in for by `pb_utils_standin`; what a batch's requests
become on the wire (inputs column-wise, parameters, the outputs asked for, sequences, traces) is
checked here, down to the header the worker decodes.
"""

from __future__ import annotations

import json

import numpy as np
import pb_utils_standin
import pytest

pb_utils_standin.install()

from pytriton.ipc import codec, protocol  # noqa: E402
from pytriton.ipc.shm import SegmentReader  # noqa: E402
from pytriton.proxy import model  # noqa: E402

Request = pb_utils_standin.InferenceRequest


def test_inputs_go_column_wise_and_parameters_as_json_text():
    requests = [
        Request({"x": np.arange(3, dtype=np.float32), "y": np.ones(1, np.int64)}, {"temperature": 0.5}),
        Request({"x": np.zeros(2, np.float32)}),
    ]
    columns, parameters = model._read_requests(requests)
    assert list(columns) == ["x", "y"]
    assert [a.tolist() for a in columns["x"]] == [[0.0, 1.0, 2.0], [0.0, 0.0]]
    assert columns["y"][1] is None  # the second request lacks y
    assert parameters == ('{"temperature": 0.5}', "")  # no parameters travel as ""


def test_the_outputs_asked_for_travel_only_when_some_request_asks_for_fewer():
    outputs = ["a", "b"]
    everything = [Request({}, all_outputs=outputs), Request({}, all_outputs=outputs)]
    assert model._requested(everything, 2) == ()
    some = [Request({}, all_outputs=outputs), Request({}, requested=["b"])]
    assert model._requested(some, 2) == ((), ("b",))
    assert model._requested([Request({}, requested=[])], 1) == ()  # one output: nothing to choose


def test_sequences_and_the_null_requests_of_the_direct_batcher():
    requests = [Request({}, correlation_id=7, flags=1), Request({}, correlation_id="s-1", flags=2),
                Request({}, correlation_id=0)]
    assert model._sequences(requests) == ((7, 1), ("s-1", 2), (0, 0))
    assert [model._is_null(request) for request in requests] == [False, False, True]
    assert model._is_null(Request({}, correlation_id=""))


def test_trace_contexts_travel_only_when_some_request_was_sampled():
    parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    assert model._traces([Request({}, traceparent=parent), Request({})]) == (parent, "")
    assert model._traces([Request({}), Request({})]) == ()

    class Broken(Request):
        def trace(self):
            raise AttributeError("an older stub has no trace()")

    assert model._traces([Broken({})]) == ()


def test_the_model_parameters_and_the_servers_pid():
    config = {"parameters": {protocol.PARAM_ENDPOINT: {"string_value": "ipc:///tmp/x"},
                             protocol.PARAM_HANDLERS: {"string_value": "2"}}}
    assert model._parameters(config) == {protocol.PARAM_ENDPOINT: "ipc:///tmp/x", protocol.PARAM_HANDLERS: "2"}
    stub_argv = ["stub", "/m/model.py", "region", "1048576", "1048576", "4242", "/backends/python"]
    assert model._server_pid(stub_argv) == 4242


@pytest.mark.parametrize("count", [1, 3])
def test_the_batch_header_the_worker_decodes_holds_what_the_requests_carried(count):
    requests = [Request({"x": np.full((2,), index, np.float32), "name": np.array([b"r%d" % index], np.object_)},
                        {"index": index}, requested=["y"], correlation_id=10 + index, flags=1)
                for index in range(count)]
    inputs, parameters = model._read_requests(requests)
    columns, segment, payload = codec.pack_columns(inputs, count, None)
    header = protocol.infer_batch_header(batch_id=5, parameters=parameters, columns=columns, segment=segment,
                                         sequences=model._sequences(requests),
                                         requested=model._requested(requests, 2))
    batch = protocol.decode(header)
    assert (batch.batch_id, batch.segment, batch.sent_ns > 0) == (5, "", True)
    assert [json.loads(text) for text in batch.parameters] == [{"index": index} for index in range(count)]
    assert batch.sequences == tuple((10 + index, 1) for index in range(count))
    assert batch.requested == (("y",),) * count
    frame = memoryview(b"".join(memoryview(part).cast("B") for part in payload))
    groups = codec.unpack(batch.columns, batch.segment, frame, SegmentReader(), count)
    for index, arrays in enumerate(groups):
        assert arrays["x"].tolist() == [index, index]
        assert arrays["name"].tolist() == [b"r%d" % index]
