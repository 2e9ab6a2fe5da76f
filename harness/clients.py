"""Clients: create, use and close every client class many times; nothing may stay behind.

For each of ``ModelClient``, ``FuturesModelClient``, ``AsyncioModelClient`` (on ``echo``) and
``DecoupledModelClient``, ``AsyncioDecoupledModelClient`` (on the decoupled ``stream``), over
HTTP and over gRPC, the harness runs `--cycles` cycles of: create the client, send one request
carrying its own id (and check the answer), close the client (an asyncio client inside its
own ``asyncio.run``, as a short script would). The server is ``harness/serve.py`` in a child
process, so that the fds and threads counted are the clients' alone.

Criteria (exit status 1 when one fails): every answer is right, and after each class's cycles
the process's open fds and threads are back at the count before them (waiting up to
`--settle-s` for threads that end lazily). The counts before the first class are taken after
one warm-up cycle of every class, which starts what lives as long as the process (gRPC's own
threads, imported modules).

Usage: ``python harness/clients.py [--cycles 200]``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import sys
import time
from typing import Any, Callable, Dict, List, Optional, Sequence

import numpy as np
from common import UserProcess, conclude, log, process_counts, settle, table

from pytriton.client import (
    AsyncioDecoupledModelClient,
    AsyncioModelClient,
    DecoupledModelClient,
    FuturesModelClient,
    ModelClient,
)

STREAM_STEPS = 3  # harness/serve.py's stream model
PROTOCOLS = ("http", "grpc")
TIMEOUTS = {"init_timeout_s": 60.0, "inference_timeout_s": 60.0}
_leaked: List[Any] = []


def _echo_inputs(request_id: int) -> Dict[str, np.ndarray]:
    return {"id": np.array([request_id], np.int64), "payload": np.full(16, request_id % 256, np.uint8)}


def _echo_ok(result: Any, request_id: int) -> bool:
    return int(result["id"][0]) == request_id and np.array_equal(result["payload"], _echo_inputs(request_id)["payload"])


def _stream_ok(partials: List[Any], request_id: int) -> bool:
    got = [(int(p["rid"].reshape(-1)[0]), int(p["step"].reshape(-1)[0])) for p in partials]
    return got == [(request_id, step) for step in range(STREAM_STEPS)]


def cycle_model_client(url: str, request_id: int) -> bool:
    with ModelClient(url, "echo", **TIMEOUTS) as client:
        return _echo_ok(client.infer_sample(**_echo_inputs(request_id)), request_id)


def cycle_futures_client(url: str, request_id: int) -> bool:
    with FuturesModelClient(url, "echo", max_workers=2, **TIMEOUTS) as client:
        return _echo_ok(client.infer_sample(**_echo_inputs(request_id)).result(), request_id)


def cycle_asyncio_client(url: str, request_id: int) -> bool:
    async def use() -> bool:
        async with AsyncioModelClient(url, "echo", **TIMEOUTS) as client:
            return _echo_ok(await client.infer_sample(**_echo_inputs(request_id)), request_id)

    return asyncio.run(use())


def cycle_decoupled_client(url: str, request_id: int) -> bool:
    with DecoupledModelClient(url, "stream", **TIMEOUTS) as client:
        return _stream_ok(list(client.infer_sample(rid=np.array([request_id], np.int64))), request_id)


def cycle_asyncio_decoupled_client(url: str, request_id: int) -> bool:
    async def use() -> bool:
        async with AsyncioDecoupledModelClient(url, "stream", **TIMEOUTS) as client:
            partials = [p async for p in client.infer_sample(rid=np.array([request_id], np.int64))]
            return _stream_ok(partials, request_id)

    return asyncio.run(use())


CYCLES: Dict[str, Callable[[str, int], bool]] = {
    "ModelClient": cycle_model_client,
    "FuturesModelClient": cycle_futures_client,
    "AsyncioModelClient": cycle_asyncio_client,
    "DecoupledModelClient": cycle_decoupled_client,
    "AsyncioDecoupledModelClient": cycle_asyncio_decoupled_client,
}


def counts() -> Dict[str, float]:
    gc.collect()  # a closed client that only awaits collection is not a leak
    return dict(process_counts(os.getpid()))


def steady(timeout_s: float) -> Dict[str, float]:
    """Counts once two readings 0.5 s apart agree: threads left by the previous class may still be ending."""
    previous: List[Dict[str, float]] = [counts()]

    def same(value: Dict[str, float]) -> bool:
        agree = value == previous[0]
        previous[0] = value
        return agree

    return settle(counts, same, timeout_s)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=200, help="create/use/close cycles per class and protocol")
    parser.add_argument("--settle-s", type=float, default=10.0, help="longest wait for the counts to come back")
    parser.add_argument("--json", default="", help="write the figures to this file")
    parser.add_argument("--fault", default="", help="'fd-leak': leave one file open per cycle (self-check)")
    args = parser.parse_args(argv)

    failures: List[str] = []
    rows, figures = [], {"cycles": args.cycles, "runs": []}
    request_id = 0
    with UserProcess() as user:
        user.wait_ready()
        for name, cycle in CYCLES.items():  # warm-up: one cycle of each
            for protocol in PROTOCOLS:
                request_id += 1
                if not cycle(user.url(protocol), request_id):
                    failures.append(f"warm-up {name} {protocol}: wrong answer")
        first = settle(counts, lambda _: False, 1.0)
        log(f"baseline after warm-up: {first}")
        for name, cycle in CYCLES.items():
            for protocol in PROTOCOLS:
                before = steady(args.settle_s)
                wrong = 0
                start = time.monotonic()
                for _ in range(args.cycles):
                    request_id += 1
                    if args.fault == "fd-leak":
                        _leaked.append(open(os.devnull))
                    if not cycle(user.url(protocol), request_id):
                        wrong += 1
                seconds = time.monotonic() - start
                after = settle(counts, lambda value, b=before: all(value[k] <= b[k] for k in b), args.settle_s)
                ok = not wrong and all(after[k] <= before[k] for k in before)
                if not ok:
                    failures.append(f"{name} {protocol}: {wrong} wrong answers; fds {before['fds']} -> "
                                    f"{after['fds']}, threads {before['threads']} -> {after['threads']}")
                log(f"{name} {protocol}: {seconds:.1f} s, {after}")
                rows.append([name, protocol, args.cycles, f"{seconds:.1f}", f"{1000 * seconds / args.cycles:.0f}",
                             before["fds"], after["fds"], before["threads"], after["threads"], wrong,
                             "ok" if ok else "FAIL"])  # fmt: skip
                figures["runs"].append({"client": name, "protocol": protocol, "seconds": seconds, "wrong": wrong,
                                        "before": before, "after": after, "ok": ok})  # fmt: skip
        last = counts()
    final = settle(counts, lambda value: all(value[k] <= first[k] for k in first), args.settle_s)
    if any(final[k] > first[k] for k in first):
        failures.append(f"after every class and the server's stop: {final} vs {first} after the warm-up")
    figures.update(baseline=first, final=final, failures=failures)
    print(table(["client", "protocol", "cycles", "seconds", "ms/cycle", "fds before", "fds after",
                 "threads before", "threads after", "wrong", "verdict"], rows))  # fmt: skip
    print(f"\nprocess after the warm-up: {first}; after all cycles: {last}; after the server stopped: {final}")
    for failure in failures:
        print("  " + failure)
    print("PASS" if not failures else "FAIL")
    return conclude(figures, failures, args.json)


if __name__ == "__main__":
    sys.exit(main())
