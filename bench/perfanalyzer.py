"""perf_analyzer, the field's standard load generator: fetch it, run it, read its report.

The binary comes from the ``tritonclient==2.41.1`` manylinux x86_64 wheel (newer tritonclient
wheels no longer carry it), fetched with pip and checked against a pinned sha256. Of its two
libraries missing on a bare machine, both are among the bundled server's libraries under other
names; a private folder of symbolic links with the names perf_analyzer asks for goes on its
``LD_LIBRARY_PATH``, so nothing is installed system-wide.
"""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import os
import pathlib
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from typing import Dict, List, Optional, Sequence, Tuple

from children import Child

TRITONCLIENT_VERSION = "2.41.1"
WHEEL_NAME = f"tritonclient-{TRITONCLIENT_VERSION}-py3-none-manylinux1_x86_64.whl"
WHEEL_SHA256 = "22ad56ae5ab25518862dec85af0a8246a32a1e14e2ee1d86f1444ce432c254e1"
WHEEL_MEMBER = f"tritonclient-{TRITONCLIENT_VERSION}.data/data/bin/perf_analyzer"
# soname perf_analyzer asks for -> glob of the file among the server libraries.
LIBRARY_LINKS = {"libb64.so.0d": "libb64-*.so.0d", "libcudart.so.12": "libcudart-*.so.12.6.77"}


class BenchError(RuntimeError):
    """A step of the benchmark failed; the message says which and why."""


def cache_dir() -> pathlib.Path:
    """``$PYTRITON_CACHE_DIR/bench``; the cache root defaults to ``${XDG_CACHE_HOME:-~/.cache}/pytriton``."""
    root = os.environ.get("PYTRITON_CACHE_DIR")
    if not root:
        xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        root = os.path.join(xdg, "pytriton")
    return pathlib.Path(root).expanduser() / "bench"


def _sha256(path: pathlib.Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _fetch_wheel(cache: pathlib.Path) -> pathlib.Path:
    wheel = cache / WHEEL_NAME
    if wheel.is_file() and _sha256(wheel) == WHEEL_SHA256:
        return wheel
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".download-", dir=str(cache)) as tmp:
        command = [
            sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--no-input",
            "--progress-bar=off", "--platform", "manylinux1_x86_64", "--dest", tmp,
            f"tritonclient=={TRITONCLIENT_VERSION}",
        ]  # fmt: skip
        print(f"bench: fetching perf_analyzer: {' '.join(command)}", file=sys.stderr)
        result = subprocess.run(command, stdout=sys.stderr, stderr=sys.stderr, check=False)
        downloaded = pathlib.Path(tmp) / WHEEL_NAME
        if result.returncode != 0 or not downloaded.is_file():
            raise BenchError(
                f"could not download tritonclient=={TRITONCLIENT_VERSION} (pip exited with {result.returncode}); "
                f"perf_analyzer comes from that wheel. Put {WHEEL_NAME} into {cache} yourself, or pass "
                "--perf-analyzer PATH"
            )
        actual = _sha256(downloaded)
        if actual != WHEEL_SHA256:
            raise BenchError(f"{WHEEL_NAME} from the pip index has sha256 {actual}, expected {WHEEL_SHA256}")
        os.replace(downloaded, wheel)
    return wheel


def _link_libraries(server_lib: pathlib.Path, target: pathlib.Path) -> None:
    target.mkdir(parents=True, exist_ok=True)
    for soname, pattern in LIBRARY_LINKS.items():
        matches = sorted(server_lib.glob(pattern))
        if not matches:
            raise BenchError(
                f"perf_analyzer needs {soname}, but the server libraries in {server_lib} have no {pattern}"
            )
        link = target / soname
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(matches[0])


@dataclasses.dataclass(frozen=True)
class PerfAnalyzer:
    """An installed perf_analyzer and the environment it runs in."""

    binary: pathlib.Path
    library_dir: pathlib.Path

    @classmethod
    def install(cls, server_lib: pathlib.Path, binary: Optional[pathlib.Path] = None) -> PerfAnalyzer:
        """Fetch (once, cached) and lay out perf_analyzer; `binary` uses an existing one instead."""
        cache = cache_dir()
        library_dir = cache / "lib"
        _link_libraries(server_lib, library_dir)
        if binary is not None:
            return cls(binary.resolve(), library_dir)
        if platform.machine() != "x86_64":
            raise BenchError(
                f"perf_analyzer is fetched from a manylinux x86_64 wheel; this machine is {platform.machine()}. "
                "Pass --perf-analyzer PATH to one built for it"
            )
        target = cache / "bin" / f"perf_analyzer-{TRITONCLIENT_VERSION}"
        if not target.is_file():
            wheel = _fetch_wheel(cache)
            target.parent.mkdir(parents=True, exist_ok=True)
            partial = target.with_suffix(".partial")
            with zipfile.ZipFile(wheel) as archive, archive.open(WHEEL_MEMBER) as source, partial.open("wb") as sink:
                shutil.copyfileobj(source, sink)
            partial.chmod(0o755)
            os.replace(partial, target)
        return cls(target, library_dir)

    def environment(self) -> Dict[str, str]:
        env = dict(os.environ)
        env["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, [str(self.library_dir), env.get("LD_LIBRARY_PATH")]))
        return env

    def version(self) -> str:
        result = subprocess.run(
            [str(self.binary), "--version"], env=self.environment(), capture_output=True, text=True, timeout=30,
            check=False,
        )
        return (result.stdout or result.stderr).strip().splitlines()[0] if result.returncode == 0 else "unknown"

    def measure(
        self,
        *,
        model: str,
        url: str,
        protocol: str,
        shape: str,
        concurrency: int,
        interval_ms: int,
        workdir: pathlib.Path,
        label: str,
        stabilize: bool = True,
        headers: Sequence[str] = (),
        streaming: bool = False,
    ) -> Dict[str, Optional[float]]:
        """One perf_analyzer run at one concurrency; returns its figures (latencies in microseconds).

        perf_analyzer repeats windows of `interval_ms` until three in a row agree within 10 %. On
        a noisy machine that may never happen; then the run is repeated once taking the mean of
        three windows whatever their spread, and ``stable`` is 0 in the figures. Without
        `stabilize` only that second form runs (``stable`` is None: not checked). `headers`
        (``"Name:Value"``) go with every request, e.g. the access token perf_analyzer needs to
        read a restricted statistics API.
        """
        workdir.mkdir(parents=True, exist_ok=True)
        base = [
            str(self.binary), "-m", model, "-u", url, "-i", protocol, "--shape", shape,
            "--concurrency-range", str(concurrency), "--measurement-interval", str(interval_ms), "--verbose-csv",
        ]  # fmt: skip
        for header in headers:
            base += ["-H", header]
        if protocol == "http" and concurrency >= ASYNC_HTTP_FROM:
            # perf_analyzer's synchronous HTTP client runs one thread per request in flight, and
            # its libcurl threads can poll with a zero timeout: 64 of them on 2 cores spun for
            # minutes in two full runs (61 threads runnable, Triton idle). Its asynchronous mode
            # keeps the same requests in flight from a few threads, for both servers alike.
            base.append("--async")
        if streaming:  # a decoupled model: gRPC bidirectional stream, one request in flight per stream slot
            base.append("--streaming")
        any_spread = ["--stability-percentage", "1000", "--max-trials", "3"]
        attempts: List[Tuple[Optional[float], List[str]]] = (
            [(1.0, []), (0.0, any_spread)] if stabilize else [(None, any_spread)]
        )
        log = workdir / f"{label}.log"
        returncode: Optional[int] = None
        for stable, extra in attempts:
            report = workdir / f"{label}.csv"
            report.unlink(missing_ok=True)
            command = [*base, *extra, "-f", str(report)]
            start = log.stat().st_size if log.exists() else 0
            # perf_analyzer's own HTTP client fails now and then at concurrency 64 on 2 cores: its
            # synchronous threads spin in libcurl (a hang), its asynchronous mode crashed once
            # ("Unexpected error: received CURLMsg=0", SIGSEGV; three times in a row once). Such a run
            # goes again, up to four times.
            for _ in range(5):
                with log.open("a") as output:
                    output.write("$ " + " ".join(command) + "\n")
                    output.flush()
                    child = Child(command, self.environment(), output)
                    try:
                        returncode = child.wait(timeout_s=interval_ms / 1000 * 14 + 60)
                        if returncode is None:  # hung: what the server says now goes into the log
                            output.write(_server_state(url, protocol, headers, client_pid=child.pid))
                            output.flush()
                    finally:
                        child.stop()
                if returncode is not None and returncode >= 0:
                    break
            if returncode == 0 and report.is_file():
                figures: Dict[str, Optional[float]] = dict(_parse_report(report))
                figures["stable"] = stable
                return figures
            with log.open("rb") as output:
                output.seek(start)
                if b"Failed to obtain stable measurement" not in output.read():
                    break
        raise BenchError(f"perf_analyzer failed for {label} (exit code {returncode}); its output:\n{_tail(log)}")


ASYNC_HTTP_FROM = 64
"""The concurrency from which HTTP runs use perf_analyzer's asynchronous mode (see `run`)."""


def _threads_waiting(pid: int) -> str:
    """Where each thread of process `pid` sleeps in the kernel (its wchan), counted."""
    counts: Dict[str, int] = {}
    for task in pathlib.Path(f"/proc/{pid}/task").glob("*"):
        try:
            where = (task / "wchan").read_text().strip() or "running"
            name = (task / "comm").read_text().strip()
        except OSError:
            continue
        counts[f"{name}:{where}"] = counts.get(f"{name}:{where}", 0) + 1
    return ", ".join(f"{key} x{count}" for key, count in sorted(counts.items()))


def _server_state(url: str, protocol: str, headers: Sequence[str], client_pid: Optional[int] = None) -> str:
    """For a perf_analyzer run that hung: the server's HTTP readiness and pending requests, and
    the state of the load generator's connections (their queues show who waits for whom)."""
    import urllib.request

    lines = [f"--- perf_analyzer hung; the server at {url} ({protocol}) now:"]
    host, _, port = url.rpartition(":")
    if protocol == "http":
        request = urllib.request.Request(f"http://{url}/v2/health/ready")
        for header in headers:
            name, _, value = header.partition(":")
            request.add_header(name, value)
        try:
            with urllib.request.urlopen(request, timeout=2) as response:
                lines.append(f"ready: {response.status}")
        except Exception as exc:  # noqa: BLE001 - a diagnosis, whatever it finds
            lines.append(f"ready: {exc}")
    ss = subprocess.run(["ss", "-tn", f"( dport = :{port} or sport = :{port} )"], capture_output=True, text=True,
                        timeout=10)
    busy = [line for line in ss.stdout.splitlines()[1:] if line.split()[1:3] != ["0", "0"]]
    lines.append(f"connections: {len(ss.stdout.splitlines()) - 1}, with data queued: {len(busy)}")
    lines += busy[:20]
    detail = subprocess.run(["ss", "-tnoim", f"( dport = :{port} or sport = :{port} )"], capture_output=True,
                            text=True, timeout=10)
    lines += ["ss -tnoim:", *detail.stdout.splitlines()[:400]]
    if client_pid is not None:
        lines.append(f"load generator threads: {_threads_waiting(client_pid)}")
    listening = subprocess.run(["ss", "-tlnpH", f"( sport = :{port} )"], capture_output=True, text=True, timeout=10)
    for pid in sorted(set(re.findall(r"pid=(\d+)", listening.stdout))):
        lines.append(f"server {pid} threads: {_threads_waiting(int(pid))}")
    return "\n".join(lines) + "\n"


def _parse_report(report: pathlib.Path) -> Dict[str, float]:
    """The figures of perf_analyzer's one-row CSV.

    ``throughput`` is its "Inferences/Second": requests completed per second (for a decoupled
    model, streams ended by their final response). For a decoupled model perf_analyzer 2.41 adds
    "Response Throughput" (every response counts), kept as ``response_throughput``.
    """
    with report.open(newline="") as stream:
        rows = list(csv.DictReader(stream))
    if len(rows) != 1:
        raise BenchError(f"{report}: expected one row of figures, found {len(rows)}")
    row = rows[0]
    columns = {
        "throughput": "Inferences/Second",
        "latency_avg_us": "Avg latency",
        "latency_p50_us": "p50 latency",
        "latency_p90_us": "p90 latency",
        "latency_p99_us": "p99 latency",
    }
    try:
        figures = {key: float(row[column]) for key, column in columns.items()}
    except (KeyError, ValueError) as exc:
        raise BenchError(f"{report}: unexpected perf_analyzer CSV ({exc}); columns: {list(row)}") from exc
    if row.get("Response Throughput"):  # decoupled models (--streaming): responses/s beside requests/s
        figures["response_throughput"] = float(row["Response Throughput"])
    return figures


def _tail(path: pathlib.Path, lines: int = 25) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no output)"
