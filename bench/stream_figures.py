"""The figures and verdicts of the continuous-batching cases, from the timings of streams (pure).

The load generator (bench/stream_client.py) records, for every stream it ran, when it sent the
request and when each piece and the end arrived (`StreamTimes`); everything here turns such
records into the figures the cases report and judges them against the targets of issue 42:

* pieces/s: pieces that arrived within the measurement window, over its length;
* time to first piece: from sending the request to its first piece, for the streams started
  within the window (their first piece may come after it);
* gap between pieces: between two pieces of one stream, for the later piece within the window;
* the ideal: concurrency streams each getting a piece every step, ``c / step_seconds(c)``.

Percentiles interpolate between the two nearest ranks (numpy's default, "linear"). Nothing here
measures or imports anything outside the standard library.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from typing import Any, Dict, List, Optional, Sequence

from step_model import step_seconds


@dataclasses.dataclass
class StreamTimes:
    """One stream as its requester saw it (times in seconds on one monotonic clock).

    `pieces` holds the arrival of every piece, in order; `end` when the stream's end arrived
    (None if it never did); `ok` whether it got the pieces it asked for, as the server was to
    send them (``error`` says why not).
    """

    start: float
    pieces: List[float] = dataclasses.field(default_factory=list)
    end: Optional[float] = None
    ok: bool = False
    error: Optional[str] = None
    planned: Optional[float] = None  # the scenario: when it was to be sent (the client's timer may slip)


def percentile(values: Sequence[float], q: float) -> Optional[float]:
    """The `q`-th percentile (0-100) of `values`, interpolated between the nearest ranks; None when empty."""
    if not values:
        return None
    if not 0 <= q <= 100:
        raise ValueError(f"percentile {q!r}: expected 0..100")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def ideal_pieces_per_s(concurrency: int, base_s: float, per_stream_s: float) -> float:
    """Pieces per second when `concurrency` streams share every step and each step costs no more than the model's."""
    return concurrency / step_seconds(concurrency, base_s, per_stream_s)


def _ms(value: Optional[float]) -> Optional[float]:
    return None if value is None else round(value * 1000, 3)


def summarize(streams: Sequence[StreamTimes], window_start: float, window_end: float) -> Dict[str, Any]:
    """The figures of a closed-loop run whose measurement window is [window_start, window_end)."""
    if window_end <= window_start:
        raise ValueError(f"empty measurement window [{window_start}, {window_end})")
    pieces = 0
    first: List[float] = []
    gaps: List[float] = []
    for stream in streams:
        times = stream.pieces
        pieces += sum(1 for t in times if window_start <= t < window_end)
        if window_start <= stream.start < window_end and times:
            first.append(times[0] - stream.start)
        for before, after in zip(times, times[1:]):
            if window_start <= after < window_end:
                gaps.append(after - before)
    started = [stream for stream in streams if window_start <= stream.start < window_end]
    return {
        "pieces_per_s": round(pieces / (window_end - window_start), 1),
        "pieces_in_window": pieces,
        "streams_started_in_window": len(started),
        "first_piece_p50_ms": _ms(percentile(first, 50)),
        "first_piece_p99_ms": _ms(percentile(first, 99)),
        "gap_p50_ms": _ms(percentile(gaps, 50)),
        "gap_p99_ms": _ms(percentile(gaps, 99)),
        "gaps": len(gaps),
    }


def scenario_figures(streams: Sequence[StreamTimes], step_s: float, first_steps: float = 2,
                     first_extra_s: float = 0.001, done_steps: float = 34) -> Dict[str, Any]:
    """The scenario's per-stream figures and its verdict: every stream's first piece within
    `first_steps` steps + `first_extra_s` of its arrival, and its end within `done_steps` steps.

    `streams` in arrival order; times are reported in ms from the first stream's arrival."""
    origin = min(stream.start for stream in streams)
    first_limit, done_limit = first_steps * step_s + first_extra_s, done_steps * step_s
    rows = []
    for stream in streams:
        first = stream.pieces[0] - stream.start if stream.pieces else None
        done = stream.end - stream.start if stream.end is not None else None
        rows.append({
            "arrival_ms": _ms(stream.start - origin), "first_piece_ms": _ms(first), "done_ms": _ms(done),
            "last_end_ms": _ms(stream.end - origin) if stream.end is not None else None, "ok": stream.ok,
            "sent_late_ms": _ms(stream.start - stream.planned) if stream.planned is not None else None,
        })  # fmt: skip
    firsts = [row["first_piece_ms"] for row in rows]
    dones = [row["done_ms"] for row in rows]
    met_first = all(stream.ok for stream in streams) and all(v is not None and v <= first_limit * 1000 for v in firsts)
    met_done = all(stream.ok for stream in streams) and all(v is not None and v <= done_limit * 1000 for v in dones)
    ends = [row["last_end_ms"] for row in rows if row["last_end_ms"] is not None]
    return {
        "streams": rows,
        "first_piece_min_ms": min((v for v in firsts if v is not None), default=None),
        "first_piece_max_ms": max((v for v in firsts if v is not None), default=None),
        "done_min_ms": min((v for v in dones if v is not None), default=None),
        "done_max_ms": max((v for v in dones if v is not None), default=None),
        "last_end_ms": max(ends, default=None),
        "sent_late_max_ms": max((row["sent_late_ms"] for row in rows if row["sent_late_ms"] is not None),
                                default=None),
        "first_limit_ms": round(first_limit * 1000, 3),
        "done_limit_ms": round(done_limit * 1000, 3),
        "met_first": met_first,
        "met_done": met_done,
        "met": met_first and met_done,
    }


# -- several rounds, and the verdicts ------------------------------------------------------------
def median_figures(runs: Sequence[Dict[str, Any]]) -> Dict[str, Any]:
    """Each numeric figure's median over the rounds; any other figure as the first round has it."""
    merged: Dict[str, Any] = {}
    for key, first in runs[0].items():
        values = [run.get(key) for run in runs]
        numbers = [value for value in values if isinstance(value, (int, float)) and not isinstance(value, bool)]
        if len(numbers) == len(values):
            merged[key] = round(statistics.median(numbers), 3)
        else:
            merged[key] = first
    return merged


def _system(row: Dict[str, Any], name: str) -> Optional[List[Dict[str, Any]]]:
    entry = row["systems"].get(name)
    return entry["rounds"] if entry and entry.get("rounds") else None


def _ratio_rounds(numerators: List[Dict[str, Any]], denominators: List[Dict[str, Any]], key: str) -> List[float]:
    return [round(a[key] / b[key], 3) for a, b in zip(numerators, denominators) if b.get(key)]


def _verdict(target: str, case: str, system: str, rounds: List[float], limit: float, at_most: bool = False,
             unit: str = "", failed: int = 0) -> Dict[str, Any]:
    """A target's verdict: the median of `rounds` against `limit`; never met while the judged way
    lost streams (`failed`, over every round)."""
    value = round(statistics.median(rounds), 3) if rounds else None
    met = value is not None and (value <= limit if at_most else value >= limit) and not failed
    return {"target": target, "case": case, "system": system, "value": value, "limit": limit, "unit": unit,
            "at_most": at_most, "rounds": rounds, "failed": failed, "met": met}


def _failed(runs: List[Dict[str, Any]]) -> int:
    return sum(run.get("failed") or 0 for run in runs)


def verdicts(rows: Sequence[Dict[str, Any]], *, ideal_concurrency: int, min_of_ideal: float, min_over_whole: float,
             first_piece_steps: float, first_piece_extra_ms: float, min_over_litserve: float) -> List[Dict[str, Any]]:
    """The targets of the load cases, judged on the median over the rounds (ratios: of each round's
    ratio, both sides measured next to each other). A target whose figures are missing (LitServe
    not run) has value None and is not met."""
    found: List[Dict[str, Any]] = []
    for row in rows:
        case, concurrency = row["case"], row["concurrency"]
        for protocol in ("grpc", "http"):
            ours = _system(row, f"continuous/{protocol}")
            if ours is None:
                continue
            name = f"continuous/{protocol}"
            failed = _failed(ours)
            if concurrency == ideal_concurrency:
                found.append(_verdict(
                    f"pieces/s >= {min_of_ideal:g} x ideal", case, name,
                    [round(run["pieces_per_s"] / row["ideal_pieces_per_s"], 3) for run in ours], min_of_ideal,
                    unit="x ideal", failed=failed))
                whole = _system(row, f"whole/{protocol}")
                found.append(_verdict(
                    f"pieces/s >= {min_over_whole:g} x whole-batch ({protocol})", case, name,
                    _ratio_rounds(ours, whole, "pieces_per_s") if whole else [], min_over_whole, unit="x whole",
                    failed=failed))
            limit_ms = first_piece_steps * row["step_ms"] + first_piece_extra_ms
            found.append(_verdict(
                f"time to first piece p50 <= {first_piece_steps:g} steps + {first_piece_extra_ms:g} ms", case, name,
                [run["first_piece_p50_ms"] for run in ours if run.get("first_piece_p50_ms") is not None],
                round(limit_ms, 3), at_most=True, unit="ms", failed=failed))
            litserve = _system(row, "litserve/http")
            found.append(_verdict(
                f"pieces/s >= {min_over_litserve:g} x LitServe (HTTP)", case, name,
                _ratio_rounds(ours, litserve, "pieces_per_s") if litserve else [], min_over_litserve,
                unit="x LitServe", failed=failed))
    return found


def scenario_verdicts(row: Dict[str, Any]) -> List[Dict[str, Any]]:
    """The scenario's two targets for each continuous system: the worst stream of each round, median over rounds."""
    found = []
    for protocol in ("grpc", "http"):
        name = f"continuous/{protocol}"
        runs = _system(row, name)
        if runs is None:
            continue
        first_limit, done_limit = runs[0]["first_limit_ms"], runs[0]["done_limit_ms"]
        failed = _failed(runs)
        found.append(_verdict("every stream's first piece within 2 steps + 1 ms of its arrival", row["case"], name,
                              [run["first_piece_max_ms"] for run in runs if run["first_piece_max_ms"] is not None],
                              first_limit, at_most=True, unit="ms (worst stream)", failed=failed))
        found.append(_verdict("every stream done within 34 steps of its arrival", row["case"], name,
                              [run["done_max_ms"] for run in runs if run["done_max_ms"] is not None],
                              done_limit, at_most=True, unit="ms (worst stream)", failed=failed))
    return found
