"""The peer of the continuous-batching cases: LitServe 0.2.19's ``ContinuousBatchingLoop`` running the same step.

Run with the Python of LitServe's own environment (bench/litserve_env.py builds it in the bench's
cache; LitServe is never a dependency of pytriton), as its own process:
``litserve-venv/bin/python bench/serve_litserve.py --port 8000 [--max-streams 64 --base-ms 2
--per-stream-us 20]``. ``POST /predict`` with ``{"n": 64}`` streams 64 lines ``{"token": k}``,
k = 0..63, one per step, and the response ends.

What LitServe 0.2.19's loop asks of the API, read from its source (``litserve/loops/
continuous_batching_loop.py``), and why the shape its messages document is not used:

* ``ContinuousBatchingLoop.run`` steps while ``lit_api.has_active_requests()`` is true, calling
  ``lit_api.step(prev_outputs)`` on a worker thread (``asyncio.to_thread``); each step returns
  ``Output(uid, output, status)`` items, whose outputs go through ``encode_response`` and
  ``format_encoded_response`` (a dict becomes a JSON line) to the requester of ``uid``; an
  item with status ``FINISH_STREAMING`` ends that stream (its own output is not sent).
* Its background task (``schedule_task`` / ``prefill``) takes requests off the queue and,
  while ``lit_api.has_capacity()``, hands them to ``lit_api.add_request(uid, request)`` on the
  event loop's thread (so the state here is locked: a step runs meanwhile on another thread);
  the rest wait in its pending list.
* ``LitAPI.has_active_requests`` and ``has_capacity`` raise ``NotImplementedError`` unless the
  API defines them. The documented shape (``predict(inputs, generated)`` + ``has_finished``,
  the "default step method" of ``DefaultContinuousBatchingLoop``) defines neither: with
  ``ContinuousBatchingLoop`` the worker dies of ``NotImplementedError: has_active_requests``;
  with that method added, the background task dies of ``NotImplementedError: has_capacity`` and
  every stream hangs; ``DefaultContinuousBatchingLoop`` with ``has_active_requests`` dies in its
  background task of ``TypeError: DefaultContinuousBatchingLoop.add_request() takes 5
  positional arguments but 6 were given`` (its override lacks the ``transport`` argument
  ``prefill`` passes). docs/performance.md records the tracebacks.

So this API implements the four methods the loop calls itself, with the step of
bench/step_model.py. Note that LitServe's worker keeps a core busy while no stream is active
(``_BaseLoop.__call__`` calls ``run`` back to back, ``asyncio.sleep(0)`` in between): the
harness runs this server only while it measures it.
"""

from __future__ import annotations

import argparse
import threading
from typing import Any, Dict, List

import litserve as ls
from litserve.loops.continuous_batching_loop import ContinuousBatchingLoop, Output
from litserve.utils import LitAPIStatus
from step_model import run_step


class StepAPI(ls.LitAPI):
    """The step of bench/step_model.py over the streams active now, as LitServe's loop drives it."""

    def __init__(self, max_streams: int, base_s: float, per_stream_s: float) -> None:
        super().__init__(max_batch_size=max_streams, stream=True, loop=ContinuousBatchingLoop())
        self.base_s = base_s
        self.per_stream_s = per_stream_s

    def setup(self, device: str) -> None:
        self.lock = threading.Lock()
        self.streams: Dict[str, List[int]] = {}  # uid -> [steps taken, steps wanted]

    def add_request(self, uid: str, request: Dict[str, Any]) -> None:
        with self.lock:
            self.streams[uid] = [0, int(request["n"])]

    def has_capacity(self) -> bool:
        with self.lock:
            return len(self.streams) < self.max_batch_size

    def has_active_requests(self) -> bool:
        with self.lock:
            return bool(self.streams)

    def step(self, prev_outputs: Any) -> List[Output]:
        with self.lock:
            streams = list(self.streams.items())
        run_step(len(streams), self.base_s, self.per_stream_s)
        outputs = []
        ended = []
        for uid, progress in streams:
            outputs.append(Output(uid, {"token": progress[0]}, LitAPIStatus.OK))
            progress[0] += 1
            if progress[0] >= progress[1]:
                outputs.append(Output(uid, "", LitAPIStatus.FINISH_STREAMING))
                ended.append(uid)
        with self.lock:
            for uid in ended:
                del self.streams[uid]
        return outputs

    def encode_response(self, output: Any) -> Any:
        return output


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--max-streams", type=int, default=64)
    parser.add_argument("--base-ms", type=float, default=2.0)
    parser.add_argument("--per-stream-us", type=float, default=20.0)
    args = parser.parse_args()
    api = StepAPI(args.max_streams, args.base_ms / 1000, args.per_stream_us / 1e6)
    server = ls.LitServer(api, accelerator="cpu", devices=1, workers_per_device=1)
    server.run(host="127.0.0.1", port=args.port, generate_client_file=False, log_level="warning")


if __name__ == "__main__":
    main()
