"""What a benchmark run leaves: the table on stdout, the JSON file, the plot and the docs page.

Everything here reads the results dictionary that `run.py` builds (its layout is the JSON file's,
described in bench/README.md); nothing here measures.
"""

from __future__ import annotations

import datetime
import json
import math
import os
import pathlib
import platform
import re
import subprocess
import sys
from typing import Any, Dict, List, Optional

BEGIN = "<!-- bench:begin (written by bench/run.py; edit outside these markers) -->"
END = "<!-- bench:end -->"
GPU_BEGIN = "<!-- bench-gpu:begin (written by bench/run.py --gpu; edit outside these markers) -->"
GPU_END = "<!-- bench-gpu:end -->"


def _block_pattern(begin: str, end: str) -> re.Pattern:
    return re.compile(re.escape(begin[: begin.index(" (")]) + r".*?" + re.escape(end), re.S)


# -- the machine ---------------------------------------------------------------------------------
def machine() -> Dict[str, Any]:
    """Where the figures come from: CPU, cores, memory, kernel, Python, load, date."""
    cpu_model = "unknown"
    memory_gib = None
    try:
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
        for line in pathlib.Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                memory_gib = round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    return {
        "nproc": len(os.sched_getaffinity(0)),
        "cpu_model": cpu_model,
        "memory_gib": memory_gib,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "loadavg_at_start": list(os.getloadavg()),
    }


def git_revision(repo: pathlib.Path) -> str:
    """The commit measured, with a mark when the working tree's code differs from it.

    Changes under docs/ are not marked: a bench writes its own page and plot there, so an earlier
    partial run (or a page being edited) would otherwise mark a run of committed code as changed."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=repo, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no", "--", ".", ":(exclude)docs"], cwd=repo,
            capture_output=True, text=True, check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return f"{head}+uncommitted changes" if dirty else head


# -- the table -----------------------------------------------------------------------------------
def _ms(microseconds: float) -> str:
    return f"{microseconds / 1000:.2f}"


def _batch(figures: Dict[str, Any]) -> str:
    value = figures.get("batch_mean")
    return f"{value:.1f}" if isinstance(value, (int, float)) else "-"


def table_rows(results: Dict[str, Any]) -> List[List[str]]:
    """The rows of the results table, header first, one row per case and protocol, then start-up."""
    rows = [[
        "case", "proto", "ref infer/s", "ours infer/s", "ratio", "ref avg ms", "ours avg ms", "ref p99 ms",
        "ours p99 ms", "batch ref/ours", "target", "met",
    ]]  # fmt: skip
    for row in results["cases"]:
        ref, ours = row["reference"], row["ours"]
        unstable = " (unstable)" if 0 in (ref.get("stable"), ours.get("stable")) else ""
        rows.append([
            row["title"], row["protocol"], f"{ref['throughput']:,.0f}", f"{ours['throughput']:,.0f}",
            f"{row['ratio']:.2f}", _ms(ref["latency_avg_us"]), _ms(ours["latency_avg_us"]),
            _ms(ref["latency_p99_us"]), _ms(ours["latency_p99_us"]), f"{_batch(ref)} / {_batch(ours)}",
            f">= {row['target_ratio']:.2f}" + (f", +{row['max_extra_latency_ms']:g} ms"
                                                 if row.get("max_extra_latency_ms") else ""),
            ("yes" if row["met"] else "NO") + unstable,
        ])  # fmt: skip
    startup = results.get("startup")
    if startup:
        rows.append([
            "start-up: launch to every model ready (s)", "-", f"{startup['reference_median_s']:.2f} s",
            f"{startup['ours_median_s']:.2f} s", f"{startup['difference_s']:+.2f} s", "", "", "", "", "",
            f"<= +{startup['target_s']:.1f} s", "yes" if startup["met"] else "NO",
        ])  # fmt: skip
    return rows


def text_table(results: Dict[str, Any]) -> str:
    rows = table_rows(results)
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for index, row in enumerate(rows):
        cells = [cell.ljust(width) if i < 2 else cell.rjust(width) for i, (cell, width) in enumerate(zip(row, widths))]
        lines.append("  ".join(cells).rstrip())
        if index == 0:
            lines.append("  ".join("-" * width for width in widths))
    if results.get("multiplex"):
        import multiplex

        lines += ["", *multiplex.text_lines(results["multiplex"])]
    return "\n".join(lines)


def markdown_table(results: Dict[str, Any]) -> str:
    rows = table_rows(results)
    lines = ["| " + " | ".join(rows[0]) + " |", "|" + "|".join(" --- " for _ in rows[0]) + "|"]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows[1:]]
    return "\n".join(lines)


# -- the JSON file -------------------------------------------------------------------------------
def write_json(results: Dict[str, Any], path: pathlib.Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps(results, indent=2) + "\n")
    os.replace(partial, path)


# -- the plot ------------------------------------------------------------------------------------
def plot(results: Dict[str, Any], path: pathlib.Path) -> Optional[str]:
    """Throughput, latency and start-up, ours against the reference; returns why not if it cannot."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib import ticker
    except ImportError:
        return "matplotlib is not installed (`make bench` installs it)"

    cases = results["cases"]
    labels = [f"{row.get('label', row['title'])}\n{row['protocol']}" for row in cases]
    positions = list(range(len(cases)))
    width = 0.38
    colours = {"reference": "#9e9e9e", "ours": "#76b900"}
    figure, axes = plt.subplots(3, 1, figsize=(max(8.0, 1.25 * len(cases) + 3), 12), gridspec_kw={
        "height_ratios": [3, 3, 1.3]})
    throughput_axis, latency_axis, startup_axis = axes
    for axis, key, title in (
        (throughput_axis, "throughput", "Throughput (infer/s, log scale; above ours: the ratio ours / reference)"),
        (latency_axis, "latency_avg_us", "Mean latency (ms, log scale)"),
    ):
        scale = 1.0 if key == "throughput" else 1e-3
        every = [row[side][key] * scale for row in cases for side in ("reference", "ours")]
        # Bars on a log axis start at its bottom: a whole decade below the least value keeps
        # their heights honest.
        bottom = 10 ** math.floor(math.log10(min(every)))
        for offset, side in ((-width / 2, "reference"), (width / 2, "ours")):
            values = [row[side][key] * scale for row in cases]
            bars = axis.bar([p + offset for p in positions], values, width, label=side, color=colours[side])
            if key == "throughput" and side == "ours":
                for bar, row in zip(bars, cases):
                    axis.annotate(f"{row['ratio']:.2f}", (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                                  ha="center", va="bottom", fontsize=8, xytext=(0, 2), textcoords="offset points")
        axis.set_yscale("log")
        axis.set_ylim(bottom, max(every) * 2)
        axis.yaxis.set_major_formatter(ticker.FuncFormatter(lambda value, _: f"{value:g}"))
        axis.yaxis.set_minor_formatter(ticker.NullFormatter())
        axis.set_title(title, fontsize=10)
        axis.set_xticks(positions)
        axis.set_xticklabels(labels, fontsize=8)
        axis.grid(axis="y", which="both", alpha=0.3)
        axis.legend(fontsize=8)
    startup = results.get("startup")
    if startup:
        names = ["reference", "ours"]
        values = [startup["reference_median_s"], startup["ours_median_s"]]
        startup_axis.barh(names, values, color=[colours[n] for n in names])
        for index, value in enumerate(values):
            startup_axis.annotate(f"{value:.2f} s", (value, index), va="center", fontsize=8, xytext=(3, 0),
                                  textcoords="offset points")
        startup_axis.set_title("Start-up: launch to every model ready (s, median)", fontsize=10)
        startup_axis.set_xlim(0, max(values) * 1.2)
    else:
        startup_axis.set_visible(False)
    info = results["machine"]
    figure.suptitle(
        f"pytriton vs plain Triton Python backend, same tritonserver {results['settings']['triton_server']} — "
        f"{info['nproc']} cores, {info['cpu_model']}, {info['date']}",
        fontsize=10,
    )
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return None


# -- the docs page -------------------------------------------------------------------------------
def _gpu_lines(results: Dict[str, Any]) -> List[str]:
    """What the GPU path ran on and what its output check found (nothing for a CPU run)."""
    device = results.get("gpu")
    if not device:
        return []
    lines = [
        f"GPU: {device.get('name')}"
        + (f", {device['memory_gib']} GiB, compute capability {device['capability']}" if "memory_gib" in device
           else "")
        + f"; torch {device.get('torch')} (CUDA {device.get('cuda')}), device `{device.get('device')}`.",
    ]
    checked = device.get("outputs_check")
    if checked:
        tensor, array = checked["torch_tensor"]["max_abs_difference"], checked["numpy"]["max_abs_difference"]
        lines.append(
            "Output check: ours' answers with the callable returning the torch tensor as it is and returning "
            f"a numpy array both match the reference's (max abs difference {tensor:.2g} and {array:.2g})."
        )
    return ["", " ".join(lines)]


def docs_block(results: Dict[str, Any], image_name: str) -> str:
    info, settings = results["machine"], results["settings"]
    unmet = [f"{row['title']} ({row['protocol']})" for row in results["cases"] if not row["met"]]
    startup = results.get("startup")
    if startup and not startup["met"]:
        unmet.append("start-up")
    mux = results.get("multiplex")
    unmet += [f"multiplexing ({name})" for name, met in (mux or {}).get("met", {}).items() if not met]
    load = ", ".join(f"{value:.2f}" for value in info["loadavg_at_start"])
    gpu = bool(results.get("gpu"))
    extra = []
    if settings.get("cpu_loop_count"):
        extra.append(f"cpu_5ms spins {settings['cpu_loop_count']:,} loop iterations per batch")
    if settings.get("cpu_instances_ours"):
        extra.append(f"ours runs its 2 instances as {settings['cpu_instances_ours']}")
    lines = [
        GPU_BEGIN if gpu else BEGIN,
        "",
        f"Measured {info['date']} on {info['nproc']} cores ({info['cpu_model']}), {info['memory_gib']} GiB, "
        f"Linux {info['kernel']}, Python {info['python']}; load average at start {load}. "
        f"Commit {settings['revision']}; tritonserver {settings['triton_server']}; {settings['perf_analyzer']}; "
        f"measurement interval {settings['interval_ms']} ms, {settings.get('rounds', 1)} round(s) per case"
        + (f"; run time {results['duration_s'] / 60:.0f} min" if results.get("duration_s") else "")
        + "".join(f"; {text}" for text in extra if not gpu) + ".",
        *_gpu_lines(results),
        "",
        markdown_table(results),
        "",
        f"![Throughput, latency and start-up, pytriton against the plain Python backend]({image_name})",
        "",
        *([_multiplex_markdown(mux), ""] if mux else []),
        ("Every target met." if not unmet else "Targets not met: " + "; ".join(unmet) + "."),
        "",
        GPU_END if gpu else END,
    ]
    return "\n".join(lines)


def _multiplex_markdown(figures: Dict[str, Any]) -> str:
    import multiplex

    return multiplex.markdown(figures)


def update_docs(results: Dict[str, Any], page: pathlib.Path, image_name: str, gpu: bool = False) -> None:
    """Replace the generated block of the page, the GPU path's with `gpu` (the text around it is kept)."""
    block = docs_block(results, image_name)
    _replace_block(page, _block_pattern(GPU_BEGIN, GPU_END) if gpu else _block_pattern(BEGIN, END), block)


def _replace_block(page: pathlib.Path, pattern: re.Pattern, block: str) -> None:
    """Put `block` where `pattern` matches in the page, or at its end; the rest is kept."""
    text = page.read_text() if page.is_file() else ""
    if pattern.search(text):
        text = pattern.sub(lambda _: block, text, count=1)
    else:
        text = text.rstrip() + ("\n\n" if text.strip() else "") + block + "\n"
    page.write_text(text)


def say(message: str) -> None:
    """Progress for the person waiting: stderr, so stdout holds only the table."""
    print(message, file=sys.stderr, flush=True)


BREAKDOWN_BEGIN = "<!-- bench-breakdown:begin (written by bench/run.py --breakdown; edit outside these markers) -->"
BREAKDOWN_END = "<!-- bench-breakdown:end -->"


def update_breakdown(page: pathlib.Path, table: str, results: Dict[str, Any]) -> None:
    """Replace the breakdown block of the page with `table` (the text around it is kept)."""
    when = results["machine"].get("date", "")
    block = "\n".join([
        BREAKDOWN_BEGIN,
        f"Measured {when} at {results['revision']} on {results['machine'].get('nproc')} cores "
        f"({results['machine'].get('cpu_model')}).",
        "",
        table,
        BREAKDOWN_END,
    ])
    _replace_block(page, _block_pattern(BREAKDOWN_BEGIN, BREAKDOWN_END), block)


# -- the continuous-batching cases (bench/continuous.py) -----------------------------------------
CONTINUOUS_BEGIN = "<!-- bench-continuous:begin (written by bench/run.py; edit outside these markers) -->"
CONTINUOUS_END = "<!-- bench-continuous:end -->"
WAY_NAMES = {"whole": "whole-batch @batch generator", "continuous": "@continuous step function",
             "litserve": "LitServe 0.2.19 ContinuousBatchingLoop"}
WAY_COLOURS = {"whole/grpc": "#9e9e9e", "whole/http": "#cfcfcf", "continuous/grpc": "#76b900",
               "continuous/http": "#3f7f00", "litserve/http": "#7b4fd6"}


def _num(value: Any, digits: int = 1) -> str:
    if value is None:
        return "-"
    return f"{value:,.{digits}f}"


def _way(name: str) -> List[str]:
    way, protocol = name.split("/")
    return [WAY_NAMES[way], protocol]


def continuous_load_rows(results: Dict[str, Any]) -> List[List[str]]:
    """The load cases: one row per concurrency and way of serving, and the ideal."""
    rows = [["streams", "served by", "proto", "pieces/s", "of ideal", "first piece p50 ms", "first piece p99 ms",
             "gap p50 ms", "gap p99 ms", "client CPU %", "server CPU %", "failed streams"]]
    for row in results["continuous"]["cases"]:
        if row["scenario"]:
            continue
        for name, entry in row["systems"].items():
            figures = entry["figures"]
            rows.append([str(row["concurrency"]), *_way(name), _num(figures["pieces_per_s"], 0),
                         _num(figures["of_ideal"], 2), _num(figures["first_piece_p50_ms"]),
                         _num(figures["first_piece_p99_ms"]), _num(figures["gap_p50_ms"], 2),
                         _num(figures["gap_p99_ms"], 2), _num(figures["client_cpu_percent"], 0),
                         _num(figures.get("server_cpu_percent"), 0), str(figures.get("failed") or 0)])
        rows.append([str(row["concurrency"]), f"ideal (a step of {row['step_ms']:g} ms)", "-",
                     _num(row["ideal_pieces_per_s"], 0), "1.00", "-", "-", _num(row["step_ms"], 2), "-", "-", "-",
                     "-"])
    return rows


def continuous_scenario_rows(results: Dict[str, Any]) -> List[List[str]]:
    """The scenario: when the streams got their first piece and ended, after their arrival (medians over the rounds)."""
    rows = [["served by", "proto", "first piece after arrival, ms (fastest-slowest stream)",
             "done after arrival, ms (fastest-slowest)", "last stream ended, ms after the first arrived",
             "sent late, ms (most)", "failed streams"]]
    for row in results["continuous"]["cases"]:
        if not row["scenario"]:
            continue
        for name, entry in row["systems"].items():
            figures = entry["figures"]
            rows.append([*_way(name), f"{_num(figures['first_piece_min_ms'])}-{_num(figures['first_piece_max_ms'])}",
                         f"{_num(figures['done_min_ms'])}-{_num(figures['done_max_ms'])}",
                         _num(figures["last_end_ms"]), _num(figures.get("sent_late_max_ms")),
                         str(figures.get("failed") or 0)])
    return rows


def continuous_verdict_rows(results: Dict[str, Any]) -> List[List[str]]:
    rows = [["target", "case", "served by", "proto", "measured (median)", "each round", "limit", "met"]]
    for verdict in results["continuous"]["verdicts"]:
        unit = f" {verdict['unit']}" if verdict["unit"] else ""
        rows.append([
            verdict["target"], verdict["case"], *_way(verdict["system"]),
            "not measured" if verdict["value"] is None else f"{verdict['value']:.3g}{unit}",
            ", ".join(f"{value:.3g}" for value in verdict["rounds"]) or "-",
            ("<= " if verdict["at_most"] else ">= ") + f"{verdict['limit']:g}",
            "yes" if verdict["met"] else ("NO (streams failed)" if verdict.get("failed") else "NO"),
        ])  # fmt: skip
    return rows


def _text(rows: List[List[str]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for index, row in enumerate(rows):
        lines.append("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())
        if index == 0:
            lines.append("  ".join("-" * width for width in widths))
    return "\n".join(lines)


def _markdown(rows: List[List[str]]) -> str:
    lines = ["| " + " | ".join(rows[0]) + " |", "|" + "|".join(" --- " for _ in rows[0]) + "|"]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows[1:]]
    return "\n".join(lines)


def _continuous_tables(results: Dict[str, Any], form: Any) -> List[str]:
    parts = []
    if any(not row["scenario"] for row in results["continuous"]["cases"]):
        parts.append(form(continuous_load_rows(results)))
    if any(row["scenario"] for row in results["continuous"]["cases"]):
        parts.append(form(continuous_scenario_rows(results)))
    parts.append(form(continuous_verdict_rows(results)))
    return parts


def continuous_text(results: Dict[str, Any]) -> str:
    return "\n\n".join(_continuous_tables(results, _text))


def _median_round(entry: Dict[str, Any]) -> Dict[str, Any]:
    """The scenario's round whose slowest first piece is the median one (the round the plot shows)."""
    rounds = sorted(entry["rounds"], key=lambda run: run.get("first_piece_max_ms") or 0.0)
    return rounds[(len(rounds) - 1) // 2]


def plot_continuous(results: Dict[str, Any], path: pathlib.Path) -> Optional[str]:
    """Pieces/s, time to first piece and gaps against concurrency, and the scenario's streams; why not, if not."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib import ticker
    except ImportError:
        return "matplotlib is not installed (`make bench` installs it)"
    rows = [row for row in results["continuous"]["cases"] if not row["scenario"]]
    scenario = next((row for row in results["continuous"]["cases"] if row["scenario"]), None)
    figure, axes = plt.subplots(2, 2, figsize=(14, 10))
    names = sorted({name for row in rows for name in row["systems"]}, key=list(WAY_COLOURS).index)
    concurrency = [row["concurrency"] for row in rows]
    panels = (
        (axes[0][0], "pieces_per_s", None, "Pieces per second (log scale)"),
        (axes[0][1], "first_piece_p50_ms", "first_piece_p99_ms", "Time to first piece, ms: p50 (solid), p99 (dotted)"),
        (axes[1][0], "gap_p50_ms", "gap_p99_ms",
         "Gap between pieces, ms: p50 (solid), p99 (dotted); a p50 of 0 (pieces bunched) not drawn"),
    )
    for axis, key, p99, title in panels:
        if not rows:
            axis.set_visible(False)
            continue
        for name in names:
            points = [(row["concurrency"], row["systems"][name]["figures"]) for row in rows if name in row["systems"]]
            label = f"{WAY_NAMES[name.split('/')[0]]} ({name.split('/')[1]})"
            # A log axis has no 0: a gap p50 of 0 (pieces that arrived together in one read) is left out.
            shown = [(c, f[key]) for c, f in points if f.get(key)]
            axis.plot([c for c, _ in shown], [v for _, v in shown], marker="o", color=WAY_COLOURS[name], label=label)
            if p99:
                shown = [(c, f[p99]) for c, f in points if f.get(p99)]
                axis.plot([c for c, _ in shown], [v for _, v in shown], linestyle=":", marker=".",
                          color=WAY_COLOURS[name])
        if key == "pieces_per_s":
            axis.plot(concurrency, [row["ideal_pieces_per_s"] for row in rows], linestyle="--", color="black",
                      label="ideal: concurrency / step")
        elif key == "first_piece_p50_ms":
            axis.plot(concurrency, [2 * row["step_ms"] + 1 for row in rows], linestyle="--", color="black",
                      label="target: 2 steps + 1 ms")
        else:
            axis.plot(concurrency, [row["step_ms"] for row in rows], linestyle="--", color="black",
                      label="one step")
        axis.set_xscale("log", base=2)
        axis.set_yscale("log")
        axis.set_xticks(concurrency)
        axis.xaxis.set_major_formatter(ticker.FuncFormatter(lambda value, _: f"{value:g}"))
        axis.yaxis.set_major_formatter(ticker.FuncFormatter(lambda value, _: f"{value:g}"))
        axis.yaxis.set_minor_formatter(ticker.NullFormatter())
        axis.set_xlabel("concurrent streams (64 steps each)")
        axis.set_title(title, fontsize=10)
        axis.grid(which="both", alpha=0.3)
        axis.legend(fontsize=7)
    axis = axes[1][1]
    if scenario is None:
        axis.set_visible(False)
    else:
        labels = []
        for group, (name, entry) in enumerate(scenario["systems"].items()):
            run = _median_round(entry)
            for index, stream in enumerate(run["streams"]):
                y = group * (len(run["streams"]) + 2) + index
                arrival, first, done = stream["arrival_ms"], stream["first_piece_ms"], stream["done_ms"]
                if first is not None:
                    axis.plot([arrival, arrival + first], [y, y], color=WAY_COLOURS[name], alpha=0.35, linewidth=4)
                if done is not None:
                    axis.plot([arrival + (first or 0), arrival + done], [y, y], color=WAY_COLOURS[name], linewidth=4)
            labels.append((group * (len(run["streams"]) + 2) + len(run["streams"]) / 2 - 0.5,
                           f"{name.split('/')[0]}\n{name.split('/')[1]}"))
        axis.set_yticks([y for y, _ in labels])
        axis.set_yticklabels([text for _, text in labels], fontsize=8)
        axis.invert_yaxis()
        axis.set_xlabel("ms from the first stream's arrival")
        axis.set_title(f"Scenario: 8 streams 40 ms apart, 32 steps of {scenario['step_ms']:g} ms\n"
                       "(pale: waiting for the first piece; dark: streaming)", fontsize=10)
        axis.grid(axis="x", alpha=0.3)
    info = results["machine"]
    figure.suptitle(f"Continuous batching: pytriton's @continuous, its whole-batch generator and LitServe, the same "
                    f"step (2 ms + 20 µs per stream) — {info['nproc']} cores, {info['date']}", fontsize=10)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return None


def continuous_block(results: Dict[str, Any], image_name: str) -> str:
    info, settings, measured = results["machine"], results["settings"], results["continuous"]
    load = ", ".join(f"{value:.2f}" for value in info["loadavg_at_start"])
    peer = measured["litserve"]
    versions = peer.get("versions") or {}
    peer_text = (f"LitServe {versions.get('litserve')} (FastAPI {versions.get('fastapi')}, uvicorn "
                 f"{versions.get('uvicorn')}, Python {versions.get('python')}), its own environment"
                 if peer["status"] == "ran" else f"LitServe: {peer['status']}")
    idle = ", ".join(f"{name} {value:g} %" for name, value in measured.get("idle_cpu_percent", {}).items())
    late = [entry["figures"].get("sleep_late_p50_us") for row in measured["cases"] if not row["scenario"]
            for entry in row["systems"].values()]
    late = [value for value in late if value is not None]
    late90 = [run.get("sleep_late_p90_us") for row in measured["cases"] for entry in row["systems"].values()
              for run in entry["rounds"]]
    late90 = [value for value in late90 if value is not None]
    loads = [run.get("loadavg_1min") for row in measured["cases"] for entry in row["systems"].values()
             for run in entry["rounds"]]
    loads = [value for value in loads if value is not None]
    client_loops = sorted({run["client_loop"] for row in measured["cases"] for entry in row["systems"].values()
                           for run in entry["rounds"] if run.get("client_loop")})
    unmet = [verdict for verdict in measured["verdicts"] if not verdict["met"]]
    lines = [
        CONTINUOUS_BEGIN,
        "",
        f"Measured {info['date']} on {info['nproc']} cores ({info['cpu_model']}), {info['memory_gib']} GiB, "
        f"Linux {info['kernel']}, Python {info['python']}; load average at start {load}. "
        f"Commit {settings['revision']}; tritonserver {settings['triton_server']}; {peer_text}; "
        f"{measured['settings']['rounds']} round(s), each run {measured['settings']['warmup_s']:g} s of warm-up "
        f"then a {measured['settings']['window_s']:g} s window"
        + (f"; run time {results['duration_s'] / 60:.0f} min" if results.get("duration_s") else "")
        + f". Idle CPU (% of one core): {idle}."
        + (f" The load generator's event loop: {', '.join(client_loops)}." if client_loops else "")
        + (f" While the load ran, a sleep of one step in the harness woke {min(late):.0f}-{max(late):.0f} µs late "
           f"at the median of a run, {min(late90) / 1000:.1f}-{max(late90) / 1000:.1f} ms at its 90th percentile."
           if late and late90 else "")
        + (f" Load average (1 min) as the runs began: {min(loads):.1f}-{max(loads):.1f} on {info['nproc']} cores."
           if loads else ""),
        "",
        *[part + "\n" for part in _continuous_tables(results, _markdown)],
        *(["Streams that failed (the client checks each: its n pieces, tokens 0 to n - 1, then its end): "
           + "; ".join(measured["failures"]) + ".", ""] if measured.get("failures") else []),
        f"![Continuous batching: pieces/s, time to first piece, gaps, and the scenario]({image_name})",
        "",
        ("Every target met." if not unmet else f"Targets not met: {len(unmet)} of {len(measured['verdicts'])} (the "
         "NO rows above)."),
        "",
        CONTINUOUS_END,
    ]
    return "\n".join(lines)


def update_continuous_docs(results: Dict[str, Any], page: pathlib.Path, image_name: str) -> None:
    """Replace the continuous-batching block of the page (the text around it is kept)."""
    _replace_block(page, _block_pattern(CONTINUOUS_BEGIN, CONTINUOUS_END), continuous_block(results, image_name))
