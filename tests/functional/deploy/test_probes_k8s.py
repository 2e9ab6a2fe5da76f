"""The chart's probes against a real server: the paths the rendered Deployment probes tell the truth.

The paths come from the rendered chart (not from constants here), and are asked of a real
`Triton` on its HTTP port, the port the chart's probes name: 200 while serving; readiness not
200 while a model warms up, at first start and when bound later; readiness not 200 while a
killed stub is healed, liveness 200 throughout, then readiness 200 again.
"""

from __future__ import annotations

import os
import signal
import threading
import time

import numpy as np
import pytest
from helm_chart_support import chart_probes
from support import http_status, http_url, our_leftovers, running_triton, stub_processes, wait_until

from pytriton.client import ModelClient
from pytriton.decorators import batch
from pytriton.model_config import ModelConfig, ModelWarmup, Tensor

pytestmark = pytest.mark.functional

WARMUP_S = 1.0


@batch
def _sleep(seconds):
    time.sleep(float(seconds.max()))
    return {"seconds": seconds * 2}


def _bind_slow_loading(triton, name):
    # The warm-up runs inside the model's load, so the model is not ready for WARMUP_S.
    triton.bind(
        name,
        _sleep,
        inputs=[Tensor(name="seconds", dtype=np.float32, shape=(1,))],
        outputs=[Tensor(name="seconds", dtype=np.float32, shape=(1,))],
        config=ModelConfig(
            max_batch_size=4, model_warmup=[ModelWarmup(inputs={"seconds": np.array([WARMUP_S], np.float32)})]
        ),
    )


def _watch(base, paths, timeouts, while_alive: threading.Thread):
    """(seconds since start, {probe: status}) every 50 ms while `while_alive` runs.

    Each probe waits as long as the chart's probe does (its timeoutSeconds): Kubernetes counts
    a slower answer as a failure, and only that. (CI once saw one liveness answer take over
    0.5 s on a busy 2-core machine while a model loaded, which is no failure for the chart.)
    """
    started, seen = time.monotonic(), []
    while while_alive.is_alive():
        seen.append((time.monotonic() - started,
                     {kind: http_status(base + path, timeouts[kind]) for kind, path in paths.items()}))
        time.sleep(0.05)
    return seen


def test_chart_probes_answer_the_truth_during_load_serving_and_healing():
    probes = chart_probes()
    paths = {kind: path for kind, (path, _) in probes.items()}
    timeouts = {kind: timeout_s for kind, (_, timeout_s) in probes.items()}
    assert set(paths.values()) == {"/v2/health/ready", "/v2/health/live"}
    with running_triton(model_backend="python") as triton:  # a stub to kill: the proxy path
        base = http_url(triton._config)
        _bind_slow_loading(triton, "First")

        # 1. First start: run() loads the model (warm-up included) before the endpoint opens.
        starting = threading.Thread(target=triton.run)
        started_at = time.monotonic()
        starting.start()
        during_start = _watch(base, paths, timeouts, starting)
        starting.join()
        assert time.monotonic() - started_at >= WARMUP_S
        # Before the warm-up can have ended nothing answers, not even liveness: the startup
        # probe must hold liveness off. (Later samples may already see the server ready.)
        warming = [statuses for at, statuses in during_start if at < WARMUP_S]
        assert len(warming) >= 5, during_start
        assert all(200 not in statuses.values() for statuses in warming), warming

        # 2. Serving: every probe path answers 200 on the port the chart probes.
        assert {kind: http_status(base + path) for kind, path in paths.items()} == dict.fromkeys(paths, 200)

        # 3. A model bound while serving: the server is live, not ready, until its warm-up ends.
        binding = threading.Thread(target=_bind_slow_loading, args=(triton, "Second"))
        binding.start()
        during_bind = _watch(base, paths, timeouts, binding)
        binding.join()
        loading = [s for _, s in during_bind if s["readiness"] != 200]
        assert len(loading) >= 5, f"readiness was not false during the load: {during_bind}"
        assert all(s["liveness"] == 200 for _, s in during_bind), during_bind
        assert http_status(base + paths["readiness"]) == 200

        # 4. A stub killed as the OOM killer would: not ready until healed, live throughout.
        stub = stub_processes("Second")[0]  # its one instance
        os.kill(stub.pid, signal.SIGKILL)
        killed_at = time.monotonic()
        down = wait_until(lambda: http_status(base + paths["readiness"]) != 200, timeout_s=2.0, interval_s=0.02)
        assert down, "readiness stayed 200 for 2 s after the stub died"
        liveness_during_healing = []
        healed = wait_until(
            lambda: liveness_during_healing.append(http_status(base + paths["liveness"], timeouts["liveness"]))
            or http_status(base + paths["readiness"], timeouts["readiness"]) == 200,
            timeout_s=15.0,
            interval_s=0.1,
        )
        healed_after_s = time.monotonic() - killed_at
        assert healed, "readiness did not come back within 15 s of the stub's death"
        assert liveness_during_healing and set(liveness_during_healing) == {200}
        with ModelClient(base, "Second", inference_timeout_s=10) as client:
            answer = client.infer_sample(seconds=np.array([0.0], dtype=np.float32))
        assert answer["seconds"].tolist() == [0.0]
        print(f"readiness false within 2 s, healed after {healed_after_s:.1f} s (warm-up {WARMUP_S} s included)")
    assert our_leftovers() == {"processes": [], "segments": [], "folders": []}
