"""DynamicBatcher and QueuePolicy through the real tritonserver: each field changes what Triton does.

One server serves every model of the module. Each model has one instance whose callable sleeps
for as many milliseconds as the first value of its input asks, so a test can keep the instance
busy and line requests up in Triton's queue behind it. Priority and per-request queue timeouts
are not part of our clients, so those requests go through ``tritonclient.http`` directly.
"""

from __future__ import annotations

import concurrent.futures
import threading
import time

import numpy as np
import pytest
import tritonclient.http as httpclient
from support import http_url, server_config, triton_instances
from tritonclient.utils import InferenceServerException

from pytriton.decorators import batch
from pytriton.model_config import DynamicBatcher, ModelConfig, QueuePolicy, Tensor, TimeoutAction
from pytriton.triton import Triton

pytestmark = pytest.mark.functional

BUSY_MS = 600  # how long a blocking request keeps the single instance busy


class Recorder:
    """Records the values of each batch it serves; sleeps for the batch's first value in ms."""

    def __init__(self) -> None:
        self.batches: list = []
        self.lock = threading.Lock()

    @batch
    def __call__(self, INPUT_1):
        with self.lock:
            self.batches.append([int(v) for v in INPUT_1[:, 0]])
        time.sleep(float(INPUT_1[0, 0]) / 1000.0)
        return {"OUTPUT_1": INPUT_1}

    def values(self) -> list:
        return [value for batch_ in self.batches for value in batch_]


MODELS = {
    "Gather": ModelConfig(max_batch_size=8, batcher=DynamicBatcher(max_queue_delay_microseconds=300_000)),
    "Preferred": ModelConfig(
        max_batch_size=8, batcher=DynamicBatcher(max_queue_delay_microseconds=2_000_000, preferred_batch_size=[2])
    ),
    "NotPreferred": ModelConfig(max_batch_size=8, batcher=DynamicBatcher(max_queue_delay_microseconds=2_000_000)),
    "Ordered": ModelConfig(max_batch_size=1, batcher=DynamicBatcher(preserve_ordering=True)),
    "Unordered": ModelConfig(max_batch_size=1, batcher=DynamicBatcher(preserve_ordering=False)),
    "Priority": ModelConfig(max_batch_size=1, batcher=DynamicBatcher(priority_levels=2, default_priority_level=2)),
    "QueueFull": ModelConfig(
        max_batch_size=1, batcher=DynamicBatcher(default_queue_policy=QueuePolicy(max_queue_size=1))
    ),
    "QueueTimeout": ModelConfig(
        max_batch_size=1,
        batcher=DynamicBatcher(
            default_queue_policy=QueuePolicy(timeout_action=TimeoutAction.REJECT, default_timeout_microseconds=150_000)
        ),
    ),
    "TimeoutOverride": ModelConfig(
        max_batch_size=1,
        batcher=DynamicBatcher(
            default_queue_policy=QueuePolicy(default_timeout_microseconds=5_000_000, allow_timeout_override=True)
        ),
    ),
    "NoTimeoutOverride": ModelConfig(
        max_batch_size=1,
        batcher=DynamicBatcher(
            default_queue_policy=QueuePolicy(default_timeout_microseconds=5_000_000, allow_timeout_override=False)
        ),
    ),
    "PerLevel": ModelConfig(
        max_batch_size=1,
        batcher=DynamicBatcher(
            priority_levels=2,
            default_priority_level=1,
            priority_queue_policy={2: QueuePolicy(default_timeout_microseconds=150_000)},
        ),
    ),
}
# Two instances, so the fast second request can finish before the slow first one.
TWO_INSTANCES = {"Ordered", "Unordered"}


@pytest.fixture(scope="module")
def server():
    config = server_config()
    triton = Triton(config=config)
    recorders = {}
    for name, model_config in MODELS.items():
        count = 2 if name in TWO_INSTANCES else 1
        recorder = Recorder()
        recorders[name] = recorder
        funcs = [recorder] * count
        triton.bind(
            name,
            funcs,
            inputs=[Tensor(dtype=np.int32, shape=(1,))],
            outputs=[Tensor(dtype=np.int32, shape=(1,))],
            config=model_config,
        )
    triton.run()
    try:
        yield http_url(config), recorders
    finally:
        triton.stop()


def infer(url: str, model: str, value: int, **kwargs) -> float:
    """One request with a fresh client (tritonclient clients are not shared across threads).

    Returns:
        The monotonic time the answer arrived.
    """
    client = httpclient.InferenceServerClient(url.removeprefix("http://"))
    try:
        data = np.array([[value]], dtype=np.int32)
        tensor = httpclient.InferInput("INPUT_1", list(data.shape), "INT32")
        tensor.set_data_from_numpy(data)
        result = client.infer(model, [tensor], **kwargs)
        assert result.as_numpy("OUTPUT_1").tolist() == [[value]]
        return time.monotonic()
    finally:
        client.close()


def submit_in_order(pool, calls, gap_s: float = 0.1) -> list:
    """Submit the calls one by one with a small gap, so Triton receives them in this order."""
    futures = []
    for call in calls:
        futures.append(pool.submit(*call))
        time.sleep(gap_s)
    return futures


def test_max_queue_delay_gathers_concurrent_requests_into_one_call(server):
    url, recorders = server
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda v: infer(url, "Gather", v), [1, 2, 3, 4]))
    sizes = [len(b) for b in recorders["Gather"].batches]
    assert sum(sizes) == 4
    assert max(sizes) > 1, f"the batcher did not gather the concurrent requests: {sizes}"


def test_preferred_batch_size_dispatches_without_waiting_for_the_queue_delay(server):
    url, recorders = server

    def two_requests(model: str) -> float:
        start = time.monotonic()
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            done = list(pool.map(lambda v: infer(url, model, v), [1, 2]))
        return max(done) - start

    # A batch of 2 is preferred: it goes at once; without the preference Triton waits the 2 s delay
    # hoping to fill a batch of 8.
    assert two_requests("Preferred") < 1.0
    # both requests in one call; which of two concurrent requests Triton queued first is not fixed
    assert [sorted(batch) for batch in recorders["Preferred"].batches] == [[1, 2]]
    assert two_requests("NotPreferred") > 1.5


def test_preserve_ordering_holds_back_a_response_that_finished_early(server):
    url, _ = server

    def lead_of_second_over_first_s(model: str) -> float:
        """How much earlier the fast second request finished than the slow first one."""
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            slow, fast = submit_in_order(pool, [(infer, url, model, BUSY_MS), (infer, url, model, 1)])
            return slow.result() - fast.result()

    # One Triton instance per callable, so the fast request finds the idle one.
    assert triton_instances(url, "Ordered") == triton_instances(url, "Unordered") == 2
    # Unordered, the fast request returns about 0.5 s before the slow one; ordered, it is held
    # until the slow one is answered, so both come back together (the exact order of two
    # responses released at once depends on the client threads).
    assert lead_of_second_over_first_s("Unordered") > 0.3
    assert lead_of_second_over_first_s("Ordered") < 0.15


def test_higher_priority_requests_are_served_first(server):
    url, recorders = server
    # Level 1 is Triton's highest priority; requests without one get default_priority_level=2.
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        futures = submit_in_order(
            pool,
            [(infer, url, "Priority", BUSY_MS), (infer, url, "Priority", 20), (infer, url, "Priority", 21),
             (lambda: infer(url, "Priority", 10, priority=1),)],
        )
        for future in futures:
            future.result()
    assert recorders["Priority"].values() == [BUSY_MS, 10, 20, 21]


def test_max_queue_size_rejects_requests_when_the_queue_is_full(server):
    url, recorders = server
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        futures = submit_in_order(pool, [(infer, url, "QueueFull", BUSY_MS), (infer, url, "QueueFull", 1),
                                         (infer, url, "QueueFull", 2)])
        futures[0].result()
        futures[1].result()
        with pytest.raises(InferenceServerException, match="(?i)exceeds maximum queue size"):
            futures[2].result()
    assert recorders["QueueFull"].values() == [BUSY_MS, 1]


def test_default_timeout_rejects_a_request_that_waited_too_long(server):
    url, recorders = server
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        blocker, waiting = submit_in_order(pool, [(infer, url, "QueueTimeout", BUSY_MS),
                                                  (infer, url, "QueueTimeout", 1)])
        blocker.result()
        with pytest.raises(InferenceServerException, match="(?i)timeout"):
            waiting.result()
    assert recorders["QueueTimeout"].values() == [BUSY_MS]
    infer(url, "QueueTimeout", 2)  # an idle model serves a request long before its timeout


@pytest.mark.parametrize(("model", "rejected"), [("TimeoutOverride", True), ("NoTimeoutOverride", False)])
def test_allow_timeout_override_lets_a_request_set_a_shorter_timeout(server, model, rejected):
    url, recorders = server
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        blocker, waiting = submit_in_order(
            pool, [(infer, url, model, BUSY_MS), (lambda: infer(url, model, 1, timeout=150_000),)]
        )
        blocker.result()
        if rejected:
            with pytest.raises(InferenceServerException, match="(?i)timeout"):
                waiting.result()
        else:
            waiting.result()  # the request's timeout is ignored; the 5 s default is not reached
    assert recorders[model].values() == ([BUSY_MS] if rejected else [BUSY_MS, 1])


def test_priority_queue_policy_applies_per_level(server):
    url, recorders = server
    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        blocker, level2, level1 = submit_in_order(
            pool,
            [(infer, url, "PerLevel", BUSY_MS), (lambda: infer(url, "PerLevel", 2, priority=2),),
             (lambda: infer(url, "PerLevel", 1, priority=1),)],
        )
        blocker.result()
        level1.result()  # level 1 has no timeout: it waits as long as it must
        with pytest.raises(InferenceServerException, match="(?i)timeout"):
            level2.result()  # level 2 times out after 150 ms
    assert recorders["PerLevel"].values() == [BUSY_MS, 1]
