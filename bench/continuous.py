"""The continuous-batching cases of `make bench` (issue 42): streams served step by step, side by side.

One run serves the same step (bench/step_model.py: 2 ms + 20 µs per stream, a sleep) four ways and
loads each with the same streams (bench/stream_client.py, a process of its own):

* ``whole``: today's streaming, a ``@batch`` generator over the batch Triton's batcher gave it;
* ``continuous``: a ``@continuous`` step function (pytriton's continuous batching);
  both through pytriton (bench/serve_streams.py), each over gRPC and over HTTP;
* ``litserve``: LitServe 0.2.19's ``ContinuousBatchingLoop`` (bench/serve_litserve.py, in its own
  environment, bench/litserve_env.py), over HTTP, the only protocol it has;
* and the ideal, concurrency streams each getting a piece every step: ``c / step(c)``.

The load cases (bench/cases.py ``STREAM_CASES``) run closed loops of 1, 8, 32 and 64 streams of 64
steps, started at uniform offsets; the scenario starts 8 streams of 32 steps of 10 ms, 40 ms
apart. Every case runs every way in turn, the order flipping from case to case and round to round,
so that drift on the shared machine hits all of them; with ``--rounds N`` each figure is the
median over the rounds (bench/stream_figures.py), and so is each ratio.

LitServe's worker keeps a core busy while it serves nothing (see bench/serve_litserve.py), so its
servers are frozen (SIGSTOP) whenever another way is measured, and thawed (SIGCONT) for their own
runs. pytriton's server stays up throughout; its idle CPU is measured and reported.
"""

from __future__ import annotations

import json
import os
import pathlib
import signal
import statistics
import subprocess
import sys
import threading
import time
from typing import IO, Any, Dict, List, Optional, Sequence

import litserve_env
import psutil
import stream_figures
from cases import (
    CB_FIRST_PIECE_EXTRA_MS,
    CB_FIRST_PIECE_STEPS,
    CB_IDEAL_CONCURRENCY,
    CB_MIN_OF_IDEAL,
    CB_MIN_OVER_LITSERVE,
    CB_MIN_OVER_WHOLE,
    STREAM_CASES,
    STREAM_SYSTEMS,
    StreamCase,
)
from children import Child
from perfanalyzer import BenchError
from report import say
from servers import ACCESS_TOKEN_ENV, BENCH_DIR, OursServer, Server, _request
from stream_client import DRAIN_TIMEOUT_S, WINDOW_END, WINDOW_START

WARMUP_S, WINDOW_S = 2.0, 6.0
QUICK_WARMUP_S, QUICK_WINDOW_S = 0.3, 1.0
CLIENT_START_S = 30.0  # besides the run itself: the client's start-up and the streams' drain
MODELS = {("whole", False): "cb_whole", ("continuous", False): "cb_step",
          ("whole", True): "scn_whole", ("continuous", True): "scn_step"}


def _load_template() -> StreamCase:
    return next(case for case in STREAM_CASES if not case.scenario)


def _scenario_template() -> StreamCase:
    return next(case for case in STREAM_CASES if case.scenario)


class StreamsServer(OursServer):
    """bench/serve_streams.py in its own process: the four stream models through pytriton."""

    def __init__(self, log_dir: pathlib.Path, pythonpath: Optional[pathlib.Path] = None) -> None:
        super().__init__(log_dir, 0, pythonpath)
        self.models = list(MODELS.values())

    def _launch(self, log: IO[str]) -> Child:
        load, scenario = _load_template(), _scenario_template()
        argv = [
            sys.executable, str(BENCH_DIR / "serve_streams.py"), "--http-port", str(self.http_port),
            "--grpc-port", str(self.grpc_port), "--metrics-port", str(self.metrics_port),
            "--max-streams", str(load.max_streams), "--base-ms", str(load.base_ms),
            "--per-stream-us", str(load.per_stream_us), "--scenario-streams", str(scenario.max_streams),
            "--scenario-step-ms", str(scenario.base_ms),
        ]  # fmt: skip
        env = dict(os.environ)
        env[ACCESS_TOKEN_ENV] = self.access_token or ""
        if self.pythonpath is not None:
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(self.pythonpath), env.get("PYTHONPATH")]))
        return Child(argv, env, log)


class LitServeServer(Server):
    """bench/serve_litserve.py with the Python of LitServe's environment, for one shape of step."""

    name = "litserve"

    def __init__(self, log_dir: pathlib.Path, python: pathlib.Path, case: StreamCase) -> None:
        super().__init__(log_dir)
        self.python = python
        self.case = case
        self.models = ["predict"]
        self.frozen = False
        self.pids: List[int] = []  # every process of it seen, for the check of leftovers

    @property
    def marker(self) -> Optional[str]:
        return None  # its processes are counted by pid (`pids`)

    def _launch(self, log: IO[str]) -> Child:
        argv = [str(self.python), str(BENCH_DIR / "serve_litserve.py"), "--port", str(self.http_port),
                "--max-streams", str(self.case.max_streams), "--base-ms", str(self.case.base_ms),
                "--per-stream-us", str(self.case.per_stream_us)]
        env = dict(os.environ)
        env.pop("PYTHONPATH", None)
        return Child(argv, env, log)

    def _model_ready(self, model: str) -> bool:
        try:
            status, _ = _request(self.http_port, "GET", "/health", timeout_s=2.0)
        except OSError:
            return False
        if status == 200 and self.child is not None:
            self.pids = sorted({self.child.pid, *(process.pid for process in self.child.descendants())})
        return status == 200

    def url(self, protocol: str) -> str:
        return f"127.0.0.1:{self.http_port}"

    def freeze(self, frozen: bool) -> None:
        """SIGSTOP (or SIGCONT) every process of the server: a frozen LitServe spins no core."""
        if self.child is None or frozen == self.frozen:
            return
        os.killpg(self.child.pid, signal.SIGSTOP if frozen else signal.SIGCONT)
        self.frozen = frozen

    def stop(self) -> None:
        if self.child is None:
            return
        self.freeze(False)
        self.child.stop(polite=signal.SIGTERM, timeout_s=15)

    def alive(self) -> List[int]:
        """Its processes still running after the stop (there should be none)."""
        alive = []
        for pid in self.pids:
            try:
                if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                    alive.append(pid)
            except psutil.NoSuchProcess:
                pass
        return alive


class SleepProbe(threading.Thread):
    """How late ``time.sleep(step)`` wakes on this machine while a run goes on (in the harness's
    otherwise idle process): the step model's sleeps wake late the same way."""

    def __init__(self, step_s: float) -> None:
        super().__init__(daemon=True)
        self.step_s = step_s
        self.late: List[float] = []
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.is_set():
            began = time.perf_counter()
            time.sleep(self.step_s)
            self.late.append(time.perf_counter() - began - self.step_s)

    def finish(self) -> Dict[str, Optional[float]]:
        self._stop_event.set()
        self.join(5)
        late = list(self.late)
        return {"sleep_late_p50_us": _us(stream_figures.percentile(late, 50)),
                "sleep_late_p90_us": _us(stream_figures.percentile(late, 90))}


def _us(seconds: Optional[float]) -> Optional[float]:
    return None if seconds is None else round(seconds * 1e6, 1)


def run_client(argv: List[str], server: Server, step_s: float, timeout_s: float, label: str,
               log_dir: pathlib.Path) -> Dict[str, Any]:
    """Run the load generator; its figures, with the server's CPU during its window and the sleep probe's."""
    load = os.getloadavg()[0]
    child = Child(argv, os.environ, subprocess.PIPE)
    watchdog = threading.Timer(timeout_s, child.stop)
    watchdog.start()
    probe = SleepProbe(step_s)
    probe.start()
    marks: Dict[str, float] = {}
    lines: List[str] = []
    try:
        assert child.stdout is not None
        for line in child.stdout:
            line = line.rstrip("\n")
            if line in (WINDOW_START, WINDOW_END):
                marks[line] = server.cpu_seconds()
                marks[line + " at"] = time.monotonic()
            else:
                lines.append(line)
        status = child.wait(30)
    finally:
        watchdog.cancel()
        late = probe.finish()
        if child.is_running():
            child.stop()
    log_dir.mkdir(parents=True, exist_ok=True)
    (log_dir / f"{label}.log").write_text("\n".join(lines) + "\n")
    answers = [line for line in lines if line.startswith("{")]
    if status != 0 or not answers:
        tail = "\n".join(lines[-15:])
        raise BenchError(f"the stream client of {label} exited with {status} (limit {timeout_s:.0f} s):\n{tail}")
    figures: Dict[str, Any] = json.loads(answers[-1])
    if WINDOW_START in marks and WINDOW_END in marks:
        span = marks[WINDOW_END + " at"] - marks[WINDOW_START + " at"]
        figures["server_cpu_percent"] = round((marks[WINDOW_END] - marks[WINDOW_START]) / span * 100, 1)
    figures.update(late)
    figures["loadavg_1min"] = round(load, 2)  # the machine's load as the run began (others' work included)
    return figures


def client_argv(case: StreamCase, way: str, protocol: str, server: Server, quick: bool) -> List[str]:
    target = "litserve" if way == "litserve" else protocol
    argv = [sys.executable, str(BENCH_DIR / "stream_client.py"), "--target", target, "--url", server.url(protocol),
            "--steps", str(case.steps)]
    if way != "litserve":
        argv += ["--model", MODELS[(way, case.scenario)]]
    if case.scenario:
        argv += ["--arrivals-ms", ",".join(f"{value:g}" for value in case.arrivals_ms), "--step-s", str(case.step_s())]
    else:
        warmup, window = (QUICK_WARMUP_S, QUICK_WINDOW_S) if quick else (WARMUP_S, WINDOW_S)
        argv += ["--concurrency", str(case.concurrency), "--stagger-s", f"{case.steps * case.step_s():.6f}",
                 "--warmup-s", str(warmup), "--window-s", str(window)]
    return argv


def measure(cases: Sequence[StreamCase], *, rounds: int, quick: bool, litserve: bool, run_dir: pathlib.Path,
            ours_pythonpath: Optional[pathlib.Path], created: List[Server]) -> Dict[str, Any]:
    """Run `cases` (`rounds` times) over every way of serving them; the figures, rounds and verdicts."""
    log_dir = run_dir / "logs"
    results: Dict[str, Any] = {
        "settings": {
            "warmup_s": QUICK_WARMUP_S if quick else WARMUP_S, "window_s": QUICK_WINDOW_S if quick else WINDOW_S,
            "rounds": rounds, "step": "time.sleep(base + per_stream x streams) (bench/step_model.py)",
        },
        "litserve": {"version": litserve_env.LITSERVE_VERSION, "status": "not asked (--no-litserve)"},
    }  # fmt: skip
    live: List[Server] = []
    peers: Dict[bool, LitServeServer] = {}
    try:
        ours = StreamsServer(log_dir, ours_pythonpath)
        created.append(ours)
        live.append(ours)
        say(f"bench: continuous: pytriton's stream models ready in {ours.start():.2f} s")
        idle = {"ours": round(ours.idle_cpu_percent(), 1)}
        if litserve:
            peers = _start_litserve(cases, results, log_dir, created, live, idle)
        results["idle_cpu_percent"] = idle
        results["cases"] = _run_rounds(cases, rounds, quick, ours, peers, results, log_dir)
    finally:
        for server in reversed(live):
            try:
                server.stop()
            except Exception as exc:  # noqa: BLE001 - stop the others whatever happened to this one
                say(f"bench: stopping the {server.name} server failed: {exc!r}")
    results["leftover_litserve_pids"] = sorted(pid for peer in peers.values() for pid in peer.alive())
    rows = [row for row in results["cases"] if not row["scenario"]]
    found = stream_figures.verdicts(
        rows, ideal_concurrency=CB_IDEAL_CONCURRENCY, min_of_ideal=CB_MIN_OF_IDEAL, min_over_whole=CB_MIN_OVER_WHOLE,
        first_piece_steps=CB_FIRST_PIECE_STEPS, first_piece_extra_ms=CB_FIRST_PIECE_EXTRA_MS,
        min_over_litserve=CB_MIN_OVER_LITSERVE,
    )  # fmt: skip
    for row in results["cases"]:
        if row["scenario"]:
            found += stream_figures.scenario_verdicts(row)
    results["verdicts"] = found
    results["all_met"] = bool(found) and all(verdict["met"] for verdict in found)
    return results


def _start_litserve(cases: Sequence[StreamCase], results: Dict[str, Any], log_dir: pathlib.Path,
                    created: List[Server], live: List[Server], idle: Dict[str, float]) -> Dict[bool, LitServeServer]:
    """LitServe's environment and one server per shape of step the cases need, each frozen after its start."""
    try:
        python = litserve_env.ensure(log_dir / "litserve-pip.log")
    except BenchError as exc:
        results["litserve"]["status"] = f"not run: {exc}"
        say(f"bench: continuous: LitServe not run: {exc}")
        return {}
    results["litserve"]["versions"] = litserve_env.versions(python)
    peers: Dict[bool, LitServeServer] = {}
    for scenario in sorted({case.scenario for case in cases}):
        peer = LitServeServer(log_dir, python, _scenario_template() if scenario else _load_template())
        created.append(peer)
        live.append(peer)
        try:
            seconds = peer.start()
        except BenchError as exc:
            results["litserve"]["status"] = f"not run: {exc}"
            say(f"bench: continuous: LitServe did not start: {exc}")
            return {}
        say(f"bench: continuous: LitServe ({'scenario' if scenario else 'load'}) ready in {seconds:.2f} s")
        idle["litserve_scenario" if scenario else "litserve"] = round(peer.idle_cpu_percent(), 1)
        peer.freeze(True)
        peers[scenario] = peer
    results["litserve"]["status"] = "ran"
    return peers


def _run_rounds(cases: Sequence[StreamCase], rounds: int, quick: bool, ours: Server,
                peers: Dict[bool, LitServeServer], results: Dict[str, Any],
                log_dir: pathlib.Path) -> List[Dict[str, Any]]:
    runs: Dict[str, Dict[str, List[Dict[str, Any]]]] = {case.key: {} for case in cases}
    index = 0
    for round_index in range(rounds):
        for case in cases:
            order = list(STREAM_SYSTEMS) if index % 2 == 0 else list(reversed(STREAM_SYSTEMS))
            index += 1
            for way, protocol in order:
                peer = peers.get(case.scenario) if way == "litserve" else None
                if way == "litserve" and peer is None:
                    continue
                server: Server = peer if peer is not None else ours
                label = f"{case.key}-{way}-{protocol}-r{round_index + 1}"
                timeout = CLIENT_START_S + DRAIN_TIMEOUT_S + (
                    max(case.arrivals_ms) / 1000 if case.scenario
                    else QUICK_WARMUP_S + QUICK_WINDOW_S if quick else WARMUP_S + WINDOW_S)
                if peer is not None:
                    peer.freeze(False)
                try:
                    figures = run_client(client_argv(case, way, protocol, server, quick), server, case.step_s(),
                                         timeout, label, log_dir)
                finally:
                    if peer is not None:
                        peer.freeze(True)
                figures["round"] = round_index + 1
                _check_run(figures, label, way, results, peers, case.scenario)
                runs[case.key].setdefault(f"{way}/{protocol}", []).append(figures)
                say(f"bench: continuous: {label}: " + _progress(case, figures))
    return [_case_row(case, runs[case.key]) for case in cases]


def _check_run(figures: Dict[str, Any], label: str, way: str, results: Dict[str, Any],
               peers: Dict[bool, LitServeServer], scenario: bool) -> None:
    """Streams that failed are recorded (``continuous.failures``, the table's *failed* column), and
    a verdict on a way whose streams failed is not met. A run whose every stream failed stops the
    bench for pytriton (its server is broken); for LitServe it is recorded, and LitServe is
    measured no further."""
    failed = figures.get("failed") or 0
    if not failed:
        return
    total = figures["streams"] if isinstance(figures.get("streams"), int) else len(figures.get("streams") or [])
    message = f"{label}: {failed} of {total} streams failed: {'; '.join(figures['errors'])}"
    results.setdefault("failures", []).append(message)
    say(f"bench: continuous: WARNING: {message}")
    if failed < total:
        return
    if way != "litserve":
        raise BenchError(message)
    results["litserve"]["status"] = f"failed: {message}"
    say("bench: continuous: LitServe failed every stream; measured no further")
    peers.clear()


def _progress(case: StreamCase, figures: Dict[str, Any]) -> str:
    if case.scenario:
        return (f"first piece at most {figures['first_piece_max_ms']} ms, done at most {figures['done_max_ms']} ms "
                f"after arrival (limits {figures['first_limit_ms']:g} and {figures['done_limit_ms']:g} ms)")
    return (f"{figures['pieces_per_s']:,.0f} pieces/s ({figures['pieces_per_s'] / case.ideal_pieces_per_s():.2f} of "
            f"ideal), first piece p50 {figures['first_piece_p50_ms']} ms, gap p50 {figures['gap_p50_ms']} ms, "
            f"client CPU {figures['client_cpu_percent']} %, server CPU {figures.get('server_cpu_percent')} %")


def _case_row(case: StreamCase, by_system: Dict[str, List[Dict[str, Any]]]) -> Dict[str, Any]:
    row: Dict[str, Any] = {
        "case": case.key, "title": case.title, "label": case.label, "scenario": case.scenario,
        "concurrency": case.concurrency, "steps": case.steps, "base_ms": case.base_ms,
        "per_stream_us": case.per_stream_us, "max_streams": case.max_streams,
        "step_ms": round(case.step_s() * 1000, 3), "ideal_pieces_per_s": round(case.ideal_pieces_per_s(), 1),
        "systems": {},
    }  # fmt: skip
    if case.scenario:
        row["arrivals_ms"] = list(case.arrivals_ms)
    order = [f"{way}/{protocol}" for way, protocol in STREAM_SYSTEMS]
    for name, rounds in sorted(by_system.items(), key=lambda item: order.index(item[0])):
        figures = stream_figures.median_figures(rounds)
        figures["failed"] = sum(run.get("failed") or 0 for run in rounds)  # over every round, not a median
        if not case.scenario:
            figures["of_ideal"] = round(statistics.median(run["pieces_per_s"] for run in rounds)
                                        / case.ideal_pieces_per_s(), 3)
        row["systems"][name] = {"figures": figures, "rounds": rounds}
    return row
