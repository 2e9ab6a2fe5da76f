"""The chart's `helm test` pod, its script run as rendered against a real server.

The script and its environment come from the rendered chart (templates/tests/test-connection.yaml);
only the Service URL is replaced by the local server's. It must pass with a served model and a
valid request, and fail (exit 1, the failing check named) for a model that is not served, a
request the model refuses, and a server that is down. And the readiness probe's numbers hold
for a busy server: while clients keep a model busy on every core, /v2/health/ready still answers
well within the probe's timeoutSeconds.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
from helm_chart_support import SMOKE_REQUEST, VALUE_SETS, only, plain_env, render, server_container
from support import http_url, running_triton

from pytriton.client import ModelClient
from pytriton.decorators import batch
from pytriton.model_config import ModelConfig, Tensor

pytestmark = pytest.mark.functional


@batch
def _double(features):
    return {"scores": features * 2}


def _bind(triton, name="Linear"):
    triton.bind(name, _double, inputs=[Tensor(name="features", dtype=np.float32, shape=(3,))],
                outputs=[Tensor(name="scores", dtype=np.float32, shape=(3,))], config=ModelConfig(max_batch_size=8))


def _test_pod(values):
    pod = only(render(values), "Pod")
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    [container] = pod["spec"]["containers"]
    return container["command"], container["args"][0], plain_env(container)


def _run_pod_script(values, base_url):
    command, script, env = _test_pod(values)
    assert command == ["python", "-c"]
    environ = {**os.environ, **env, "PYTRITON_TEST_URL": base_url}
    result = subprocess.run([sys.executable, "-c", script], env=environ, capture_output=True, text=True, timeout=120)
    return result.returncode, result.stdout + result.stderr


def test_the_helm_test_script_passes_on_a_serving_release_and_fails_on_a_broken_one():
    with_inference = VALUE_SETS["inference-from-and-helm-test"]
    assert with_inference["helmTest"] == {"model": "Linear", "input": SMOKE_REQUEST}
    with running_triton() as triton:
        _bind(triton)
        triton.run()
        base = http_url(triton._config)

        code, output = _run_pod_script(with_inference, base)
        assert code == 0, output
        lines = output.splitlines()
        assert [line.split()[:3] for line in lines] == [
            ["PASS", "GET", "/v2/health/ready"],
            ["PASS", "GET", "/v2/models/Linear/ready"],
            ["PASS", "POST", "/v2/models/Linear/infer"],
        ], output
        assert '"scores"' in lines[2] and "[2.0,4.0,6.0]" in lines[2].replace(" ", ""), lines[2]

        code, output = _run_pod_script({}, base)  # readiness only, the default
        assert code == 0 and len(output.splitlines()) == 1 and output.startswith("PASS GET /v2/health/ready"), output

        code, output = _run_pod_script({"helmTest": {"model": "Nope", "input": SMOKE_REQUEST}}, base)
        assert code == 1, output
        assert "FAIL GET /v2/models/Nope/ready" in output and "FAIL POST /v2/models/Nope/infer" in output

        wrong_input = {"inputs": [{**SMOKE_REQUEST["inputs"][0], "name": "feature"}]}
        code, output = _run_pod_script({"helmTest": {"model": "Linear", "input": wrong_input}}, base)
        assert code == 1 and "PASS GET /v2/models/Linear/ready" in output, output
        assert "FAIL POST /v2/models/Linear/infer 400" in output, output
    code, output = _run_pod_script(with_inference, base)  # stopped: nothing answers
    assert code == 1 and output.startswith("FAIL GET /v2/health/ready None"), output


@batch
def _busy(features):
    # Pure-Python work that holds the GIL, like a model computing on the CPU.
    deadline = time.perf_counter() + 0.02
    while time.perf_counter() < deadline:
        pass
    return {"scores": features * 2}


def test_readiness_answers_a_busy_server_well_within_the_probe_timeout():
    readiness = server_container(render())["readinessProbe"]
    clients, load_s = 4 * (os.cpu_count() or 1), 8.0
    with running_triton() as triton:
        triton.bind("Busy", _busy, inputs=[Tensor(name="features", dtype=np.float32, shape=(3,))],
                    outputs=[Tensor(name="scores", dtype=np.float32, shape=(3,))],
                    config=ModelConfig(max_batch_size=8))
        triton.run()
        base = http_url(triton._config)
        stop = threading.Event()
        served = []

        def client():
            with ModelClient(base, "Busy", init_timeout_s=30) as model:
                while not stop.is_set():
                    model.infer_sample(features=np.ones(3, np.float32))
                    served.append(1)

        threads = [threading.Thread(target=client) for _ in range(clients)]
        for thread in threads:
            thread.start()
        try:
            import urllib.request

            time.sleep(1.0)  # the load is on
            latencies = []
            until = time.monotonic() + load_s
            while time.monotonic() < until:
                started = time.perf_counter()
                with urllib.request.urlopen(base + readiness["httpGet"]["path"],
                                            timeout=readiness["timeoutSeconds"]) as response:
                    assert response.status == 200
                latencies.append(time.perf_counter() - started)
                time.sleep(0.1)
        finally:
            stop.set()
            for thread in threads:
                thread.join(timeout=60)
    assert len(served) > 100, "the model was not kept busy"
    p50, worst = statistics.median(latencies), max(latencies)
    print(f"{clients} clients, {len(served) / (load_s + 1):.0f} requests/s: readiness answered in "
          f"p50 {p50 * 1000:.1f} ms, max {worst * 1000:.1f} ms over {len(latencies)} probes")
    assert worst < readiness["timeoutSeconds"] / 5, (p50, worst)
