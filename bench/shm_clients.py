"""The clients with and without shared memory, on the same server: requests per second.

Not part of `make test` or `make bench`; run it on its own:

    .venv/bin/python bench/shm_clients.py                  # every case: about 2 minutes
    .venv/bin/python bench/shm_clients.py --seconds 3 --protocols grpc --clients asyncio

It starts one pytriton server in a process of its own (``--serve``, this script again) with two
identity models whose tensor size the configuration fixes (1 MiB and 16 MiB of float32 per
request, so inputs and outputs both go through shared memory), then, for each protocol, client
and case, keeps the case's number of requests in flight for ``--seconds`` with
``shared_memory=False`` and then with ``shared_memory=True``, the same client otherwise (the
futures client: one ``ModelClient`` per worker thread; the asyncio client: one client, many
tasks). Every answer is checked. It prints a Markdown table: requests/s of each, and the ratio.

The machine the figures in docs/performance.md come from has 2 cores for the server and the
load generator together, so compare the ratios, measured in the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import secrets
import signal
import socket
import subprocess
import sys
import time
from concurrent.futures import FIRST_COMPLETED, wait
from typing import Dict, List, Tuple

import numpy as np

MIB = 1 << 20
CASES: Dict[str, Tuple[int, int]] = {"1 MiB, concurrency 8": (MIB, 8), "16 MiB, concurrency 4": (16 * MIB, 4)}
"""Case -> (bytes per request, requests in flight)."""
TOKEN_ENV = "PYTRITON_BENCH_SHM_TOKEN"


def model_name(nbytes: int) -> str:
    return f"identity_{nbytes // MIB}mib"


def serve(http_port: int, grpc_port: int, metrics_port: int) -> None:
    """The server: identity models of fixed size, the access token from the environment."""
    from pytriton.model_config import ModelConfig, Tensor
    from pytriton.triton import Triton, TritonConfig, TritonSecurityConfig

    config = TritonConfig(http_port=http_port, grpc_port=grpc_port, metrics_port=metrics_port)
    with Triton(config=config, security_config=TritonSecurityConfig(access_token=os.environ[TOKEN_ENV])) as triton:
        for nbytes, _ in CASES.values():
            triton.bind(
                model_name(nbytes),
                lambda requests: [{"y": request["x"]} for request in requests],
                inputs=[Tensor(name="x", dtype=np.float32, shape=(nbytes // 4,))],
                outputs=[Tensor(name="y", dtype=np.float32, shape=(nbytes // 4,))],
                config=ModelConfig(batching=False),
            )
        triton.serve()


def run_futures(url: str, token: str, nbytes: int, in_flight: int, seconds: float, shared: bool) -> float:
    from pytriton.client import FuturesModelClient

    data = np.random.default_rng(0).random(nbytes // 4, dtype=np.float32)
    with FuturesModelClient(url, model_name(nbytes), access_token=token, shared_memory=shared,
                            max_workers=in_flight) as client:
        for future in [client.infer_sample(data) for _ in range(2 * in_flight)]:  # warm-up: every worker's region
            future.result()
        done = 0
        pending = {client.infer_sample(data) for _ in range(in_flight)}
        start = time.perf_counter()
        while time.perf_counter() - start < seconds:
            finished, pending = wait(pending, return_when=FIRST_COMPLETED)
            for future in finished:
                if not np.array_equal(future.result()["y"], data):
                    raise AssertionError("a wrong answer")
                done += 1
                pending.add(client.infer_sample(data))
        elapsed = time.perf_counter() - start
        for future in pending:
            future.result()
    return done / elapsed


def run_asyncio(url: str, token: str, nbytes: int, in_flight: int, seconds: float, shared: bool) -> float:
    from pytriton.client import AsyncioModelClient

    data = np.random.default_rng(0).random(nbytes // 4, dtype=np.float32)

    async def main() -> float:
        async with AsyncioModelClient(url, model_name(nbytes), access_token=token, shared_memory=shared) as client:
            await asyncio.gather(*(client.infer_sample(data) for _ in range(in_flight)))  # warm-up
            done = 0
            start = time.perf_counter()

            async def loop() -> None:
                nonlocal done
                while time.perf_counter() - start < seconds:
                    outputs = await client.infer_sample(data)
                    if not np.array_equal(outputs["y"], data):
                        raise AssertionError("a wrong answer")
                    done += 1

            await asyncio.gather(*(loop() for _ in range(in_flight)))
            return done / (time.perf_counter() - start)

    return asyncio.run(main())


RUNNERS = {"futures": run_futures, "asyncio": run_asyncio}


def free_ports(count: int) -> List[int]:
    sockets = [socket.socket() for _ in range(count)]
    for probe in sockets:
        probe.bind(("127.0.0.1", 0))
    ports = [probe.getsockname()[1] for probe in sockets]
    for probe in sockets:
        probe.close()
    return ports


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="measuring time of each run")
    parser.add_argument("--protocols", nargs="+", default=["http", "grpc"], choices=["http", "grpc"])
    parser.add_argument("--clients", nargs="+", default=sorted(RUNNERS), choices=sorted(RUNNERS))
    parser.add_argument("--serve", nargs=3, type=int, metavar=("HTTP", "GRPC", "METRICS"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        serve(*args.serve)
        return 0

    from pytriton.client import ModelClient

    token = secrets.token_urlsafe(16)
    http_port, grpc_port, metrics_port = free_ports(3)
    server = subprocess.Popen([sys.executable, __file__, "--serve", str(http_port), str(grpc_port), str(metrics_port)],
                              env={**os.environ, TOKEN_ENV: token}, stdout=subprocess.DEVNULL,
                              start_new_session=True)
    try:
        for nbytes, _ in CASES.values():
            with ModelClient(f"http://127.0.0.1:{http_port}", model_name(nbytes), init_timeout_s=120) as client:
                client.wait_for_model()
        print(f"Measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on {os.cpu_count()} cores, "
              f"Python {platform.python_version()}, {args.seconds:g} s per run; server and clients on one host.\n")
        print("| case | protocol | client | socket req/s | shared memory req/s | ratio |")
        print("| --- | --- | --- | --- | --- | --- |")
        for case, (nbytes, in_flight) in CASES.items():
            for protocol in args.protocols:
                url = f"http://127.0.0.1:{http_port}" if protocol == "http" else f"grpc://127.0.0.1:{grpc_port}"
                for kind in args.clients:
                    plain = RUNNERS[kind](url, token, nbytes, in_flight, args.seconds, False)
                    shared = RUNNERS[kind](url, token, nbytes, in_flight, args.seconds, True)
                    print(f"| {case} | {protocol} | {kind} | {plain:,.1f} | {shared:,.1f} | {shared / plain:.2f} |",
                          flush=True)
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
