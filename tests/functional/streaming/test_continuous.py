"""Continuous batching (``@continuous``): streams join and leave a running batch at every step.

Each test drives real streams through tritonserver and pytriton's backend, and reads what the
step function saw at each step (`Steps.log`: the stream ids of every step), so that "joined at the
next step" and "left at once" are shown by the steps themselves, not by timings. The same
scenarios served by a whole-batch ``@batch`` generator (today's streaming) fail these tests: a
stream that arrives while a batch runs waits for its end, and a stream ends with its batch.
"""

from __future__ import annotations

import json
import queue
import threading
import time
import urllib.request

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from support import server_config, wait_until

from pytriton.client import DecoupledModelClient
from pytriton.client_contract import DEADLINE_PARAMETER
from pytriton.decorators import continuous
from pytriton.exceptions import PyTritonModelConfigError
from pytriton.model_config import InstanceSetup, ModelConfig, Tensor
from pytriton.triton import Triton

pytestmark = pytest.mark.functional

STEP_S = 0.02
INPUTS = [Tensor(name="sid", dtype=np.int32, shape=(1,)), Tensor(name="n", dtype=np.int32, shape=(1,))]
OUTPUTS = [Tensor(name="value", dtype=np.int32, shape=(1,))]
CRASH_ID = 666  # a step holding this stream raises
FAIL_ID = 777  # this stream alone fails at its third step


class Steps:
    """A step function that records the ids of the streams of every step.

    Stream `sid` yields ``sid * 1000 + k`` for k = 0..n-1 and finishes with its n-th piece.
    """

    def __init__(self) -> None:
        self.log: list = []
        self.lock = threading.Lock()

    def __call__(self, streams):
        ids = self._begin(streams)
        if CRASH_ID in ids:
            raise ValueError(f"the step broke on stream {CRASH_ID}")
        values = [self._value(stream, ident) for stream, ident in zip(streams, ids)]
        return [None if value is None else {"value": np.array([[value]], np.int32)} for value in values]

    def _begin(self, streams) -> list:
        """Log the step's stream ids and spend the step; the ids."""
        ids = [int(stream.inputs["sid"][0, 0]) for stream in streams]
        with self.lock:
            self.log.append(ids)
        time.sleep(STEP_S)
        return ids

    @staticmethod
    def _value(stream, ident: int):
        """The stream's value at this step (finishing it with its n-th), or None when it fails now."""
        if ident == FAIL_ID and stream.steps == 2:
            stream.fail(f"stream {FAIL_ID} has a bad prompt")
            return None
        if stream.steps + 1 >= int(stream.inputs["n"][0, 0]):
            stream.finish()
        return ident * 1000 + stream.steps

    def steps_with(self, ident: int) -> list:
        with self.lock:
            return [index for index, ids in enumerate(self.log) if ident in ids]

    def size_of_steps(self) -> list:
        with self.lock:
            return [len(ids) for ids in self.log]


ROWS_OFF_ID = 555  # a step holding this stream answers one row too many


class RowSteps(Steps):
    """`Steps` answering as a batched forward pass does: one array with a row per stream."""

    def __call__(self, streams):
        ids = self._begin(streams)
        values = np.zeros((len(streams) + (ROWS_OFF_ID in ids), 1), np.int32)
        for row, (stream, ident) in enumerate(zip(streams, ids)):
            value = self._value(stream, ident)
            values[row, 0] = 0 if value is None else value
        return {"value": values}


@pytest.fixture(scope="module")
def served():
    config = server_config()
    steps = Steps()
    small = Steps()
    triton = Triton(config=config)
    try:
        triton.bind("Steps", continuous(steps), INPUTS, OUTPUTS, config=ModelConfig(max_batch_size=8, decoupled=True))
        triton.bind("Two", continuous(small), INPUTS, OUTPUTS, config=ModelConfig(max_batch_size=2, decoupled=True))
        triton.bind("Limited", continuous(max_steps=3)(Steps()), INPUTS, OUTPUTS,
                    config=ModelConfig(max_batch_size=4, decoupled=True))
        rows = RowSteps()
        triton.bind("Rows", continuous(rows), INPUTS, OUTPUTS, config=ModelConfig(max_batch_size=8, decoupled=True))
        triton.run()
        yield {"config": config, "steps": steps, "small": small, "rows": rows}
    finally:
        triton.stop()


class Stream:
    """One request on a gRPC stream of its own: its pieces and its end, as they arrive (in a thread)."""

    def __init__(self, config, model: str, ident: int, n: int, parameters=None) -> None:
        self.events: queue.Queue = queue.Queue()
        self.values: list = []
        self.error = None
        self.ended = threading.Event()
        self._client = grpcclient.InferenceServerClient(f"127.0.0.1:{config.grpc_port}")
        self._client.start_stream(self._on_response)
        inputs = []
        for name, value in (("sid", ident), ("n", n)):
            tensor = grpcclient.InferInput(name, [1, 1], "INT32")
            tensor.set_data_from_numpy(np.array([[value]], np.int32))
            inputs.append(tensor)
        self._client.async_stream_infer(model, inputs, enable_empty_final_response=True, parameters=parameters)

    def _on_response(self, result, error) -> None:
        if error is not None:
            if self.error is None:  # the stream's own error; a closed socket may follow it
                self.error = str(error)
            self.ended.set()
            return
        response = result.get_response()
        if response.outputs:
            self.values.append(int(result.as_numpy("value")[0, 0]))
        if response.parameters["triton_final_response"].bool_param:
            self.ended.set()

    def wait(self, timeout_s: float = 30.0) -> Stream:
        assert self.ended.wait(timeout_s), f"the stream did not end within {timeout_s} s (got {self.values})"
        return self

    def cancel(self) -> None:
        self._client.stop_stream(cancel_requests=True)

    def close(self) -> None:
        self._client.stop_stream()
        self._client.close()


def expected(ident: int, n: int) -> list:
    return [ident * 1000 + k for k in range(n)]


def test_a_stream_joins_the_running_batch_at_its_next_step(served):
    steps = served["steps"]
    first = Stream(served["config"], "Steps", 1, 40)
    assert wait_until(lambda: len(first.values) >= 3, timeout_s=10)
    joined_at = len(first.values)
    second = Stream(served["config"], "Steps", 2, 5)
    second.wait()
    first_still_running = not first.ended.is_set()
    # The second stream was answered while the first ran on: its 5 steps were steps of the first's,
    # a few steps after it arrived (not after the first's 40 pieces, as a whole-batch stream would).
    assert second.values == expected(2, 5) and second.error is None
    assert first_still_running
    shared = set(steps.steps_with(1)) & set(steps.steps_with(2))
    assert len(shared) == 5, (steps.steps_with(1), steps.steps_with(2))
    assert steps.steps_with(2)[0] - steps.steps_with(1)[0] <= joined_at + 5
    first.wait()
    assert first.values == expected(1, 40)
    first.close()
    second.close()


def test_a_finished_stream_leaves_at_once_and_the_others_go_on(served):
    steps = served["steps"]
    long, short = Stream(served["config"], "Steps", 3, 30), Stream(served["config"], "Steps", 4, 3)
    short.wait()
    # Its final response came while the long one still had most of its pieces to go.
    assert short.values == expected(4, 3) and len(long.values) < 20 and not long.ended.is_set()
    long.wait()
    assert long.values == expected(3, 30) and long.error is None
    with_short = steps.steps_with(4)
    assert len(with_short) == 3, with_short  # no step of the short stream after its last piece
    assert max(steps.steps_with(3)) > max(with_short) + 10
    long.close()
    short.close()


def test_a_cancelled_stream_leaves_at_the_next_step_and_nothing_else(served):
    steps = served["steps"]
    keep, leave = Stream(served["config"], "Steps", 5, 40), Stream(served["config"], "Steps", 6, 1000)
    assert wait_until(lambda: len(leave.values) >= 3, timeout_s=10)
    leave.cancel()
    cancelled_at = len(steps.log)
    keep.wait()
    assert keep.values == expected(5, 40) and keep.error is None
    after = [index for index in steps.steps_with(6) if index > cancelled_at]
    # pytriton's backend looks for cancellations every 0.1 s: the stream left within that and a step.
    assert len(after) <= 0.15 / STEP_S + 2, (cancelled_at, after)
    assert len(steps.steps_with(6)) < 100
    keep.close()
    leave.close()


def test_a_deadline_that_passes_ends_its_stream_alone(served):
    deadline_ms = time.time() * 1000 + 300  # what pytriton's clients send for inference_timeout_s=0.3
    late = Stream(served["config"], "Steps", 7, 1000, parameters={DEADLINE_PARAMETER: deadline_ms})
    on_time = Stream(served["config"], "Steps", 8, 30)
    late.wait()
    on_time.wait()
    assert late.error is not None and "deadline" in late.error, late.error
    assert 0 < len(late.values) < 100
    assert on_time.values == expected(8, 30) and on_time.error is None
    late.close()
    on_time.close()


def test_an_exception_fails_the_streams_of_that_step_and_the_model_serves_on(served):
    bystander = Stream(served["config"], "Steps", 9, 1000)
    assert wait_until(lambda: len(bystander.values) >= 2, timeout_s=10)
    crash = Stream(served["config"], "Steps", CRASH_ID, 5)
    crash.wait()
    bystander.wait()
    for stream in (crash, bystander):
        assert stream.error is not None and "ValueError: the step broke on stream 666" in stream.error, stream.error
    after = Stream(served["config"], "Steps", 10, 4).wait()
    assert after.values == expected(10, 4) and after.error is None
    for stream in (crash, bystander, after):
        stream.close()


@pytest.mark.parametrize("model, good_id", [("Steps", 11), ("Rows", 34)], ids=["a-mapping-per-stream", "one-array"])
def test_a_stream_the_function_fails_ends_alone(served, model, good_id):
    bad, good = Stream(served["config"], model, FAIL_ID, 10), Stream(served["config"], model, good_id, 10)
    bad.wait()
    good.wait()
    assert bad.values == expected(FAIL_ID, 2)
    assert bad.error is not None and f"stream {FAIL_ID} has a bad prompt" in bad.error
    assert good.values == expected(good_id, 10) and good.error is None
    bad.close()
    good.close()


def test_a_step_may_answer_with_one_array_of_a_row_per_stream(served):
    rows = served["rows"]
    first = Stream(served["config"], "Rows", 31, 30)
    assert wait_until(lambda: len(first.values) >= 3, timeout_s=10)
    second, third = Stream(served["config"], "Rows", 32, 5), Stream(served["config"], "Rows", 33, 12)
    for stream in (first, second, third):
        stream.wait()
    # Each stream got its own row of every step's array, in order, and nothing of the others'.
    assert first.values == expected(31, 30) and second.values == expected(32, 5)
    assert third.values == expected(33, 12)
    assert all(stream.error is None for stream in (first, second, third))
    assert len(set(rows.steps_with(31)) & set(rows.steps_with(32))) == 5
    for stream in (first, second, third):
        stream.close()


def test_an_array_whose_rows_are_not_the_streams_fails_that_step_with_a_clear_error(served):
    bystander = Stream(served["config"], "Rows", 35, 1000)
    assert wait_until(lambda: len(bystander.values) >= 2, timeout_s=10)
    off = Stream(served["config"], "Rows", ROWS_OFF_ID, 5)
    off.wait()
    bystander.wait()
    for stream in (off, bystander):  # the step's streams get the error, which says what was expected
        assert stream.error is not None, stream.values
        assert "Model 'Rows'" in stream.error and "output 'value'" in stream.error, stream.error
        assert "shape (3, 1) for a step of 2 stream(s)" in stream.error and "one row per stream" in stream.error
    after = Stream(served["config"], "Rows", 36, 4).wait()
    assert after.values == expected(36, 4) and after.error is None
    for stream in (off, bystander, after):
        stream.close()


def test_at_most_max_batch_size_streams_share_a_step_and_the_rest_join_as_room_frees(served):
    small = served["small"]
    lengths = {20: 2, 21: 6, 22: 6, 23: 6, 24: 2}
    # One gRPC stream carries the five requests, in order, within a moment: from the first step
    # on, whatever does not run waits.
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{served['config'].grpc_port}")
    got: dict = {ident: [] for ident in lengths}
    ended: queue.Queue = queue.Queue()

    def on_response(result, error):
        assert error is None, error
        response = result.get_response()
        if response.outputs:
            got[int(response.id)].append(int(result.as_numpy("value")[0, 0]))
        if response.parameters["triton_final_response"].bool_param:
            ended.put(response.id)

    client.start_stream(on_response)
    for ident, n in lengths.items():
        inputs = []
        for name, value in (("sid", ident), ("n", n)):
            tensor = grpcclient.InferInput(name, [1, 1], "INT32")
            tensor.set_data_from_numpy(np.array([[value]], np.int32))
            inputs.append(tensor)
        client.async_stream_infer("Two", inputs, request_id=str(ident), enable_empty_final_response=True)
    for _ in lengths:
        ended.get(timeout=30)
    client.stop_stream()
    client.close()
    assert got == {ident: expected(ident, n) for ident, n in lengths.items()}
    sizes = small.size_of_steps()
    assert max(sizes) == 2
    # A step below capacity is the first (the second request on its way) or one after the last
    # stream joined: a stream that waits joins at the step after one leaves. Whole batches of two
    # would run 20's batch for 6 steps, 4 of them without 20, while 22 waits.
    seen: set = set()
    for index, ids in enumerate(small.log):
        seen |= set(ids)
        if len(ids) < 2 and index > 0:
            assert seen == set(lengths), (index, small.log)
    assert len(sizes) <= 13, small.log  # 22 stream-steps: 11 full steps and a tail


def test_max_steps_ends_every_stream(served):
    stream = Stream(served["config"], "Limited", 30, 100).wait()
    assert stream.values == expected(30, 3) and stream.error is None
    stream.close()


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_pytritons_decoupled_client_reads_a_continuous_stream(served, protocol):
    port = served["config"].grpc_port if protocol == "grpc" else served["config"].http_port
    with DecoupledModelClient(f"{protocol}://127.0.0.1:{port}", "Steps") as client:
        values = [int(part["value"][0]) for part in client.infer_sample(sid=np.array([40], np.int32),
                                                                        n=np.array([6], np.int32))]
    assert values == expected(40, 6)


def test_the_metrics_count_pieces_first_pieces_and_step_sizes(served):
    Stream(served["config"], "Steps", 50, 4).wait().close()
    url = f"http://127.0.0.1:{served['config'].metrics_port}/metrics"

    def series(name: str) -> float:
        text = urllib.request.urlopen(url, timeout=5).read().decode()
        lines = [line for line in text.splitlines() if line.startswith(name) and 'model="Steps"' in line]
        return sum(float(line.rsplit(" ", 1)[1]) for line in lines)

    assert wait_until(lambda: series("pytriton_stream_pieces_total") >= 4, timeout_s=10)
    assert series("pytriton_stream_first_piece_seconds_count") >= 1
    assert series("pytriton_batch_size_count") >= 4  # one observation per step: the streams it held


def test_bind_refuses_a_step_function_on_a_model_that_is_not_decoupled():
    with Triton(config=server_config()) as triton:
        with pytest.raises(PyTritonModelConfigError, match="decoupled=True"):
            triton.bind("NotDecoupled", continuous(Steps()), INPUTS, OUTPUTS, config=ModelConfig(max_batch_size=4))


def test_the_proxy_path_refuses_a_step_function_at_bind():
    with Triton(config=server_config(model_backend="python")) as triton:
        with pytest.raises(PyTritonModelConfigError, match="pytriton's own Triton backend"):
            triton.bind("OnProxy", continuous(Steps()), INPUTS, OUTPUTS,
                        config=ModelConfig(max_batch_size=4, decoupled=True))


def test_process_instances_serve_continuous_streams():
    config = server_config()
    with Triton(config=config) as triton:
        triton.bind("InProcess", continuous(Steps()), INPUTS, OUTPUTS,
                    config=ModelConfig(max_batch_size=4, decoupled=True, process_instances=True))
        triton.run()
        long, short = Stream(config, "InProcess", 1, 20), Stream(config, "InProcess", 2, 2)
        short.wait()
        assert short.values == expected(2, 2) and not long.ended.is_set()
        long.wait()
        assert long.values == expected(1, 20)
        long.close()
        short.close()
        with urllib.request.urlopen(f"http://127.0.0.1:{config.http_port}/v2/models/InProcess/config") as answer:
            parameters = json.loads(answer.read())["parameters"]
        assert parameters["pytriton.continuous"]["string_value"] == "4"


def test_stopping_the_server_cuts_open_streams_with_a_clear_error():
    config = server_config()
    triton = Triton(config=config)
    triton.bind("Endless", continuous(Steps()), INPUTS, OUTPUTS, config=ModelConfig(max_batch_size=4, decoupled=True))
    triton.run()
    stream = Stream(config, "Endless", 1, 1_000_000)
    assert wait_until(lambda: len(stream.values) >= 2, timeout_s=10)
    triton.stop()
    stream.wait(30)
    assert stream.error is not None and "stopping" in stream.error, stream.error


def _build_steps(placement):
    return continuous(Steps())


def test_a_process_instance_builds_its_step_function_in_its_worker_process():
    config = server_config()
    with Triton(config=config) as triton:
        triton.bind("Built", InstanceSetup(_build_steps, continuous=True), INPUTS, OUTPUTS,
                    config=ModelConfig(max_batch_size=4, decoupled=True, process_instances=True))
        triton.run()
        long, short = Stream(config, "Built", 1, 10), Stream(config, "Built", 2, 2)
        assert short.wait().values == expected(2, 2) and not long.ended.is_set()
        assert long.wait().values == expected(1, 10)
        long.close()
        short.close()
        # A setup that builds one without saying so is refused, naming the way to say it.
        with pytest.raises(PyTritonModelConfigError, match="continuous=True"):
            triton.bind("Undeclared", InstanceSetup(_build_steps), INPUTS, OUTPUTS,
                        config=ModelConfig(max_batch_size=4, decoupled=True, process_instances=True))
