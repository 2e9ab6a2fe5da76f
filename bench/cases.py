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
