"""Benchmark pytriton's data path against the plain Triton Python backend (issues 3, 12): `make bench`.

In one run, two servers on the same tritonserver binary serve the same models: the reference (a
plain Python-backend ``model.py``, no extra hop) and ours (the same identity through pytriton and
``@batch``). perf_analyzer loads each in turn, case by case, alternating which goes first, over
HTTP and gRPC. Then the table goes to stdout, the figures to a JSON file, the plot to a PNG and,
for a full run, both into docs/performance.md. Every process started is stopped at the end, on
Ctrl-C and on errors too.

The cases and their targets are in bench/cases.py. ``--gpu`` runs the GPU path instead: a
torch MLP on ``cuda`` in both servers (bench/gpu.py says what it needs and refuses without it).

Usage: ``python bench/run.py [--quick] [--gpu] [--cases KEY ...] [--protocols http grpc] [--interval-ms N]``
(``--help`` lists all options). Progress goes to stderr; stdout holds only the table.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import shutil
import signal
import statistics
import sys
import time
from typing import Any, Dict, List, Optional, Sequence

import breakdown
import continuous
import cpu_work
import gpu
import multiplex
import psutil
import report
from cases import CASES, GPU_CASES, QUICK_CASE, STREAM_CASES, STREAM_GROUP, Case
from perfanalyzer import BenchError, PerfAnalyzer
from report import say
from servers import (
    MODELS,
    REPO,
    OursServer,
    ReferenceServer,
    Server,
    same_models,
    server_lib_dir,
    server_version,
)

OUT_DIR = REPO / "bench" / "out"
DOCS_PAGE = REPO / "docs" / "performance.md"
DESIGN_PAGE = REPO / "docs" / "design" / "hop.md"
DOCS_IMAGE = REPO / "docs" / "performance.png"
DOCS_GPU_IMAGE = REPO / "docs" / "performance-gpu.png"
DOCS_CONTINUOUS_IMAGE = REPO / "docs" / "performance-continuous.png"
MULTIPLEX_CASE = "multiplex_c16"
MULTIPLEX_ROUNDS = 3  # the machine is shared: every round is reported, the medians decide
MULTIPLEX_REQUESTS = 3000
STARTUP_TARGET_S = 0.30
CPU_WORK_S = 0.005  # what cpu_5ms's loop is calibrated to take per batch


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    keys = [case.key for case in CASES]
    gpu_keys = [case.key for case in GPU_CASES]
    stream_keys = [case.key for case in STREAM_CASES]
    parser.add_argument("--quick", action="store_true",
                        help=f"shortest form: case {QUICK_CASE} over HTTP, three 1 s windows without waiting for "
                        "stable figures, one start-up each, no docs")
    parser.add_argument("--cases", nargs="+", choices=keys + stream_keys + [STREAM_GROUP, MULTIPLEX_CASE] + gpu_keys,
                        help=f"cases to run (default: all; '{STREAM_GROUP}': {' '.join(stream_keys)}, the "
                        f"continuous-batching cases; {MULTIPLEX_CASE}: multiplexed models against an lru_cache and "
                        f"8 bound models (bench/multiplex.py), {MULTIPLEX_ROUNDS} rounds at least; with --gpu: "
                        f"{' '.join(gpu_keys)})")
    parser.add_argument("--protocols", nargs="+", choices=["http", "grpc"], help="default: http grpc")
    parser.add_argument("--interval-ms", type=int, help="perf_analyzer --measurement-interval (default 3000)")
    parser.add_argument("--stabilize", action=argparse.BooleanOptionalAction,
                        help="wait for three windows in a row within 10 %% (default; off with --quick). "
                        "--no-stabilize takes three windows whatever their spread: with --rounds 3 the median of "
                        "the rounds resists noise instead, in about half the time")
    parser.add_argument("--rounds", type=int, default=1,
                        help="pairs of runs per case and protocol, order flipped each round; the medians count "
                        "(default 1; 3 resists bursts of other load on the machine, at three times the time)")
    parser.add_argument("--startup-repeats", type=int,
                        help="start-ups of each server, alternating; the median counts (default 3)")
    parser.add_argument("--out", type=pathlib.Path, default=OUT_DIR / "results.json", help="the JSON file")
    parser.add_argument("--plot", type=pathlib.Path, help="the PNG (default: performance.png beside --out)")
    parser.add_argument("--docs", action=argparse.BooleanOptionalAction,
                        help="write docs/performance.md and docs/performance.png (default: on, off with --quick)")
    parser.add_argument("--perf-analyzer", type=pathlib.Path, help="use this perf_analyzer instead of fetching one")
    parser.add_argument("--ours-pythonpath", type=pathlib.Path,
                        help="serve ours with the pytriton package found in this folder (e.g. a checkout of another "
                        "commit, with its pytriton/tritonserver linked to this one's), to compare revisions")
    parser.add_argument("--gpu", action="store_true",
                        help="the GPU path instead: a torch MLP on cuda, ours against a plain Python-backend model, "
                        "concurrency 1 and 32, and a check that CUDA-tensor and numpy outputs both work; refuses "
                        "without a GPU torch can use. Writes results-gpu.json and the docs' GPU block")
    parser.add_argument("--breakdown", action="store_true",
                        help="instead of the cases: the stage table of one request (16 values, concurrency 1, HTTP "
                        "and gRPC, from Triton's traces and the models' own stamps) and the CPU per 1,000 "
                        "requests of each process at concurrency 16 (bench/breakdown.py); writes breakdown.json "
                        "beside --out and, unless --no-docs, the breakdown block of docs/design/hop.md")
    parser.add_argument("--litserve", action=argparse.BooleanOptionalAction, default=True,
                        help="the continuous-batching cases also measure LitServe 0.2.19, installed on first use into "
                        "its own environment in the bench's cache (default: on)")
    parser.add_argument("--torch-device", help=argparse.SUPPRESS)  # --gpu on another device: plumbing tests only
    args = parser.parse_args(argv)
    if args.cases and STREAM_GROUP in args.cases:
        args.cases = [key for key in args.cases if key != STREAM_GROUP] + stream_keys
    args.stream_cases = []
    args.multiplex = False
    if args.torch_device:
        args.gpu = True
    if args.gpu:
        args.torch_device = args.torch_device or "cuda"
        wrong = sorted(set(args.cases or ()) - set(gpu_keys))
        if wrong:  # the continuous-batching cases too: they run on the CPU
            parser.error(f"--cases {' '.join(wrong)}: not a case of --gpu, whose cases are {' '.join(gpu_keys)}")
        args.cases = [case for case in GPU_CASES if case.key in (args.cases or gpu_keys)]
        if args.out == OUT_DIR / "results.json":
            args.out = OUT_DIR / "results-gpu.json"
    else:
        wrong = sorted(set(args.cases or ()) & set(gpu_keys))
        if wrong:
            parser.error(f"--cases {' '.join(wrong)}: GPU cases run only with --gpu")
        chosen = args.cases or ([QUICK_CASE] if args.quick else keys + stream_keys + [MULTIPLEX_CASE])
        args.multiplex = MULTIPLEX_CASE in chosen
        args.cases = [case for case in CASES if case.key in chosen]
        args.stream_cases = [case for case in STREAM_CASES if case.key in chosen]
    args.protocols = args.protocols or (["http"] if args.quick else ["http", "grpc"])
    args.interval_explicit = args.interval_ms is not None or args.quick
    args.interval_ms = args.interval_ms or (1000 if args.quick else 3000)
    args.stabilize = (not args.quick) if args.stabilize is None else args.stabilize
    args.startup_repeats = max(1, args.startup_repeats or (1 if args.quick else 3))
    args.rounds = max(1, args.rounds)
    args.plot = args.plot or args.out.with_name("performance-gpu.png" if args.gpu else "performance.png")
    args.docs = (not args.quick) if args.docs is None else args.docs
    return args


def interrupt_on_sigterm() -> None:
    """SIGTERM unwinds like Ctrl-C, so the `finally` blocks stop every child."""

    def _raise(signum: int, _frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, _raise)


def measure_startups(
    repeats: int,
    log_dir: pathlib.Path,
    live: List[Server],
    started: List[Server],
    ours_pythonpath: Optional[pathlib.Path],
    loop_count: int,
    torch_device: Optional[str] = None,
) -> Dict[str, List[float]]:
    """Start each server `repeats` times, alternating which goes first; the last pair stays up in `live`.

    Every server created is also appended to `started`, for the final check of leftovers.
    """
    samples: Dict[str, List[float]] = {"reference": [], "ours": []}
    kinds = ["reference", "ours"]
    for repeat in range(repeats):
        last = repeat == repeats - 1
        for kind in kinds if repeat % 2 == 0 else kinds[::-1]:
            server: Server = (
                ReferenceServer(log_dir, loop_count, torch_device) if kind == "reference"
                else OursServer(log_dir, loop_count, ours_pythonpath, torch_device)
            )  # fmt: skip
            live.append(server)
            started.append(server)
            seconds = server.start()
            samples[server.name].append(round(seconds, 3))
            say(f"bench: start-up {repeat + 1}/{repeats}: {server.name} ready in {seconds:.2f} s")
            if not last:  # only one server runs while the other starts
                server.stop()
                live.remove(server)
    return samples


def measure_run(pa: PerfAnalyzer, server: Server, case: Case, protocol: str, interval_ms: int, stabilize: bool,
                workdir: pathlib.Path, label: str) -> Dict[str, Any]:
    """One perf_analyzer run of `case` on `server`: its figures, the wall time it took and the mean
    batch the model executed meanwhile (Triton's statistics: inferences / executions)."""
    before = server.counts(case.model)
    clock = time.monotonic()
    figures: Dict[str, Any] = pa.measure(
        model=case.model, url=server.url(protocol), protocol=protocol, shape=f"INPUT_1:{case.values}",
        concurrency=case.concurrency, interval_ms=interval_ms, workdir=workdir, label=label, stabilize=stabilize,
        headers=server.headers(protocol), streaming=case.streaming,
    )  # fmt: skip
    figures["wall_s"] = round(time.monotonic() - clock, 1)  # what the run took, for planning runs
    after = server.counts(case.model)
    inferences, executions = after[0] - before[0], after[1] - before[1]
    figures["batch_mean"] = round(inferences / executions, 2) if executions else None
    return figures


def measure_case(pa: PerfAnalyzer, case: Case, protocol: str, order: Sequence[Server], args: argparse.Namespace,
                 workdir: pathlib.Path) -> Dict[str, Any]:
    """One case over one protocol: `args.rounds` pairs of runs, the order flipping every round.

    With more than one round, each figure is the median over the rounds and the ratio is the
    median of the rounds' ratios (each from two runs next to each other in time), which a burst
    of foreign load on the machine moves less than a single pair.
    """
    row: Dict[str, Any] = {
        "case": case.key, "title": case.title, "label": case.label, "protocol": protocol, "model": case.model,
        "values": case.values, "concurrency": case.concurrency, "target_ratio": case.target,
        "interval_ms": case.window_ms(args.interval_ms, args.interval_explicit),
        "order": [server.name for server in order],
    }  # fmt: skip
    rounds: List[Dict[str, Any]] = []
    for index in range(args.rounds):
        measured: Dict[str, Any] = {}
        for server in order if index % 2 == 0 else list(reversed(order)):
            suffix = f"-r{index + 1}" if args.rounds > 1 else ""
            figures = measure_run(pa, server, case, protocol, case.window_ms(args.interval_ms, args.interval_explicit),
                                  args.stabilize, workdir, f"{case.key}-{protocol}-{server.name}{suffix}")
            measured[server.name] = figures
            say(f"bench: {case.title}, {protocol}, {server.name}{suffix}: {figures['throughput']:,.0f} infer/s, "
                f"{figures['latency_avg_us'] / 1000:.2f} ms mean, batch {figures['batch_mean']}")
        measured["ratio"] = round(measured["ours"]["throughput"] / measured["reference"]["throughput"], 3)
        rounds.append(measured)
    for side in ("reference", "ours"):
        row[side] = _median_figures([measured[side] for measured in rounds])
    row["ratio"] = round(statistics.median(measured["ratio"] for measured in rounds), 3)
    row["latency_ratio"] = round(row["ours"]["latency_avg_us"] / row["reference"]["latency_avg_us"], 3)
    row["extra_latency_ms"] = round((row["ours"]["latency_avg_us"] - row["reference"]["latency_avg_us"]) / 1000, 3)
    row["max_extra_latency_ms"] = case.max_extra_latency_ms
    row["met"] = row["ratio"] >= case.target and (
        case.max_extra_latency_ms is None or row["extra_latency_ms"] <= case.max_extra_latency_ms
    )
    if args.rounds > 1:
        row["rounds"] = rounds
    return row


def _median_figures(runs: Sequence[Dict[str, Any]]) -> Dict[str, Any]:
    if len(runs) == 1:
        return dict(runs[0])
    merged: Dict[str, Any] = {}
    for key in runs[0]:
        values = [run[key] for run in runs]
        if key == "stable":  # stable only if every round was; None if any went unchecked
            merged[key] = None if None in values else min(values)
        else:
            known = [value for value in values if value is not None]
            merged[key] = round(statistics.median(known), 3) if known else None
    return merged


def leftovers(markers: Sequence[str]) -> Dict[str, List[str]]:
    """Processes and /dev/shm entries still carrying one of the markers (there should be none)."""
    processes = []
    for process in psutil.process_iter(["cmdline"]):
        cmdline = " ".join(process.info.get("cmdline") or [])
        if process.pid != os.getpid() and any(marker in cmdline for marker in markers):
            processes.append(f"{process.pid} {cmdline[:160]}")
    segments = [name for name in os.listdir("/dev/shm") if any(name.startswith(m) for m in markers)]
    return {"processes": processes, "segments": segments}


def run(args: argparse.Namespace) -> Dict[str, Any]:
    """The cases asked for: perf_analyzer's against the reference (`args.cases`, after the start-ups),
    then the continuous-batching ones (`args.stream_cases`, bench/continuous.py)."""
    run_dir = args.out.parent / ("run-gpu" if args.gpu else "run")
    device = gpu.device_info(args.torch_device) if args.gpu else None  # refuses early without the device
    shutil.rmtree(run_dir, ignore_errors=True)
    results: Dict[str, Any] = {
        "schema": 1,
        "machine": report.machine(),
        "settings": {
            "quick": args.quick,
            "interval_ms": args.interval_ms,
            "stabilize": args.stabilize,
            "protocols": args.protocols,
            "startup_repeats": args.startup_repeats,
            "rounds": args.rounds,
            "triton_server": server_version(),
            "revision": report.git_revision(args.ours_pythonpath or REPO),
            "ours_pythonpath": str(args.ours_pythonpath) if args.ours_pythonpath else None,
        },
        "cases": [],
    }
    if device is not None:
        results["gpu"] = device
    live: List[Server] = []
    created: List[Server] = []
    started = time.monotonic()
    try:
        if args.cases:
            measure_classic(args, results, run_dir, live, created)
        if args.stream_cases:
            results["continuous"] = continuous.measure(
                args.stream_cases, rounds=args.rounds, quick=args.quick, litserve=args.litserve,
                run_dir=run_dir / "continuous", ours_pythonpath=args.ours_pythonpath, created=created,
            )  # fmt: skip
        if args.multiplex:  # a server of its own, started once the others are done
            results["multiplex"] = multiplex.run(max(MULTIPLEX_ROUNDS, args.rounds), MULTIPLEX_REQUESTS,
                                                 run_dir / "logs")
    finally:
        # A second Ctrl-C must not cut the cleanup short.
        previous = {signum: signal.signal(signum, signal.SIG_IGN) for signum in (signal.SIGINT, signal.SIGTERM)}
        for server in reversed(live):
            try:
                server.stop()
            except Exception as exc:  # noqa: BLE001 - stop the others whatever happened to this one
                say(f"bench: stopping the {server.name} server failed: {exc!r}")
        results["servers"] = [
            {"name": s.name, "pid": s.child.pid if s.child else None, "marker": s.marker, "http_port": s.http_port,
             "grpc_port": s.grpc_port, "startup_s": s.startup_s}
            for s in created
        ]  # fmt: skip
        results["leftovers"] = leftovers([server.marker for server in created if server.marker])
        litserve_left = (results.get("continuous") or {}).get("leftover_litserve_pids")
        if litserve_left:
            results["leftovers"]["processes"] += [f"{pid} (LitServe)" for pid in litserve_left]
        if any(results["leftovers"].values()):
            say(f"bench: WARNING: left behind: {results['leftovers']}")
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    results["machine"]["loadavg_at_end"] = list(os.getloadavg())
    results["duration_s"] = round(time.monotonic() - started, 1)
    met = [row["met"] for row in results["cases"]]
    if "startup" in results:
        met.append(results["startup"]["met"])
    if "continuous" in results:
        met.append(results["continuous"]["all_met"])
    if "multiplex" in results:
        met += list(results["multiplex"]["met"].values())
    results["all_met"] = all(met)
    return results


def measure_classic(args: argparse.Namespace, results: Dict[str, Any], run_dir: pathlib.Path, live: List[Server],
                    created: List[Server]) -> None:
    """perf_analyzer's cases: start-ups, the checks of both servers, then every case and protocol."""
    pa = PerfAnalyzer.install(server_lib_dir(), args.perf_analyzer)
    loop_count = cpu_work.calibrate(CPU_WORK_S)
    say(f"bench: cpu_5ms spins {loop_count:,} loop iterations per batch (about {CPU_WORK_S * 1000:g} ms here)")
    results["settings"]["perf_analyzer"] = pa.version()
    results["settings"]["cpu_loop_count"] = loop_count
    samples = measure_startups(
        args.startup_repeats, run_dir / "logs", live, created, args.ours_pythonpath, loop_count,
        args.torch_device if args.gpu else None,
    )
    reference_s, ours_s = statistics.median(samples["reference"]), statistics.median(samples["ours"])
    results["startup"] = {
        "reference_s": samples["reference"], "ours_s": samples["ours"],
        "reference_median_s": round(reference_s, 3), "ours_median_s": round(ours_s, 3),
        "difference_s": round(ours_s - reference_s, 3), "target_s": STARTUP_TARGET_S,
        "met": ours_s - reference_s <= STARTUP_TARGET_S,
    }  # fmt: skip
    servers = {server.name: server for server in live}
    reference, ours = servers["reference"], servers["ours"]
    same_models([reference, ours])
    assert isinstance(ours, OursServer)
    if args.gpu:
        results["gpu"]["outputs_check"] = gpu.check_outputs(reference, ours)
    else:
        for server in (reference, ours):
            for spec in MODELS.values():
                if spec.decoupled:
                    server.check_stream(spec.name, spec.steps)
                else:
                    server.check_identity(spec.name)
        results["settings"]["cpu_instances_ours"] = ours.cpu_instances()
    results["idle_cpu_percent"] = {s.name: round(s.idle_cpu_percent(), 1) for s in (reference, ours)}
    index = 0
    for case in args.cases:
        protocols = [protocol for protocol in args.protocols if protocol in case.protocols]
        if not protocols:
            say(f"bench: {case.key} runs over {'/'.join(case.protocols)} only; not in --protocols, skipped")
        for protocol in protocols:
            order = [reference, ours] if index % 2 == 0 else [ours, reference]
            results["cases"].append(measure_case(pa, case, protocol, order, args, run_dir))
            index += 1
    # The classic servers are not needed any more: the continuous cases start their own.
    for server in list(live):
        server.stop()
        live.remove(server)


def run_breakdown(args: argparse.Namespace) -> Dict[str, Any]:
    """`breakdown.measure_stages` and `breakdown.measure_cpu`, one server at a time."""
    run_dir = args.out.parent / "run-breakdown"
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    pa = PerfAnalyzer.install(server_lib_dir(), args.perf_analyzer)
    loop_count = cpu_work.calibrate(CPU_WORK_S)
    created: List[Server] = []

    def make_server(name: str) -> Server:
        server: Server = (ReferenceServer(run_dir / "logs", loop_count) if name == "reference"
                          else OursServer(run_dir / "logs", loop_count, args.ours_pythonpath,
                                          model_backend="python" if name == "proxy" else None))
        created.append(server)
        return server

    try:
        results: Dict[str, Any] = {
            "machine": report.machine(),
            "revision": report.git_revision(args.ours_pythonpath or REPO),
            "stages": breakdown.measure_stages(pa, make_server, run_dir, args.protocols),
            "cpu": breakdown.measure_cpu(pa, make_server, run_dir),
        }
    finally:
        for server in created:
            if server.child is not None and server.child.is_running():
                server.stop()
    results["leftovers"] = leftovers([server.marker for server in created if server.marker])
    return results


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    interrupt_on_sigterm()
    if args.breakdown:
        try:
            results = run_breakdown(args)
        except BenchError as exc:
            say(f"bench: FAILED: {exc}")
            return 1
        path = args.out.with_name("breakdown.json")
        report.write_json(results, path)
        table = breakdown.markdown(results)
        print(table)
        if args.docs:
            report.update_breakdown(DESIGN_PAGE, table, results)
            say(f"bench: updated {DESIGN_PAGE.relative_to(REPO)}")
        return 0
    try:
        results = run(args)
    except gpu.NoDevice as exc:
        say(f"bench: --gpu refused: {exc}")
        return 2
    except BenchError as exc:
        say(f"bench: FAILED: {exc}")
        return 1
    except KeyboardInterrupt:
        say("bench: interrupted; every server was stopped")
        return 130
    report.write_json(results, args.out)
    say(f"bench: figures in {args.out}")
    if args.cases:
        print(report.text_table(results))
        why_not = report.plot(results, args.plot)
        say(f"bench: no plot: {why_not}" if why_not else f"bench: plot in {args.plot}")
        if args.docs:
            image = DOCS_GPU_IMAGE if args.gpu else DOCS_IMAGE
            if why_not is None:
                image.write_bytes(args.plot.read_bytes())
            report.update_docs(results, DOCS_PAGE, image.name, gpu=args.gpu)
            say(f"bench: updated {DOCS_PAGE.relative_to(REPO)} and {image.relative_to(REPO)}")
    if "continuous" in results:
        print(report.continuous_text(results))
        plot = args.plot.with_name(DOCS_CONTINUOUS_IMAGE.name)
        why_not = report.plot_continuous(results, plot)
        say(f"bench: no plot: {why_not}" if why_not else f"bench: plot in {plot}")
        if args.docs:
            if why_not is None:
                DOCS_CONTINUOUS_IMAGE.write_bytes(plot.read_bytes())
            report.update_continuous_docs(results, DOCS_PAGE, DOCS_CONTINUOUS_IMAGE.name)
            say(f"bench: updated {DOCS_PAGE.relative_to(REPO)} and {DOCS_CONTINUOUS_IMAGE.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
