"""Model warm-up through the real tritonserver: Triton runs `ModelWarmup` requests through the
callable while it loads the model, before the model (and the server) report ready.

The callable below initialises lazily on its first call, like a model that moves its weights to
a device on first use; the tests show that this first call is a warm-up request, made before
`run()` or `bind()` returned, and that user requests never pay for it.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest
from support import http_url, server_config

from pytriton.client import ModelClient
from pytriton.decorators import batch
from pytriton.exceptions import PyTritonModelConfigError, PyTritonServerStartupError
from pytriton.model_config import ModelConfig, ModelWarmup, Tensor
from pytriton.triton import Triton

pytestmark = pytest.mark.functional

INPUTS = [Tensor(name="text", dtype=np.bytes_, shape=(1,)), Tensor(name="x", dtype=np.float32, shape=(-1,))]
OUTPUTS = [Tensor(name="y", dtype=np.float32, shape=(-1,))]


class LazyModel:
    """Initialises on its first call; records every call as (phase, texts, x shape)."""

    def __init__(self) -> None:
        self.initialised_by = None
        self.calls: list = []
        self.phase = "loading"
        self.lock = threading.Lock()

    @batch
    def __call__(self, text, x):
        with self.lock:
            if self.initialised_by is None:
                self.initialised_by = self.phase  # the slow one-off work would run here
            self.calls.append((self.phase, [t[0] for t in text.tolist()], x.shape))
        return {"y": x * 2}


WARMUPS = (
    ModelWarmup({"text": np.array([b"hello"])}, batch_size=3, count=2, name="greeting"),
    ModelWarmup(name="zeros"),
)


def test_warmup_requests_reach_the_callable_before_run_returns():
    model = LazyModel()
    config = server_config()
    with Triton(config=config) as triton:
        triton.bind("Lazy", model, INPUTS, OUTPUTS, config=ModelConfig(max_batch_size=8, warmup=WARMUPS))
        triton.run()
        model.phase = "serving"
        assert model.initialised_by == "loading"
        # "greeting" twice with the given text repeated to batch 3 (x left out: zeros of length 1),
        # then "zeros" once: every required input zero, bytes empty.
        assert model.calls == [
            ("loading", [b"hello"] * 3, (3, 1)),
            ("loading", [b"hello"] * 3, (3, 1)),
            ("loading", [b""], (1, 1)),
        ]
        with ModelClient(http_url(config), "Lazy") as client:
            result = client.infer_sample(text=np.array([b"user"]), x=np.array([1.0, 2.0], dtype=np.float32))
        assert result["y"].tolist() == [2.0, 4.0]
        assert model.calls[-1] == ("serving", [b"user"], (1, 2))
        assert model.initialised_by == "loading"


def test_warmup_of_a_model_bound_after_run_happens_before_bind_returns():
    model = LazyModel()
    with Triton(config=server_config()) as triton:
        triton.run()
        triton.bind("LateLazy", model, INPUTS, OUTPUTS,
                    config=ModelConfig(max_batch_size=8, warmup=ModelWarmup(batch_size=2)))
        assert model.calls == [("loading", [b"", b""], (2, 1))]


def test_a_warmup_sample_that_does_not_fit_the_inputs_is_refused_at_bind():
    with Triton(config=server_config()) as triton:
        with pytest.raises(PyTritonModelConfigError, match=r"ModelWarmup 'warmup' gives inputs \['txt'\].*'text'"):
            triton.bind("Typo", LazyModel(), INPUTS, OUTPUTS,
                        config=ModelConfig(warmup=ModelWarmup({"txt": np.array([b"a"])})))
        with pytest.raises(PyTritonModelConfigError, match=r"input 'x' has shape \(2, 2\)"):
            triton.bind("Shape", LazyModel(), INPUTS, OUTPUTS,
                        config=ModelConfig(warmup=ModelWarmup({"x": np.zeros((2, 2), np.float32)})))


def test_a_callable_that_fails_its_warmup_fails_the_start_with_its_error():
    @batch
    def broken(text, x):
        raise ValueError("weights missing")

    with Triton(config=server_config()) as triton:
        triton.bind("Broken", broken, INPUTS, OUTPUTS, config=ModelConfig(warmup=ModelWarmup()))
        with pytest.raises(PyTritonServerStartupError, match="failed to run warmup sample 'warmup'.*weights missing"):
            triton.run()
