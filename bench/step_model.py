"""The step of the continuous-batching cases: what one generation step over n streams costs.

Shared, word for word, by every server of those cases (pytriton's `serve_streams.py` and
LitServe's `serve_litserve.py`, which runs in an environment of its own), so each serves the same
step. Standard library only, for that reason.

A step over n streams costs ``base_s + per_stream_s * n`` of wall time, spent in ``time.sleep``:
the interpreter releases the GIL and the core meanwhile, as while a GPU runs a batched forward
pass. So the step's cost is fixed and every core stays for the rest (the server's own work, the
load generator), and what the cases measure is how much of the step time each way of serving
turns into pieces. (``time.sleep`` wakes a little late, 50-100 µs on the machine measured;
`bench/continuous.py` measures that overshoot and reports it beside the figures.)
"""

from __future__ import annotations

import time


def step_seconds(streams: int, base_s: float, per_stream_s: float) -> float:
    """The nominal cost of one step over `streams` streams."""
    return base_s + per_stream_s * streams


def run_step(streams: int, base_s: float, per_stream_s: float) -> None:
    """Spend one step's cost (see the module docstring: a sleep, the GIL released)."""
    time.sleep(step_seconds(streams, base_s, per_stream_s))
