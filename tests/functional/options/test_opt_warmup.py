"""Model warm-up through the real tritonserver: Triton runs `ModelWarmup` requests through the
callable while it loads the model, before the model (and the server) report ready.

The callable below initialises lazily on its first call, like a model that moves its weights to
a device on first use; the tests show that this first call is a warm-up request, made before
`run()` or `bind()` returned, and that user requests never pay for it. Both forms of an input
are covered: the published `WarmupInput` (zero_data, random_data, input_data_file) and a
sample array.
"""

from __future__ import annotations

import re
import threading

import numpy as np
import pytest
from support import http_url, running_triton, server_config

from pytriton.client import ModelClient
from pytriton.decorators import batch
from pytriton.exceptions import PyTritonModelConfigError, PyTritonServerStartupError
from pytriton.model_config import ModelConfig, Tensor
from pytriton.model_config.common import ModelWarmup, WarmupInput
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


WARMUPS = [
    ModelWarmup(name="greeting", batch_size=3, inputs={"text": np.array([b"hello"])}, count=2),
    ModelWarmup(name="zeros"),
]


def test_warmup_requests_reach_the_callable_before_run_returns():
    model = LazyModel()
    config = server_config()
    with Triton(config=config) as triton:
        triton.bind("Lazy", model, INPUTS, OUTPUTS, config=ModelConfig(max_batch_size=8, model_warmup=WARMUPS))
        triton.run()
        model.phase = "serving"
        assert model.initialised_by == "loading"
        # "greeting" twice with the given text repeated to batch 3 (x left out: zeros of length 1),
        # then "zeros" once: every required input zero, bytes empty; Triton warms up its one
        # instance (one per callable).
        per_instance = [
            ("loading", [b"hello"] * 3, (3, 1)),
            ("loading", [b"hello"] * 3, (3, 1)),
            ("loading", [b""], (1, 1)),
        ]
        assert model.calls == per_instance
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
                    config=ModelConfig(max_batch_size=8, model_warmup=[ModelWarmup(batch_size=2)]))
        assert model.calls == [("loading", [b"", b""], (2, 1))]


def test_a_warmup_sample_that_does_not_fit_the_inputs_is_refused_at_bind():
    with Triton(config=server_config()) as triton:
        with pytest.raises(PyTritonModelConfigError, match=r"ModelWarmup 'warmup' gives inputs \['txt'\].*'text'"):
            triton.bind("Typo", LazyModel(), INPUTS, OUTPUTS,
                        config=ModelConfig(model_warmup=[ModelWarmup(inputs={"txt": np.array([b"a"])})]))
        with pytest.raises(PyTritonModelConfigError, match=r"input 'x' has shape \(2, 2\)"):
            triton.bind("Shape", LazyModel(), INPUTS, OUTPUTS,
                        config=ModelConfig(model_warmup=[ModelWarmup(inputs={"x": np.zeros((2, 2), np.float32)})]))


def test_a_callable_that_fails_its_warmup_fails_the_start_with_its_error():
    @batch
    def broken(text, x):
        raise ValueError("weights missing")

    # Not entered with `with`: the server starts at run(), so the model loads (and fails) there.
    with running_triton() as triton:
        triton.bind("Broken", broken, INPUTS, OUTPUTS, config=ModelConfig(model_warmup=[ModelWarmup()]))
        with pytest.raises(PyTritonServerStartupError) as caught:
            triton.run()
    if "exited with code -11" in str(caught.value):
        pytest.xfail(WARMUP_CRASH)  # the crash itself is reported, with the server's last lines
    assert re.search("failed to run warmup sample 'warmup'.*weights missing", str(caught.value)), caught.value


WARMUP_CRASH = (
    "tritonserver 2.51 sometimes dies of SIGSEGV after a warm-up request failed (2 of 40 starts here; 3 of 15 "
    "with config auto-complete on): pytriton then reports the crash with the server's last lines, not the "
    "callable's error"
)


# The published form: every input described by a WarmupInput, Triton makes the data up or reads a file.
DECLARED_INPUTS = [
    Tensor(name="a", dtype=np.float32, shape=(-1,)),
    Tensor(name="b", dtype=np.int32, shape=(2, 3)),
    Tensor(name="t", dtype=np.bytes_, shape=(1,)),
]
DECLARED_OUTPUTS = [Tensor(name="y", dtype=np.float32, shape=(-1,))]


class Recorder:
    """Records every call as {input: (dtype kind or name, shape, values)}."""

    def __init__(self) -> None:
        self.calls: list = []

    @batch
    def __call__(self, a, b, t):
        self.calls.append({
            "a": (a.dtype.name, a.shape, a.tolist()),
            "b": (b.dtype.name, b.shape, b.tolist()),
            "t": (t.dtype.kind, t.shape, t.tolist()),
        })
        return {"y": a}


def _serialised_bytes(items) -> bytes:
    return b"".join(len(item).to_bytes(4, "little") + item for item in items)


def test_published_warmup_inputs_reach_the_callable_while_the_model_loads(tmp_path, monkeypatch):
    a_file = tmp_path / "a.bin"
    a_file.write_bytes(np.array([1.5, 2.5, 3.5, 4.5], np.float32).tobytes())
    (tmp_path / "b.bin").write_bytes(np.arange(6, dtype=np.int32).tobytes())
    (tmp_path / "t.bin").write_bytes(_serialised_bytes([b"from-file"]))
    monkeypatch.chdir(tmp_path)  # b.bin and t.bin are given relative to the current directory
    warmups = [
        ModelWarmup("zeros", 2, {
            "a": WarmupInput(np.float32, (3,), zero_data=True),
            "b": WarmupInput(np.int32, (2, 3), zero_data=True),
            "t": WarmupInput(np.bytes_, (1,), zero_data=True),
        }, 2),
        ModelWarmup("random", 3, {
            "a": WarmupInput(np.float32, (5,), random_data=True),
            "b": WarmupInput(np.int32, (2, 3), random_data=True),
            "t": WarmupInput(object, (1,), random_data=True),
        }, 1),
        ModelWarmup(name="file", batch_size=4, count=1, inputs={
            "a": WarmupInput(dtype=np.float32, shape=(4,), input_data_file=str(a_file)),
            "b": WarmupInput(dtype=np.int32, shape=(2, 3), input_data_file="b.bin"),
            "t": WarmupInput(dtype=np.bytes_, shape=(1,), input_data_file="t.bin"),
        }),
    ]
    model = Recorder()
    config = server_config()
    with Triton(config=config) as triton:
        triton.bind("Declared", model, DECLARED_INPUTS, DECLARED_OUTPUTS,
                    config=ModelConfig(max_batch_size=4, model_warmup=warmups))
        triton.run()
        loading_calls = list(model.calls)
        with ModelClient(http_url(config), "Declared") as client:
            client.infer_sample(a=np.ones(2, np.float32), b=np.ones((2, 3), np.int32), t=np.array([b"user"]))
    # Every warm-up call happened before run() returned, count times, in the declared order.
    lanes = 1  # Triton instances of the model: one per callable
    assert len(loading_calls) == 4 * lanes and len(model.calls) == 4 * lanes + 1
    by_kind: dict = {}
    for call in loading_calls:
        by_kind.setdefault(call["a"][1][1], []).append(call)  # a's sample length tells them apart
    assert sorted((length, len(calls)) for length, calls in by_kind.items()) == [(3, 2 * lanes), (4, lanes), (5, lanes)]
    zeros_1, zeros_2, random, from_file = by_kind[3][0], by_kind[3][1], by_kind[5][0], by_kind[4][0]
    assert zeros_1 == zeros_2 == {
        "a": ("float32", (2, 3), [[0.0] * 3] * 2),
        "b": ("int32", (2, 2, 3), [[[0] * 3] * 2] * 2),
        "t": (zeros_1["t"][0], (2, 1), [[b""]] * 2),
    }
    assert zeros_1["t"][0] in "SO"
    assert {name: value[:2] for name, value in random.items()} == {
        "a": ("float32", (3, 5)), "b": ("int32", (3, 2, 3)), "t": (random["t"][0], (3, 1))}
    assert from_file["a"] == ("float32", (4, 4), [[1.5, 2.5, 3.5, 4.5]] * 4)
    assert from_file["b"] == ("int32", (4, 2, 3), [[[0, 1, 2], [3, 4, 5]]] * 4)
    assert from_file["t"][1:] == ((4, 1), [[b"from-file"]] * 4)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (WarmupInput(np.float64, (3,)), r"input 'a' has dtype float64; the model's input has dtype float32"),
        (WarmupInput(np.float32, (3, 1)), r"input 'a' has shape \(3, 1\); expected one sample of shape \(-1,\)"),
        (WarmupInput(np.float32, (3,), input_data_file="missing.bin"),
         r"input 'a': input_data_file 'missing.bin' is not a file"),
    ],
)
def test_a_warmup_input_that_does_not_fit_the_model_is_refused_naming_model_warmup_and_input(
    spec, message, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    warmup = ModelWarmup(name="bad", inputs={"a": spec})
    with Triton(config=server_config()) as triton:
        with pytest.raises(PyTritonModelConfigError, match=r"model 'Refused': ModelWarmup 'bad' " + message):
            triton.bind("Refused", Recorder(), DECLARED_INPUTS, DECLARED_OUTPUTS,
                        config=ModelConfig(model_warmup=[warmup]))
        # The refused model left nothing behind: the server starts and serves a good one.
        model = Recorder()
        triton.bind("Good", model, DECLARED_INPUTS, DECLARED_OUTPUTS, config=ModelConfig(model_warmup=[
            ModelWarmup(name="ok", inputs={"a": WarmupInput(np.float32, (3,))})]))
        triton.run()
        assert model.calls[0]["a"] == ("float32", (1, 3), [[0.0, 0.0, 0.0]])
