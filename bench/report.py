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
