"""The multiplexing case of `make bench` (issue 45): many variants of one model under one budget.

100 variants of a small model (bench/serve_multiplex.py: a LoRA-style pair per variant, merged
into a base weight when loaded, from files this module writes), requests drawn from a Zipf law
over the variants (s = 1.1; variant ``v000`` is the most requested), concurrency 16, served three
ways by one server:

* ``mux``: ``@multiplexed(load, max_loaded=8)``, two process instances, pytriton's backend
  sending each batch to the instance that holds its variants;
* ``lru``: the same computation with its own ``functools.lru_cache(maxsize=8)`` in one instance
  (what a user writes without ``@multiplexed``);
* ``top8``: one bound model per variant for the 8 most requested; the requests for the other 92
  cannot be served this way, so it gets the same trace without them.

Each round sends a warm-up, then the measured requests, to each in turn (the order flips every
round). Figures per round: throughput, client latency p50/p99, the server's CPU time per request (its processes
together: on a shared machine the throughput follows the CPU the server's session is given, the
CPU per request what it does with it), the hit rate (1 - loads /
requests, the loads read from ``/metrics``), the loads and their mean time (both measured by the
loader itself, the same for ``mux`` and ``lru``), and, for the same
trace, the hit rate an ideal LRU cache would have with 8 variants (one instance's budget) and
with 16 (both instances' budgets together). Targets: ``mux``'s hit rate within 5 points of the
ideal LRU of its whole budget (16), and its throughput at least 1.3x ``lru``'s.

Run on its own: ``.venv/bin/python bench/multiplex.py [--rounds 3] [--requests 3000]``; `make
bench` runs it after the perf_analyzer cases (bench/run.py) and reports it with them.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import pathlib
import signal
import statistics
import sys
import tempfile
import time
import urllib.request
from typing import IO, Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
from children import Child
from perfanalyzer import BenchError
from servers import BENCH_DIR, Server, _remove_named

VARIANTS = 100
ZIPF_S = 1.1
MAX_LOADED = 8
INSTANCES = 2
TOP = 8
CONCURRENCY = 16
DIM = 1024
RANK = 16
WARMUP_REQUESTS = 600
HIT_RATE_POINTS = 0.05
THROUGHPUT_TARGET = 1.3
CONFIGS = ("mux", "lru", "top8")


def say(message: str) -> None:
    """Progress on stderr, as bench/report.py's (which imports this module, so it cannot be imported here)."""
    print(message, file=sys.stderr, flush=True)


def variant_name(rank: int) -> str:
    return f"v{rank:03d}"


def write_variants(folder: pathlib.Path, seed: int = 45) -> None:
    """The base weight and each variant's low-rank pair, as .npy/.npz files in `folder`."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    np.save(folder / "base.npy", (rng.standard_normal((DIM, DIM)) / np.sqrt(DIM)).astype(np.float32))
    for rank in range(VARIANTS):
        a = (rng.standard_normal((DIM, RANK)) * 0.01).astype(np.float32)
        b = (rng.standard_normal((RANK, DIM)) * 0.01).astype(np.float32)
        np.savez(folder / f"{variant_name(rank)}.npz", a=a, b=b)


def zipf_trace(count: int, seed: int) -> List[int]:
    """`count` variant ranks drawn from the Zipf law of exponent `ZIPF_S` over `VARIANTS` ranks."""
    ranks = np.arange(1, VARIANTS + 1, dtype=np.float64)
    weights = ranks ** -ZIPF_S
    return [int(rank) for rank in np.random.default_rng(seed).choice(VARIANTS, size=count, p=weights / weights.sum())]


def ideal_lru_hit_rate(trace: Sequence[int], capacity: int, measured_from: int) -> float:
    """The hit rate of one LRU cache of `capacity` variants over `trace`, counted from
    `measured_from` on (the requests before warm it)."""
    held: collections.OrderedDict[int, None] = collections.OrderedDict()
    hits = 0
    for index, rank in enumerate(trace):
        if rank in held:
            held.move_to_end(rank)
            hits += index >= measured_from
        else:
            held[rank] = None
            if len(held) > capacity:
                held.popitem(last=False)
    return hits / max(1, len(trace) - measured_from)


class MultiplexServer(Server):
    """bench/serve_multiplex.py in its own process."""

    name = "multiplex"

    def __init__(self, log_dir: pathlib.Path, variants: pathlib.Path) -> None:
        super().__init__(log_dir)
        self.models = ["mux", "lru", *(f"top_{rank}" for rank in range(TOP))]
        self.variants = variants

    @property
    def marker(self) -> Optional[str]:
        return f"pytriton-{self.child.pid}-" if self.child is not None else None

    def _launch(self, log: IO[str]) -> Child:
        argv = [sys.executable, str(BENCH_DIR / "serve_multiplex.py"), "--variants", str(self.variants),
                "--http-port", str(self.http_port), "--grpc-port", str(self.grpc_port),
                "--metrics-port", str(self.metrics_port)]
        env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
        return Child(argv, env, log)

    def stop(self) -> None:
        if self.child is None:
            return
        try:
            self.child.stop(polite=signal.SIGTERM, timeout_s=45)
        finally:
            _remove_named(f"pytriton-{self.child.pid}-")

    def metric(self, name: str, model: str) -> float:
        """The sum of a family's series of `model` on Triton's /metrics (all instances)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=10) as answer:
            text = answer.read().decode()
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if line.startswith(name + "{") and f'model="{model}"' in line)


async def _drive(server: MultiplexServer, asks: Sequence[Tuple[str, Optional[str]]]) -> Tuple[float, List[float]]:
    """Send `asks` (model, variant or None) with `CONCURRENCY` requests in flight, in order;
    the seconds it took and each request's latency (seconds)."""
    import tritonclient.grpc.aio as grpcclient

    client = grpcclient.InferenceServerClient(server.url("grpc"))
    data = np.random.default_rng(0).standard_normal((1, DIM)).astype(np.float32)
    position = 0
    latencies: List[float] = []

    async def worker() -> None:
        nonlocal position
        while position < len(asks):
            model, variant = asks[position]
            position += 1
            request = grpcclient.InferInput("x", [1, DIM], "FP32")
            request.set_data_from_numpy(data)
            started = time.perf_counter()
            await client.infer(model, [request], parameters={"variant": variant} if variant else None)
            latencies.append(time.perf_counter() - started)

    try:
        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
        return time.perf_counter() - started, latencies
    finally:
        await client.close()


def _asks(config: str, ranks: Sequence[int]) -> List[Tuple[str, Optional[str]]]:
    if config == "top8":
        return [(f"top_{rank}", None) for rank in ranks if rank < TOP]
    return [(config, variant_name(rank)) for rank in ranks]


def measure(server: MultiplexServer, config: str, trace: Sequence[int], requests: int) -> Dict[str, Any]:
    """One configuration over `trace` (the warm-up, then `requests` measured)."""
    asyncio.run(_drive(server, _asks(config, trace[:WARMUP_REQUESTS])))
    model = "lru" if config == "lru" else "mux"
    time.sleep(2.5)  # the backend brings the workers' metrics to /metrics about once a second
    loads_before = server.metric("bench_variant_loads_total", model)
    seconds_before = server.metric("bench_variant_load_seconds_sum", model)
    measured = _asks(config, trace[WARMUP_REQUESTS:WARMUP_REQUESTS + requests])
    cpu_before = server.cpu_seconds()
    wall_s, latencies = asyncio.run(_drive(server, measured))
    cpu_s = server.cpu_seconds() - cpu_before
    time.sleep(2.5)
    figures: Dict[str, Any] = {
        "requests": len(measured),
        "throughput": round(len(measured) / wall_s, 1),
        "latency_p50_ms": round(1000 * float(np.percentile(latencies, 50)), 2),
        "latency_p99_ms": round(1000 * float(np.percentile(latencies, 99)), 2),
        "wall_s": round(wall_s, 2),
        "server_cpu_ms_per_request": round(1000 * cpu_s / len(measured), 3),
    }
    if config != "top8":
        loads = server.metric("bench_variant_loads_total", model) - loads_before
        figures["loads"] = int(loads)
        figures["hit_rate"] = round(1 - loads / len(measured), 4)
        load_s = server.metric("bench_variant_load_seconds_sum", model) - seconds_before
        figures["load_mean_ms"] = round(1000 * load_s / loads, 2) if loads else None
    return figures


def run(rounds: int, requests: int, log_dir: pathlib.Path) -> Dict[str, Any]:
    """Every round of the case; the figures of each round and their medians, with the targets."""
    results: Dict[str, Any] = {"variants": VARIANTS, "zipf_s": ZIPF_S, "max_loaded": MAX_LOADED,
                               "instances": INSTANCES, "concurrency": CONCURRENCY, "dim": DIM, "rank": RANK,
                               "warmup_requests": WARMUP_REQUESTS, "requests": requests, "rounds": []}
    with tempfile.TemporaryDirectory(prefix="pytriton-bench-variants-") as folder:
        variants = pathlib.Path(folder)
        write_variants(variants)
        server = MultiplexServer(log_dir, variants)
        try:
            say("bench: multiplex: starting its server")
            server.start()
            for index in range(rounds):
                trace = zipf_trace(WARMUP_REQUESTS + requests, seed=1000 + index)
                row: Dict[str, Any] = {
                    "ideal_lru_8": round(ideal_lru_hit_rate(trace, MAX_LOADED, WARMUP_REQUESTS), 4),
                    "ideal_lru_16": round(ideal_lru_hit_rate(trace, MAX_LOADED * INSTANCES, WARMUP_REQUESTS), 4),
                    "order": list(CONFIGS) if index % 2 == 0 else list(reversed(CONFIGS)),
                    "loadavg": list(os.getloadavg()),
                }
                for config in row["order"]:
                    say(f"bench: multiplex round {index + 1}/{rounds}: {config}")
                    row[config] = measure(server, config, trace, requests)
                row["throughput_ratio"] = round(row["mux"]["throughput"] / row["lru"]["throughput"], 3)
                row["cpu_ratio"] = round(row["lru"]["server_cpu_ms_per_request"]
                                         / row["mux"]["server_cpu_ms_per_request"], 3)
                row["hit_rate_gap"] = round(row["ideal_lru_8"] - row["mux"]["hit_rate"], 4)
                row["hit_rate_gap_16"] = round(row["ideal_lru_16"] - row["mux"]["hit_rate"], 4)
                results["rounds"].append(row)
                say(f"bench: multiplex round {index + 1}: {json.dumps(row)}")
        finally:
            server.stop()
    rows = results["rounds"]
    results["throughput_ratio"] = statistics.median(row["throughput_ratio"] for row in rows)
    results["cpu_ratio"] = statistics.median(row["cpu_ratio"] for row in rows)
    results["hit_rate_gap"] = statistics.median(row["hit_rate_gap"] for row in rows)
    results["hit_rate_gap_16"] = statistics.median(row["hit_rate_gap_16"] for row in rows)
    results["met"] = {"hit_rate": results["hit_rate_gap"] <= HIT_RATE_POINTS,
                      "throughput": results["throughput_ratio"] >= THROUGHPUT_TARGET}
    return results


def text_lines(results: Dict[str, Any]) -> List[str]:
    """The case as text: one line per round and configuration, then the verdict."""
    lines = [f"multiplexing: {results['variants']} variants, Zipf s={results['zipf_s']}, max_loaded "
             f"{results['max_loaded']}, {results['instances']} process instances, concurrency "
             f"{results['concurrency']}, {results['requests']} requests per round"]
    for index, row in enumerate(results["rounds"], start=1):
        lines.append(f"  round {index} (ideal LRU hit rate: 8 variants {row['ideal_lru_8']:.3f}, 16 variants "
                     f"{row['ideal_lru_16']:.3f}; load {row['loadavg'][0]:.1f})")
        for config in CONFIGS:
            f = row[config]
            hit = f" hit rate {f['hit_rate']:.3f} ({f['loads']} loads" if "hit_rate" in f else ""
            mean = f", mean {f['load_mean_ms']} ms" if f.get("load_mean_ms") else ""
            hit += f"{mean})" if hit else ""
            lines.append(f"    {config:5s} {f['throughput']:8.1f} infer/s  p50 {f['latency_p50_ms']:7.2f} ms  "
                         f"p99 {f['latency_p99_ms']:7.2f} ms  server CPU {f['server_cpu_ms_per_request']:.2f} "
                         f"ms/request{hit}")
    lines.append(f"  {verdict(results)}")
    return lines


def verdict(results: Dict[str, Any]) -> str:
    """The medians against the targets, in one sentence."""
    met = results["met"]
    throughput = "met" if met["throughput"] else "NOT met"
    hit_rate = "met" if met["hit_rate"] else "NOT met"
    return (f"mux/lru throughput (median of rounds) {results['throughput_ratio']:.2f}x (target >= "
            f"{THROUGHPUT_TARGET}x: {throughput}); mux's hit rate {-results['hit_rate_gap'] * 100:+.1f} points "
            f"from the ideal LRU of max_loaded={MAX_LOADED} (target >= -{HIT_RATE_POINTS * 100:.0f}: {hit_rate}), "
            f"{-results['hit_rate_gap_16'] * 100:+.1f} points from the ideal LRU of both instances' "
            f"{MAX_LOADED * INSTANCES}; the server's CPU per request, lru/mux (median) {results['cpu_ratio']:.2f}x")


def markdown(results: Dict[str, Any]) -> str:
    """The case as a markdown table, one row per round and configuration, then the verdict."""
    lines = [f"Multiplexing (issue 45): {results['variants']} variants (a rank-{results['rank']} pair merged into a "
             f"{results['dim']}x{results['dim']} weight on load), Zipf s={results['zipf_s']}, gRPC, concurrency "
             f"{results['concurrency']}, {results['requests']} measured requests per configuration and round after "
             f"{results['warmup_requests']} to warm up. `mux`: `@multiplexed(max_loaded={results['max_loaded']})`, "
             f"{results['instances']} process instances; `lru`: the same computation with `functools.lru_cache(8)` "
             "in one instance; `top8`: one bound model per variant for the 8 most requested (their requests only).",
             "",
             "| round | ideal LRU 8 / 16 | config | infer/s | p50 ms | p99 ms | server CPU ms/request | hit rate | "
             "loads (mean ms) |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for index, row in enumerate(results["rounds"], start=1):
        for config in CONFIGS:
            f = row[config]
            mean = f" ({f['load_mean_ms']})" if f.get("load_mean_ms") else ""
            loads = f"{f['loads']}{mean}" if "loads" in f else "-"
            lines.append(f"| {index} | {row['ideal_lru_8']:.3f} / {row['ideal_lru_16']:.3f} | {config} | "
                         f"{f['throughput']:.0f} | {f['latency_p50_ms']:.1f} | {f['latency_p99_ms']:.1f} | "
                         f"{f['server_cpu_ms_per_request']:.2f} | {f.get('hit_rate', '-')} | {loads} |")
    lines += ["", verdict(results) + "."]
    return "\n".join(lines)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=3000, help="measured requests per configuration and round")
    parser.add_argument("--out", type=pathlib.Path, default=BENCH_DIR / "out" / "multiplex.json")
    args = parser.parse_args(argv)
    try:
        results = run(args.rounds, args.requests, args.out.parent / "run-multiplex" / "logs")
    except BenchError as exc:
        say(f"bench: FAILED: {exc}")
        return 1
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1))
    print("\n".join(text_lines(results)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
