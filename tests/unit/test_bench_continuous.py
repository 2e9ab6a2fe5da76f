"""The continuous-batching cases of `make bench` without a server: the cases, the figures from
stream timings (percentiles, windows, the ideal, the scenario), the verdicts, the arguments and
the docs block (bench/cases.py, stream_figures.py, stream_client.py, continuous.py, report.py)."""

from __future__ import annotations

import pathlib
import sys
import time

import numpy as np
import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))

import cases  # noqa: E402
import report  # noqa: E402
import run  # noqa: E402
import stream_client  # noqa: E402
import stream_figures  # noqa: E402
from stream_figures import StreamTimes  # noqa: E402


def test_the_cases_are_the_issues():
    by_key = {case.key: case for case in cases.STREAM_CASES}
    assert [by_key[key].concurrency for key in ("cb_c1", "cb_c8", "cb_c32", "cb_c64")] == [1, 8, 32, 64]
    for key in ("cb_c1", "cb_c8", "cb_c32", "cb_c64"):
        case = by_key[key]
        assert (case.steps, case.base_ms, case.per_stream_us, case.scenario) == (64, 2.0, 20.0, False)
    assert by_key["cb_c32"].step_s() == pytest.approx(0.00264)
    assert by_key["cb_c32"].ideal_pieces_per_s() == pytest.approx(32 / 0.00264)
    scenario = by_key["cb_scenario"]
    assert scenario.scenario and (scenario.steps, scenario.step_s(), scenario.max_streams) == (32, 0.010, 8)
    assert list(scenario.arrivals_ms) == [0, 40, 80, 120, 160, 200, 240, 280]
    assert (cases.CB_MIN_OF_IDEAL, cases.CB_MIN_OVER_WHOLE, cases.CB_MIN_OVER_LITSERVE) == (0.85, 1.5, 1.0)
    assert (cases.CB_FIRST_PIECE_STEPS, cases.CB_FIRST_PIECE_EXTRA_MS, cases.CB_SCENARIO_DONE_STEPS) == (2, 1.0, 34)
    assert ("litserve", "http") in cases.STREAM_SYSTEMS and ("litserve", "grpc") not in cases.STREAM_SYSTEMS


def test_percentiles_interpolate_like_numpy():
    values = list(np.random.default_rng(7).exponential(3.0, size=501))
    for q in (0, 1, 50, 90, 99, 100):
        assert stream_figures.percentile(values, q) == pytest.approx(float(np.percentile(values, q)))
    assert stream_figures.percentile([4.0], 99) == 4.0
    assert stream_figures.percentile([], 50) is None
    with pytest.raises(ValueError, match="percentile 101"):
        stream_figures.percentile([1.0], 101)


def test_the_ideal_is_concurrency_over_one_step():
    assert stream_figures.ideal_pieces_per_s(1, 0.002, 20e-6) == pytest.approx(1 / 0.00202)
    assert stream_figures.ideal_pieces_per_s(64, 0.002, 20e-6) == pytest.approx(64 / 0.00328)


def _stream(start: float, first: float, gap: float, count: int) -> StreamTimes:
    pieces = [start + first + gap * k for k in range(count)]
    return StreamTimes(start=start, pieces=pieces, end=pieces[-1], ok=True)


def test_summarize_counts_only_the_window():
    # Stream A started before the window: its pieces count, its first piece does not.
    a = _stream(0.0, 0.010, 0.002, 100)  # pieces at 0.010 .. 0.208
    # Stream B started inside: first piece after 5 ms, then a piece every 4 ms.
    b = _stream(0.100, 0.005, 0.004, 10)  # pieces at 0.105 .. 0.141
    figures = stream_figures.summarize([a, b], window_start=0.050, window_end=0.150)
    in_a = sum(1 for t in a.pieces if 0.050 <= t < 0.150)
    assert figures["pieces_in_window"] == in_a + 10
    assert figures["pieces_per_s"] == pytest.approx((in_a + 10) / 0.1, abs=0.1)
    assert figures["streams_started_in_window"] == 1
    assert figures["first_piece_p50_ms"] == pytest.approx(5.0)
    assert figures["gap_p50_ms"] == pytest.approx(2.0)  # most gaps in the window are A's
    assert figures["gap_p99_ms"] == pytest.approx(4.0)
    with pytest.raises(ValueError, match="empty measurement window"):
        stream_figures.summarize([a], 1.0, 1.0)


def test_the_scenario_is_judged_on_every_stream():
    step = 0.010
    good = [_stream(0.040 * k, 0.015, step, 32) for k in range(8)]
    figures = stream_figures.scenario_figures(good, step)
    assert (figures["first_limit_ms"], figures["done_limit_ms"]) == (21.0, 340.0)
    assert figures["met"] and figures["first_piece_max_ms"] == pytest.approx(15.0)
    assert figures["last_end_ms"] == pytest.approx(280 + 15 + 310)
    late = good[:7] + [_stream(0.280, 0.025, step, 32)]  # one stream's first piece after 25 ms
    judged = stream_figures.scenario_figures(late, step)
    assert not judged["met_first"] and judged["met_done"] and not judged["met"]
    slow = good[:7] + [_stream(0.280, 0.015, 0.011, 32)]  # 15 + 31 x 11 = 356 ms > 340
    assert not stream_figures.scenario_figures(slow, step)["met_done"]
    planned = [StreamTimes(start=0.040 * k + (0.003 if k == 5 else 0.0), pieces=good[k].pieces, end=good[k].end,
                           ok=True, planned=0.040 * k) for k in range(8)]
    assert stream_figures.scenario_figures(planned, step)["sent_late_max_ms"] == pytest.approx(3.0)
    assert figures["sent_late_max_ms"] is None  # no plan given
    broken = good[:7] + [StreamTimes(start=0.280, pieces=good[7].pieces, end=good[7].end, ok=False, error="x")]
    assert not stream_figures.scenario_figures(broken, step)["met"]


def test_the_client_counts_a_stream_ok_only_when_complete():
    times = StreamTimes(start=0.0, pieces=[0.1, 0.2, 0.3], end=0.3)
    stream_client._check(times, 3, 0, 2, lambda: [0, 1, 2])
    assert times.ok and times.error is None
    short = StreamTimes(start=0.0, pieces=[0.1, 0.2], end=0.2)
    stream_client._check(short, 3, 0, 1, lambda: [0, 1])
    assert not short.ok and short.error == "2 pieces, expected 3: missing 2"
    holes = StreamTimes(start=0.0, pieces=[0.1] * 5)
    stream_client._check(holes, 10, 0, 9, lambda: [0, 1, 5, 9, 9])
    assert holes.error == "5 pieces, expected 10: missing 2-4, 6-8, 1 extra, no end"
    wrong = StreamTimes(start=0.0, pieces=[0.1, 0.2, 0.3], end=0.3)
    stream_client._check(wrong, 3, 1, 3, lambda: [1, 2, 3])
    assert not wrong.ok and "tokens 1..3" in wrong.error
    endless = StreamTimes(start=0.0, pieces=[0.1, 0.2, 0.3])
    stream_client._check(endless, 3, 0, 2, lambda: [0, 1, 2])
    assert not endless.ok and endless.error == "no end"


def _run(pieces_per_s: float, first_p50_ms: float = 4.0) -> dict:
    return {"pieces_per_s": pieces_per_s, "first_piece_p50_ms": first_p50_ms}


def _row(concurrency: int, systems: dict) -> dict:
    case = next(case for case in cases.STREAM_CASES if case.concurrency == concurrency and not case.scenario)
    return {"case": case.key, "concurrency": concurrency, "step_ms": case.step_s() * 1000,
            "ideal_pieces_per_s": case.ideal_pieces_per_s(), "scenario": False,
            "systems": {name: {"rounds": runs} for name, runs in systems.items()}}


def _verdicts(rows):
    return stream_figures.verdicts(
        rows, ideal_concurrency=32, min_of_ideal=0.85, min_over_whole=1.5, first_piece_steps=2,
        first_piece_extra_ms=1.0, min_over_litserve=1.0)


def test_verdicts_take_the_median_of_the_rounds():
    ideal = 32 / 0.00264
    row = _row(32, {
        "whole/grpc": [_run(4000), _run(4000), _run(4000)],
        "continuous/grpc": [_run(0.90 * ideal, 5.0), _run(0.80 * ideal, 7.0), _run(0.88 * ideal, 6.0)],
        "litserve/http": [_run(5000), _run(5000), _run(5000)],
    })  # fmt: skip
    by_target = {v["target"]: v for v in _verdicts([row])}
    ideal_verdict = by_target["pieces/s >= 0.85 x ideal"]
    assert ideal_verdict["value"] == pytest.approx(0.88) and ideal_verdict["met"]
    assert by_target["pieces/s >= 1.5 x whole-batch (grpc)"]["value"] == pytest.approx(0.88 * ideal / 4000, abs=1e-3)
    first = by_target["time to first piece p50 <= 2 steps + 1 ms"]
    assert first["limit"] == pytest.approx(6.28) and first["value"] == 6.0 and first["met"] and first["at_most"]
    assert by_target["pieces/s >= 1 x LitServe (HTTP)"]["met"]
    assert all(v["system"] == "continuous/grpc" for v in by_target.values())


def test_a_missed_target_and_a_missing_peer_are_not_met():
    row = _row(8, {"continuous/http": [_run(1000, 9.0)], "whole/http": [_run(500)]})
    found = {v["target"]: v for v in _verdicts([row])}
    assert "pieces/s >= 0.85 x ideal" not in found  # judged at 32 streams only
    assert not found["time to first piece p50 <= 2 steps + 1 ms"]["met"]
    litserve = found["pieces/s >= 1 x LitServe (HTTP)"]
    assert litserve["value"] is None and not litserve["met"]


def test_a_way_that_lost_streams_meets_no_target():
    ideal = 32 / 0.00264
    lost = dict(_run(0.95 * ideal), failed=3)
    row = _row(32, {"continuous/grpc": [_run(0.95 * ideal), lost, _run(0.95 * ideal)],
                    "whole/grpc": [dict(_run(1000), failed=5)] * 3})
    found = {v["target"]: v for v in _verdicts([row])}
    assert found["pieces/s >= 0.85 x ideal"]["value"] == pytest.approx(0.95)
    assert not found["pieces/s >= 0.85 x ideal"]["met"] and found["pieces/s >= 0.85 x ideal"]["failed"] == 3
    row["systems"]["continuous/grpc"]["rounds"][1] = _run(0.95 * ideal)
    found = {v["target"]: v for v in _verdicts([row])}
    assert found["pieces/s >= 0.85 x ideal"]["met"]  # the compared way's losses do not count against it
    assert found["pieces/s >= 1.5 x whole-batch (grpc)"]["met"]


def test_the_scenario_verdicts_use_the_worst_stream_of_each_round():
    run_ok = {"first_piece_max_ms": 15.0, "done_max_ms": 330.0, "first_limit_ms": 21.0, "done_limit_ms": 340.0,
              "failed": 0}
    run_late = dict(run_ok, first_piece_max_ms=30.0)
    row = {"case": "cb_scenario", "systems": {"continuous/grpc": {"rounds": [run_ok, run_late, run_ok]},
                                              "whole/grpc": {"rounds": [run_late]}}}
    found = stream_figures.scenario_verdicts(row)
    assert [(v["system"], v["met"]) for v in found] == [("continuous/grpc", True), ("continuous/grpc", True)]
    assert found[0]["rounds"] == [15.0, 30.0, 15.0] and found[0]["value"] == 15.0
    row["systems"]["continuous/grpc"]["rounds"] = [run_late, run_late, run_ok]
    assert not stream_figures.scenario_verdicts(row)[0]["met"]


def test_median_figures_keep_what_is_not_a_number():
    merged = stream_figures.median_figures([{"a": 1.0, "b": [1], "c": None}, {"a": 3.0, "b": [2], "c": 2.0},
                                             {"a": 2.0, "b": [3], "c": 1.0}])
    assert merged == {"a": 2.0, "b": [1], "c": None}


def test_arguments_select_the_continuous_cases():
    args = run.parse_args(["--cases", "continuous"])
    assert not args.cases and [case.key for case in args.stream_cases] == [
        "cb_c1", "cb_c8", "cb_c32", "cb_c64", "cb_scenario"]
    args = run.parse_args(["--cases", "cb_c32", "small_c1", "--no-litserve"])
    assert [case.key for case in args.cases] == ["small_c1"] and [c.key for c in args.stream_cases] == ["cb_c32"]
    assert not args.litserve
    everything = run.parse_args([])
    assert len(everything.cases) == len(cases.CASES) and len(everything.stream_cases) == len(cases.STREAM_CASES)
    assert everything.litserve
    assert not run.parse_args(["--quick"]).stream_cases


def _results() -> dict:
    load = _row(32, {"continuous/grpc": [_run(9000)], "litserve/http": [_run(3000)]})
    for entry in load["systems"].values():
        run_figures = dict(entry["rounds"][0], first_piece_p99_ms=9.0, gap_p50_ms=2.7, gap_p99_ms=8.0,
                           client_cpu_percent=60.0, server_cpu_percent=80.0, sleep_late_p50_us=90.0)
        entry["rounds"] = [run_figures]
        of_ideal = round(run_figures["pieces_per_s"] / load["ideal_pieces_per_s"], 3)
        entry["figures"] = dict(run_figures, of_ideal=of_ideal)
    load.update(title="t", label="c=32", steps=64)
    return {
        "machine": {"date": "2026-12-06 22:00 UTC", "nproc": 2, "cpu_model": "cpu", "memory_gib": 24, "kernel": "6",
                    "python": "3.11", "loadavg_at_start": [1.0, 1.0, 1.0]},
        "settings": {"revision": "abc1234", "triton_server": "2.51.0"},
        "continuous": {
            "settings": {"rounds": 3, "warmup_s": 2.0, "window_s": 6.0},
            "litserve": {"status": "ran", "versions": {"litserve": "0.2.19", "fastapi": "1", "uvicorn": "2",
                                                       "python": "3.11"}},
            "idle_cpu_percent": {"ours": 1.0, "litserve": 45.0},
            "cases": [load],
            "verdicts": _verdicts([load]),
        },
    }  # fmt: skip


def test_the_docs_block_replaces_only_its_own(tmp_path):
    results = _results()
    block = report.continuous_block(results, "performance-continuous.png")
    assert block.startswith(report.CONTINUOUS_BEGIN) and block.rstrip().endswith(report.CONTINUOUS_END)
    assert "| 32 | @continuous step function | grpc | 9,000 | 0.74 |" in block
    assert "| 32 | ideal (a step of 2.64 ms) | - | 12,121 | 1.00 |" in block
    assert "LitServe 0.2.19 (FastAPI 1, uvicorn 2, Python 3.11)" in block
    assert "| pieces/s >= 0.85 x ideal | cb_c32 | @continuous step function | grpc | 0.742 x ideal |" in block
    assert "Targets not met: 2 of 4" in block  # 0.74 of the ideal, and no whole-batch run to compare with
    page = tmp_path / "performance.md"
    classic = f"{report.BEGIN}\nthe classic cases\n{report.END}"
    page.write_text(f"# Performance\n\n{classic}\n\nText between.\n\n{report.CONTINUOUS_BEGIN}\nold\n"
                    f"{report.CONTINUOUS_END}\n\nText after.\n")
    report.update_continuous_docs(results, page, "performance-continuous.png")
    text = page.read_text()
    assert classic in text and "Text between." in text and "Text after." in text and "\nold\n" not in text
    assert text.count(report.CONTINUOUS_BEGIN) == 1 and "| 32 | @continuous step function |" in text
    assert "continuous" in report.continuous_text(results) and "LitServe" in report.continuous_text(results)


def test_the_plot_draws_the_cases(tmp_path):
    results = _results()
    path = tmp_path / "plot.png"
    assert report.plot_continuous(results, path) is None
    assert path.stat().st_size > 10_000


def test_each_slot_opens_once_and_runs_its_streams_one_after_another():
    """A slot is a connected client: the closed loop opens each once (its gRPC call) and runs its
    streams on it back to back; the scenario opens every arrival's slot before the first arrival."""
    import asyncio

    opened, running, starts = [], [], []

    def open_slot():
        index = len(opened)
        opened.append(time.monotonic())

        async def start(times):
            assert index not in running, "a slot ran two streams at once"
            running.append(index)
            starts.append(time.monotonic())
            await asyncio.sleep(0.01)
            times.pieces.append(time.monotonic())
            times.end = time.monotonic()
            times.ok = True
            running.remove(index)

        return start

    figures = asyncio.run(stream_client.closed_loop(open_slot, 3, 0.0, 0.05, 0.1))
    assert len(opened) == 3 and figures["failed"] == 0 and figures["streams"] >= 9
    opened.clear()
    starts.clear()
    result = asyncio.run(stream_client.scenario(open_slot, [0.0, 0.02], 0.01))
    assert len(opened) == 2 and len(starts) == 2 and result["failed"] == 0
    assert max(opened) + stream_client.OPEN_AHEAD_S * 0.9 <= min(starts)  # opened ahead of the first arrival
