"""The loads `make bench` measures and their targets, and the GPU path's two (``run.py --gpu``).

Each `Case` names the model both servers serve (bench/servers.py), the request size, the
concurrency, and the least ratio ours / reference of throughput that meets its target (since
pytriton's own Triton backend, issue 30: at least the plain Python backend everywhere, more
where the stub's overhead dominated).
"""

from __future__ import annotations

import dataclasses
from typing import Optional, Tuple

NEW_CASE_WINDOW_MS = 2000


@dataclasses.dataclass(frozen=True)
class Case:
    """One load; `target` is the least ratio ours/reference of throughput that meets it.

    `protocols` limits the case to some protocols (streams need gRPC); `streaming` runs
    perf_analyzer with ``--streaming`` (a decoupled model). The later cases (sleep, cpu, huge, stream) measure
    2 s windows (`interval_ms`) instead of the run's 3 s, to keep a ``--rounds 3`` run shorter.
    `max_extra_latency_ms`, where set, is a second target: ours' mean latency at most this much
    above the reference's.
    """

    key: str
    title: str
    label: str  # short, for the plot
    model: str
    values: int
    concurrency: int
    target: float
    protocols: Tuple[str, ...] = ("http", "grpc")
    streaming: bool = False
    interval_ms: Optional[int] = None  # its measurement window, unless --interval-ms sets every case's
    max_extra_latency_ms: Optional[float] = None

    def window_ms(self, default_ms: int, explicit: bool) -> int:
        return default_ms if explicit or self.interval_ms is None else self.interval_ms


CASES = (
    Case("small_c1", "16 values, concurrency 1", "16 values\nc=1", "identity", 16, 1, 1.00),
    Case("small_c16", "16 values, concurrency 16", "16 values\nc=16", "identity", 16, 16, 1.10),
    Case("small_c64", "16 values, concurrency 64", "16 values\nc=64", "identity", 16, 64, 1.20),
    Case("large_c8", "1 MiB (256 Ki values), concurrency 8", "1 MiB\nc=8", "identity", 256 * 1024, 8, 1.00),
    Case("sleep_c64", "10 ms model, concurrency 64", "10 ms model\nc=64", "sleep_10ms", 16, 64, 1.00),
    Case("cpu_c16", "5 ms of Python work per batch, 2 instances, concurrency 16", "Python 5 ms\n2 inst., c=16",
         "cpu_5ms", 16, 16, 0.95, interval_ms=NEW_CASE_WINDOW_MS),
    Case("huge_c4", "16 MiB (4 Mi values), concurrency 4", "16 MiB\nc=4", "identity", 4 * 1024 * 1024, 4, 1.00,
         interval_ms=NEW_CASE_WINDOW_MS),
    Case("stream_c8", "stream: 100 responses of 16 values, concurrency 8", "stream\n100 x 16\nc=8", "stream_100",
         16, 8, 1.00, protocols=("grpc",), streaming=True, interval_ms=NEW_CASE_WINDOW_MS),
)  # fmt: skip

# The GPU path: the torch MLP of bench/torch_mlp.py (512 values in and out per request).
GPU_CASES = (
    Case("gpu_c1", "torch MLP 512-2048-512, concurrency 1", "torch MLP\nc=1", "torch_mlp", 512, 1, 1.00),
    Case("gpu_c32", "torch MLP 512-2048-512, concurrency 32", "torch MLP\nc=32", "torch_mlp", 512, 32, 1.00),
)  # fmt: skip
QUICK_CASE = "small_c1"


# -- continuous batching (issue 42) ---------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class StreamCase:
    """A load of streams for the continuous-batching cases (bench/continuous.py), not perf_analyzer's.

    Every stream asks for `steps` pieces; a step over n streams costs ``base_ms + per_stream_us *
    n`` (bench/step_model.py). A load case runs `concurrency` slots in a closed loop, started at
    uniform offsets over one stream's duration; the scenario (`arrivals_ms` set) starts one stream
    at each offset instead. `max_streams` is what one step may hold (``max_batch_size``).
    """

    key: str
    title: str
    label: str  # short, for the plot
    concurrency: int
    steps: int = 64
    base_ms: float = 2.0
    per_stream_us: float = 20.0
    max_streams: int = 64
    arrivals_ms: Tuple[float, ...] = ()

    @property
    def scenario(self) -> bool:
        return bool(self.arrivals_ms)

    def step_s(self, streams: Optional[int] = None) -> float:
        """The nominal step over `streams` streams (default: the case's concurrency)."""
        return self.base_ms / 1000 + self.per_stream_us / 1e6 * (self.concurrency if streams is None else streams)

    def ideal_pieces_per_s(self) -> float:
        """Every slot's stream getting a piece every step: concurrency / step."""
        return self.concurrency / self.step_s()


STREAM_CASES = (
    StreamCase("cb_c1", "64-step streams, 1 at a time", "c=1", 1),
    StreamCase("cb_c8", "64-step streams, 8 at a time", "c=8", 8),
    StreamCase("cb_c32", "64-step streams, 32 at a time", "c=32", 32),
    StreamCase("cb_c64", "64-step streams, 64 at a time", "c=64", 64),
    StreamCase("cb_scenario", "scenario: 8 streams 40 ms apart, 32 steps of 10 ms", "scenario", 8, steps=32,
               base_ms=10.0, per_stream_us=0.0, max_streams=8, arrivals_ms=tuple(40.0 * k for k in range(8))),
)  # fmt: skip
STREAM_GROUP = "continuous"
"""`--cases continuous` selects every case of STREAM_CASES."""

# Who serves the streams: (way, protocol). "whole" is today's @batch generator, "continuous" a
# @continuous step function, "litserve" LitServe 0.2.19's ContinuousBatchingLoop (HTTP only).
STREAM_SYSTEMS = (("whole", "grpc"), ("continuous", "grpc"), ("whole", "http"), ("continuous", "http"),
                  ("litserve", "http"))

# The targets of issue 42 (docs/performance.md says what each means).
CB_IDEAL_CONCURRENCY = 32
CB_MIN_OF_IDEAL = 0.85  # continuous pieces/s at 32 streams, against the ideal
CB_MIN_OVER_WHOLE = 1.5  # continuous pieces/s at 32 streams, against the whole-batch generator
CB_FIRST_PIECE_STEPS, CB_FIRST_PIECE_EXTRA_MS = 2, 1.0  # time to first piece p50 <= 2 steps + 1 ms
CB_MIN_OVER_LITSERVE = 1.0  # continuous pieces/s against LitServe, every concurrency
CB_SCENARIO_DONE_STEPS = 34  # the scenario: every stream done within 34 steps of its arrival
