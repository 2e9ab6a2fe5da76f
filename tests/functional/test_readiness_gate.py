"""Ready means the script's models are loaded: a server started on entering ``with Triton()``
reports not ready (HTTP and gRPC) before its first `bind` and while the binds load their models,
polled every 10 ms from the start of the script, against the real server."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from support import free_ports, http_status

from pytriton.client import ModelClient
from pytriton.decorators import batch
from pytriton.exceptions import PyTritonBadParameterError
from pytriton.model_config import ModelConfig, Tensor
from pytriton.server.readiness import GATE_MODEL
from pytriton.triton import Triton, TritonConfig

pytestmark = pytest.mark.functional

SCRIPT = textwrap.dedent("""
    import sys, time
    import numpy as np
    from pytriton.decorators import batch
    from pytriton.model_config import ModelConfig, ModelWarmup, Tensor, WarmupInput
    from pytriton.triton import Triton, TritonConfig

    http, grpc, metrics, pause = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])

    @batch
    def slow_to_load(x):
        time.sleep(1.5)  # the warm-up: Triton loads the model for 1.5 s
        return {"y": x}

    @batch
    def quick(x):
        return {"y": x + 1}

    tensors = dict(inputs=[Tensor(name="x", dtype=np.float32, shape=(2,))],
                   outputs=[Tensor(name="y", dtype=np.float32, shape=(2,))])
    warmup = [ModelWarmup(name="w", batch_size=1, inputs={"x": WarmupInput(np.float32, (2,), zero_data=True)})]
    config = TritonConfig(http_port=http, grpc_port=grpc, metrics_port=metrics, exit_timeout_secs=2)
    with Triton(config=config) as triton:
        time.sleep(0.5)  # the script's own start-up work
        triton.bind("Slow", slow_to_load, config=ModelConfig(max_batch_size=4, model_warmup=warmup), **tensors)
        time.sleep(pause)
        triton.bind("Quick", quick, config=ModelConfig(max_batch_size=4), **tensors)
        print("bound", flush=True)
        triton.serve()
""")


def _status(url: str):
    return http_status(url, timeout_s=1.0)  # an int, or the error's name when nothing answers yet


def _grpc_ready(client) -> bool:
    try:
        return bool(client.is_server_ready(client_timeout=1))
    except Exception:  # noqa: BLE001 - not listening yet
        return False


def _poll_script(tmp_path, pause_s: float):
    """Run the script, poll every 10 ms until it has been ready for 1 s; the samples:
    (seconds since start, HTTP server ready, gRPC server ready, Slow ready, Quick ready)."""
    http, grpc, metrics = free_ports(3)
    script = tmp_path / "serve.py"
    script.write_text(SCRIPT)
    started = time.monotonic()
    process = subprocess.Popen([sys.executable, str(script), str(http), str(grpc), str(metrics), str(pause_s)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    base = f"http://127.0.0.1:{http}"
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{grpc}")
    samples = []
    ready_since = None
    try:
        while time.monotonic() - started < 90:
            server = _status(f"{base}/v2/health/ready") == 200
            over_grpc = _grpc_ready(client)
            # read after the server's readiness: a model seen ready stays ready, so a sample with
            # the server ready and a model not ready means the server was ready first
            slow = _status(f"{base}/v2/models/Slow/ready") == 200
            quick = _status(f"{base}/v2/models/Quick/ready") == 200
            now = time.monotonic() - started
            samples.append((now, server, over_grpc, slow, quick))
            if server and slow and quick:
                ready_since = ready_since if ready_since is not None else now
                if now - ready_since > 1.0:
                    break
            else:
                ready_since = None
            time.sleep(0.01)
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=30)
    finally:
        client.close()
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, err[-3000:]
    assert "bound" in out
    return samples


def test_server_ready_is_never_seen_before_the_scripts_models_are(tmp_path):
    samples = _poll_script(tmp_path, pause_s=0.0)
    assert any(server and slow and quick for _, server, _, slow, quick in samples), "never ready"
    early = [s for s in samples if (s[1] or s[2]) and not (s[3] and s[4])]
    # A window may remain between Triton opening its ports and pytriton loading the gate: count it.
    before_gate = [s for s in early if not s[3]]
    assert not [s for s in early if s[3]], f"ready with only the slow model: {early[:5]}"
    assert len(before_gate) <= 3, f"ready while no model was bound, {len(before_gate)} samples: {before_gate[:5]}"
    assert sum(1 for s in samples if not s[3]) > 100, "the slow model's load was not observed"


def test_a_pause_between_binds_shows_ready_only_after_the_grace(tmp_path):
    """With 1 s between two binds the server is ready with the first model for the rest of the
    pause after the gate's grace (0.25 s): what docs/deploying.md states."""
    samples = _poll_script(tmp_path, pause_s=1.0)
    partial = [s[0] for s in samples if s[1] and s[3] and not s[4]]
    assert partial, "the pause never showed the server ready with the first model"
    window = max(partial) - min(partial)
    assert 0.3 < window < 1.0, window


def test_binding_inside_with_and_calling_before_run_still_works():
    http, grpc, metrics = free_ports(3)
    with Triton(config=TritonConfig(http_port=http, grpc_port=grpc, metrics_port=metrics)) as triton:
        with pytest.raises(PyTritonBadParameterError, match="readiness gate"):
            triton.bind(GATE_MODEL, batch(lambda x: {"y": x}), [Tensor(name="x", dtype=np.float32, shape=(1,))],
                        [Tensor(name="y", dtype=np.float32, shape=(1,))], config=ModelConfig(max_batch_size=2))
        triton.bind("Echo", batch(lambda x: {"y": x}), [Tensor(name="x", dtype=np.float32, shape=(1,))],
                    [Tensor(name="y", dtype=np.float32, shape=(1,))], config=ModelConfig(max_batch_size=2))
        with ModelClient(f"127.0.0.1:{http}", "Echo", init_timeout_s=10) as client:
            np.testing.assert_allclose(client.infer_sample(x=np.ones(1, np.float32))["y"], [1.0])
        assert triton.is_alive()
