"""How far from the ceiling: Triton's floor, the plain Python backend and pytriton on one case.

`make bench` compares pytriton with a plain Python-backend model. Neither tells how much of the
machine Triton itself takes: its HTTP and gRPC front ends, its scheduler and the load generator
cost the same whatever serves the model, and on a small machine they take most of it. This tool
adds a third server, the *floor*: the same identity model served by a backend of a few lines of
C (bench/floor/identity.c, compiled here with the system C compiler) inside tritonserver, with no
Python and no other process. Its throughput is the most any backend can reach on this machine
for that case; ``floor / reference`` says how much room there was above the plain backend, and
``ours / floor`` how much of it pytriton takes.

For each case and protocol, perf_analyzer loads the three servers in turn, ``--rounds`` times,
the order rotating every round; each server's median throughput counts, and the ratios are
those of the medians. The table goes to stdout
and the figures to a JSON file. Every process started is stopped at the end.

Usage: ``python bench/floor.py [--cases small_c64 ...] [--protocols http grpc] [--rounds N] [--quick]``.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable, Dict, List, Optional, Sequence

import cpu_work
from cases import CASES, Case
from perfanalyzer import BenchError, PerfAnalyzer
from report import say
from run import CPU_WORK_S, interrupt_on_sigterm, measure_run
from servers import REPO, OursServer, ReferenceServer, Server, server_lib_dir

FLOOR_SOURCE = REPO / "bench" / "floor" / "identity.c"
API_HEADERS = REPO / "pytriton" / "backend"
IDENTITY = "identity"
OUT = REPO / "bench" / "out" / "floor.json"


def build_floor(target: pathlib.Path) -> pathlib.Path:
    """Compile the floor backend into ``target/floor/libtriton_floor.so`` (Triton's layout for a
    backend named ``floor``); its path."""
    library = target / "floor" / "libtriton_floor.so"
    library.parent.mkdir(parents=True, exist_ok=True)
    command = ["cc", "-O2", "-Wall", "-Wextra", "-shared", "-fPIC", "-fvisibility=hidden", f"-I{API_HEADERS}",
               "-o", str(library), str(FLOOR_SOURCE)]
    try:
        subprocess.run(command, check=True, capture_output=True, text=True)
    except FileNotFoundError as exc:
        raise BenchError("the floor needs a C compiler (cc) to build bench/floor/identity.c") from exc
    except subprocess.CalledProcessError as exc:
        raise BenchError(f"building the floor backend failed:\n{exc.stderr}") from exc
    return library


class FloorServer(ReferenceServer):
    """The reference's repository with its identity model on the floor backend (the other models
    stay on the Python backend, unused here)."""

    name = "floor"

    def __init__(self, log_dir: pathlib.Path, loop_count: int, library: pathlib.Path) -> None:
        self.library = library
        super().__init__(log_dir, loop_count)

    def _write_repository(self) -> None:
        super()._write_repository()
        config = self.workspace / "models" / IDENTITY / "config.pbtxt"
        config.write_text(config.read_text().replace('backend: "python"', 'backend: "floor"', 1))
        (self.workspace / "models" / IDENTITY / "1" / "model.py").unlink()
        folder = self.workspace / "backends" / "floor"
        folder.mkdir()
        (folder / self.library.name).symlink_to(self.library)


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    identity_cases = [case.key for case in CASES if case.model == IDENTITY]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", nargs="+", choices=identity_cases, default=["small_c16", "small_c64"],
                        help="identity cases of bench/cases.py (default: small_c16 small_c64)")
    parser.add_argument("--protocols", nargs="+", choices=["http", "grpc"], default=["http", "grpc"])
    parser.add_argument("--rounds", type=int, default=3, help="runs of each server per case (default 3)")
    parser.add_argument("--quick", action="store_true",
                        help="one round of small_c1 over HTTP, 1 s windows without waiting for stable figures")
    parser.add_argument("--out", type=pathlib.Path, default=OUT, help="the JSON file")
    parser.add_argument("--perf-analyzer", type=pathlib.Path, help="use this perf_analyzer instead of fetching one")
    args = parser.parse_args(argv)
    if args.quick:
        args.cases, args.protocols, args.rounds = ["small_c1"], ["http"], 1
    args.rounds = max(1, args.rounds)
    return args


def measure(pa: PerfAnalyzer, servers: Sequence[Server], case: Case, protocol: str, args: argparse.Namespace,
            workdir: pathlib.Path) -> Dict[str, Any]:
    """One case over one protocol on every server, `args.rounds` times, the order rotating."""
    runs: Dict[str, List[Dict[str, Any]]] = {server.name: [] for server in servers}
    for index in range(args.rounds):
        order = list(servers[index % len(servers):]) + list(servers[:index % len(servers)])
        for server in order:
            figures = measure_run(pa, server, case, protocol, case.window_ms(1000 if args.quick else 3000, args.quick),
                                  not args.quick, workdir, f"floor-{case.key}-{protocol}-{server.name}-r{index + 1}")
            runs[server.name].append(figures)
            say(f"floor: {case.title}, {protocol}, {server.name}-r{index + 1}: {figures['throughput']:,.0f} infer/s, "
                f"batch {figures['batch_mean']}")
    row: Dict[str, Any] = {"case": case.key, "title": case.title, "protocol": protocol}
    for name, figures in runs.items():
        row[name] = {
            "throughput": round(statistics.median(f["throughput"] for f in figures), 1),
            "batch_mean": statistics.median(f["batch_mean"] or 0 for f in figures),
            "runs": [round(f["throughput"], 1) for f in figures],
        }
    throughput = {name: row[name]["throughput"] for name in runs}
    row["floor_over_reference"] = round(throughput["floor"] / throughput["reference"], 3)
    row["ours_over_reference"] = round(throughput["ours"] / throughput["reference"], 3)
    row["ours_over_floor"] = round(throughput["ours"] / throughput["floor"], 3)
    return row


def table(rows: Sequence[Dict[str, Any]]) -> str:
    lines = ["| case | proto | floor infer/s | reference infer/s | ours infer/s | floor / ref | ours / ref | "
             "ours / floor | batch floor / ref / ours |", "| --- " * 9 + "|"]
    for row in rows:
        batches = " / ".join(f"{row[name]['batch_mean']:.1f}" for name in ("floor", "reference", "ours"))
        lines.append(
            f"| {row['title']} | {row['protocol']} | {row['floor']['throughput']:,.0f} | "
            f"{row['reference']['throughput']:,.0f} | {row['ours']['throughput']:,.0f} | "
            f"{row['floor_over_reference']:.2f} | {row['ours_over_reference']:.2f} | {row['ours_over_floor']:.2f} | "
            f"{batches} |"
        )
    return "\n".join(lines)


def run(args: argparse.Namespace) -> Dict[str, Any]:
    workdir = args.out.parent / "run-floor"
    shutil.rmtree(workdir, ignore_errors=True)
    pa = PerfAnalyzer.install(server_lib_dir(), args.perf_analyzer)
    loop_count = cpu_work.calibrate(CPU_WORK_S)  # the servers' cpu_5ms, unused here, as make bench sets it
    build_dir = pathlib.Path(tempfile.mkdtemp(prefix="pytriton-bench-floor-"))
    started = time.monotonic()
    servers: List[Server] = []
    results: Dict[str, Any] = {"rounds": args.rounds, "quick": args.quick, "cases": []}
    try:
        library = build_floor(build_dir)
        logs = workdir / "logs"
        makers: List[Callable[[], Server]] = [lambda: FloorServer(logs, loop_count, library),
                                              lambda: ReferenceServer(logs, loop_count),
                                              lambda: OursServer(logs, loop_count)]
        for make in makers:  # each made just before it starts: a failed start stops those made
            server = make()
            servers.append(server)
            server.start()
            server.check_identity(IDENTITY)
        for key in args.cases:
            case = next(case for case in CASES if case.key == key)
            for protocol in args.protocols:
                results["cases"].append(measure(pa, servers, case, protocol, args, workdir))
    finally:
        for server in reversed(servers):
            try:
                server.stop()
            except Exception as exc:  # noqa: BLE001 - stop the others whatever happened to this one
                say(f"floor: stopping the {server.name} server failed: {exc!r}")
        shutil.rmtree(build_dir, ignore_errors=True)
    results["servers"] = [{"name": s.name, "pid": s.child.pid if s.child else None, "marker": s.marker}
                          for s in servers]
    results["build_dir"] = str(build_dir)
    results["duration_s"] = round(time.monotonic() - started, 1)
    return results


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    interrupt_on_sigterm()
    try:
        results = run(args)
    except BenchError as exc:
        say(f"floor: {exc}")
        return 1
    except KeyboardInterrupt:
        say("floor: interrupted; every server was stopped")
        return 130
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2))
    print(table(results["cases"]))
    say(f"floor: figures in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
