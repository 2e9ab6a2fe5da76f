"""Soak: many requests through every client flavour, watching the server side's footprint.

A real `Triton` runs in a child process (``harness/serve.py``, the "user process"). Eight lanes
of clients, one thread each, share one pool of request ids and run until it is empty:
``ModelClient``, ``FuturesModelClient`` (4 in flight) and ``AsyncioModelClient`` (4 in flight)
on the ``echo`` model, and ``DecoupledModelClient`` streams on the ``stream`` model, each once
over HTTP and once over gRPC. Every request carries its own id; ``echo`` requests also carry a
payload of 1 KiB to 4 MiB (each doubling of the size is sqrt(2) times rarer) whose bytes are
derived from the id. An answer must return exactly its own id and payload (each of the
`STREAM_STEPS` responses of a stream its own id and the step number); anything else counts as
mixed up, a client exception as an error, and a request never answered as lost.

Every `--period-s` a sampler records the RSS of the user process, its tritonserver and each
stub (children of tritonserver), the bytes of the server's /dev/shm segments (names starting
``pytriton-<user pid>-``: this server's own, so that other servers on the host do not count),
and the fds and threads of the user process. /dev/shm is split into pytriton's arenas
(``shm_arenas``) and the rest (``shm_pool``: Triton's Python-backend pool on the proxy path, the
lease); the RSS of the user process and of each stub is its own memory, without the /dev/shm
pages it maps (those are the arenas and the pool, counted above; the user process's mapped pages
are ``shm_user_mapped``: the arenas it writes and reads). ``info_`` rows break RSS down further
(anonymous memory, a stub's mapped pages); they explain, and are not judged.

Criteria (exit status 1 when one fails):

* lost, mixed up and errors are all 0;
* pytriton's arenas, whose size follows the payloads of their last messages (an arena of a
  model that answered a 4 MiB payload last holds 4 MiB, a few small ones later 1 MiB or none),
  are judged by their stated bound (`pytriton.ipc.shm.arena_bound`) at every sample of the load:
  one segment per arena (``arena_extra_segments`` 0), none over its bound (``arena_over_bound``
  0; the echo model's arenas carry at most a full batch of the largest payload), all of them
  together, and what the user process maps of them, within `ARENA_CEILING`; their size at two
  moments says which payloads came last, not whether they leak, so it is shown, not judged;
* every other metric grows less than `--growth-limit` (5 %) from the 50 % mark to the 100 % mark
  (by answered requests); each mark's value is the median of the samples in the last 5 % of the
  load before it (at least 3 samples), so that one payload in flight does not decide it;
* after the clients close, every metric returns to its baseline: the median of the samples of
  an idle second after
  - a warm-up that sends every payload size through every lane;
  - a worst-case burst: 32 clients at once send a 4 MiB payload, three times over each
    protocol, so the echo model runs full batches of the largest size on both lanes. Triton's
    Python-backend shared-memory pool and tritonserver's heap keep their high-water mark for
    good; a random mix reaches that ceiling only when enough large payloads happen to meet,
    which would show as "growth" in whichever half it happened;
  - a rehearsal of the load's mix at full concurrency (5 % of the load, at least 1,000
    requests), each closing its clients;
  - a cool-down: a quiet spell of `IDLE_RELEASE_S` (after which pytriton's shared-memory arenas
    give back what they hold) and 160 small requests from 4 clients. The same cool-down
    follows the load.
  Tolerances: fds, threads, stubs and shared-memory bytes exactly, RSS within
  `--rss-tolerance` (10 %), since allocators keep some freed memory; the harness waits up to
  `--settle-s` for the values to come back.

Usage: ``python harness/soak.py [--requests 100000] [--plot docs/soak.png] [--json out.json]``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import threading
import time
from concurrent.futures import Future
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
from common import REPO, UserProcess, arena_model, conclude, footprint, log, mib, settle, shm_sizes, table

from pytriton.client import (
    AsyncioModelClient,
    DecoupledModelClient,
    FuturesModelClient,
    ModelClient,
    PyTritonClientError,
)
from pytriton.ipc.protocol import model_key
from pytriton.ipc.shm import ALIGNMENT, IDLE_RELEASE_S, arena_bound

STREAM_STEPS = 3  # harness/serve.py's stream model
ECHO_MAX_BATCH = 16  # harness/serve.py's echo model
ECHO_KEY = model_key("echo", 1)
ECHO_INSTANCES = 1  # harness/serve.py: the echo model's instances, and those of its other models
OTHER_INSTANCES = 5
SIZES = [1024 * 2**k for k in range(13)]  # 1 KiB .. 4 MiB
WEIGHTS = np.array([2 ** (-k / 2) for k in range(len(SIZES))]) / sum(2 ** (-k / 2) for k in range(len(SIZES)))
WINDOW = 4  # requests in flight in a futures or asyncio lane
WARMUP_ID_BASE = 10**12
LANES = [
    ("ModelClient", "http"), ("ModelClient", "grpc"),
    ("FuturesModelClient", "http"), ("FuturesModelClient", "grpc"),
    ("AsyncioModelClient", "http"), ("AsyncioModelClient", "grpc"),
    ("DecoupledModelClient", "http"), ("DecoupledModelClient", "grpc"),
]  # fmt: skip
TIMEOUTS = {"init_timeout_s": 120.0, "inference_timeout_s": 120.0}
_PATTERN = np.arange(SIZES[-1], dtype=np.uint64).astype(np.uint8)


def payload_for(request_id: int, size: int) -> np.ndarray:
    """`size` bytes that only request `request_id` sends: a pattern, xored and stamped with the id."""
    payload = _PATTERN[:size] ^ np.uint8(request_id % 251)
    stamp = np.frombuffer(np.int64(request_id).tobytes(), dtype=np.uint8)
    payload[:8] = stamp
    payload[-8:] = stamp
    return payload


class Ledger:
    """The pool of request ids, and what became of each request."""

    def __init__(self, total: int, sizes: Sequence[int], id_base: int = 0) -> None:
        self.total = total
        self._sizes = sizes
        self._id_base = id_base
        self._lock = threading.Lock()
        self._next = 0
        self.issued = 0
        self.outcomes = {"ok": 0, "mixed": 0, "errors": 0}
        self.per_lane: Dict[str, int] = {}
        self.examples: List[str] = []
        self.half_at: Optional[float] = None
        self.done_at: Optional[float] = None
        self.started_at = time.monotonic()

    def take(self) -> Optional[Any]:
        """The next (id, payload size), or None once every id was handed out."""
        with self._lock:
            if self._next >= self.total:
                return None
            index = self._next
            self._next += 1
            self.issued += 1
        return self._id_base + index, int(self._sizes[index % len(self._sizes)])

    @property
    def answered(self) -> int:
        return sum(self.outcomes.values())

    def record(self, lane: str, outcome: str, detail: str = "") -> None:
        with self._lock:
            self.outcomes[outcome] += 1
            self.per_lane[lane] = self.per_lane.get(lane, 0) + 1
            if outcome != "ok" and len(self.examples) < 10:
                self.examples.append(f"{lane}: {outcome}: {detail[:300]}")
            answered = self.answered
            if answered == self.total // 2:
                self.half_at = time.monotonic()
            if answered == self.total:
                self.done_at = time.monotonic()


def judge_echo(ledger: Ledger, lane: str, request_id: int, payload: np.ndarray, result: Any) -> None:
    """Record an echo answer (a dict of outputs) or the exception that replaced it."""
    if isinstance(result, BaseException):
        ledger.record(lane, "errors", f"id {request_id}: {type(result).__name__}: {result}")
        return
    ids = np.asarray(result.get("id"))
    if ids.shape == (1,) and int(ids[0]) == request_id and np.array_equal(result.get("payload"), payload):
        ledger.record(lane, "ok")
    else:
        ledger.record(lane, "mixed", f"sent id {request_id} ({payload.size} B), got id {ids.tolist()[:4]}")


def judge_stream(ledger: Ledger, lane: str, request_id: int, partials: Any) -> None:
    if isinstance(partials, BaseException):
        ledger.record(lane, "errors", f"id {request_id}: {type(partials).__name__}: {partials}")
        return
    got = [(int(np.asarray(p["rid"]).reshape(-1)[0]), int(np.asarray(p["step"]).reshape(-1)[0])) for p in partials]
    if got == [(request_id, step) for step in range(STREAM_STEPS)]:
        ledger.record(lane, "ok")
    else:
        ledger.record(lane, "mixed", f"stream of id {request_id} got {got[:5]}")


def _sync_lane(client: Any, ledger: Ledger, lane: str) -> None:
    while (taken := ledger.take()) is not None:
        request_id, size = taken
        payload = payload_for(request_id, size)
        try:
            result: Any = client.infer_sample(id=np.array([request_id], np.int64), payload=payload)
        except PyTritonClientError as error:
            result = error
        judge_echo(ledger, lane, request_id, payload, result)


def _futures_lane(client: FuturesModelClient, ledger: Ledger, lane: str) -> None:
    window = threading.BoundedSemaphore(WINDOW)

    def done(future: Future, request_id: int, payload: np.ndarray) -> None:
        error = future.exception()
        judge_echo(ledger, lane, request_id, payload, error if error is not None else future.result())
        window.release()

    while (taken := ledger.take()) is not None:
        request_id, size = taken
        payload = payload_for(request_id, size)
        window.acquire()
        future = client.infer_sample(id=np.array([request_id], np.int64), payload=payload)
        future.add_done_callback(lambda f, i=request_id, p=payload: done(f, i, p))


async def _asyncio_lane(url: str, ledger: Ledger, lane: str) -> None:
    async def worker(client: AsyncioModelClient) -> None:
        while (taken := ledger.take()) is not None:
            request_id, size = taken
            payload = payload_for(request_id, size)
            try:
                result: Any = await client.infer_sample(id=np.array([request_id], np.int64), payload=payload)
            except PyTritonClientError as error:
                result = error
            judge_echo(ledger, lane, request_id, payload, result)

    async with AsyncioModelClient(url, "echo", **TIMEOUTS) as client:
        await asyncio.gather(*(worker(client) for _ in range(WINDOW)))


def _stream_lane(client: DecoupledModelClient, ledger: Ledger, lane: str) -> None:
    while (taken := ledger.take()) is not None:
        request_id, _ = taken
        try:
            result: Any = list(client.infer_sample(rid=np.array([request_id], np.int64)))
        except PyTritonClientError as error:
            result = error
        judge_stream(ledger, lane, request_id, result)


def run_lane(kind: str, url: str, ledger: Ledger) -> None:
    """One lane: create its client, use it until the ids run out, close it."""
    lane = f"{kind} {url.split(':')[0]}"
    try:
        if kind == "ModelClient":
            with ModelClient(url, "echo", **TIMEOUTS) as client:
                _sync_lane(client, ledger, lane)
        elif kind == "FuturesModelClient":
            with FuturesModelClient(url, "echo", max_workers=WINDOW, **TIMEOUTS) as futures_client:
                _futures_lane(futures_client, ledger, lane)
        elif kind == "AsyncioModelClient":
            asyncio.run(_asyncio_lane(url, ledger, lane))
        else:
            with DecoupledModelClient(url, "stream", **TIMEOUTS) as stream_client:
                _stream_lane(stream_client, ledger, lane)
    except Exception as error:  # noqa: BLE001 (a lane that dies is reported, its ids count as lost)
        with ledger._lock:
            ledger.examples.append(f"{lane} died: {type(error).__name__}: {error}")


def cool_down(user: UserProcess, requests: int = 40, clients: int = 4) -> None:
    """A quiet spell, then small requests from a few clients at once: pytriton's arenas give back
    what they hold after `IDLE_RELEASE_S` unused (the worker's and the proxies' alike), and the
    small requests from concurrent clients reach the proxies of both of the model's lanes (one client
    at a time would only ever reach the first; see docs/performance.md).

    Run before the baseline and again after the load, so both see the arenas at rest, whatever
    size the last requests of the load happened to have (pytriton/ipc/shm.py).
    """
    time.sleep(IDLE_RELEASE_S + 1.0)

    def one_client(offset: int) -> None:
        with ModelClient(user.http_url, "echo", **TIMEOUTS) as client:
            for index in range(requests):
                request_id = 2 * WARMUP_ID_BASE + offset + index
                client.infer_sample(id=np.array([request_id], np.int64), payload=payload_for(request_id, SIZES[0]))

    threads = [threading.Thread(target=one_client, args=(k * requests,)) for k in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def worst_case_burst(user: UserProcess, rounds: int = 3) -> None:
    """The largest batches the echo model can get, over each protocol: 2 x max_batch_size
    clients send a 4 MiB payload at once (both lanes then run full batches of the largest size).

    Triton's Python-backend pool and tritonserver's heap keep their high-water mark; a random
    mix reaches it only when enough large payloads happen to meet, so without this the harness
    would report that chance as growth. pytriton's own arenas give it back after the quiet spell
    of the cool-down that follows.
    """
    clients = 2 * ECHO_MAX_BATCH
    failures: List[str] = []

    def one(url: str, start: threading.Barrier, request_id: int) -> None:
        try:
            with ModelClient(url, "echo", **TIMEOUTS) as client:
                payload = payload_for(request_id, SIZES[-1])
                start.wait()
                result = client.infer_sample(id=np.array([request_id], np.int64), payload=payload)
            if int(result["id"][0]) != request_id or not np.array_equal(result["payload"], payload):
                failures.append(f"request {request_id} got another answer")
        except Exception as exc:  # noqa: BLE001 - reported below, after every thread ended
            failures.append(f"request {request_id}: {exc}")

    for url in (user.http_url, user.grpc_url):
        for round_index in range(rounds):
            start = threading.Barrier(clients)
            base = 3 * WARMUP_ID_BASE + (round_index + (rounds if url == user.grpc_url else 0)) * clients
            threads = [threading.Thread(target=one, args=(url, start, base + k)) for k in range(clients)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
    if failures:
        raise AssertionError(f"worst-case burst: {len(failures)} failed, e.g. {failures[0]}")


def run_lanes(user: UserProcess, ledger: Ledger) -> float:
    """All lanes until the ledger is empty and every client is closed; returns the seconds taken."""
    start = time.monotonic()
    threads = [threading.Thread(target=run_lane, args=(kind, user.url(protocol), ledger), name=f"lane-{i}")
               for i, (kind, protocol) in enumerate(LANES)]
    for thread in threads:
        thread.start()
    last_report = start
    while any(thread.is_alive() for thread in threads):
        for thread in threads:
            thread.join(0.5)
        if time.monotonic() - last_report > 10:
            last_report = time.monotonic()
            rate = ledger.answered / (last_report - start)
            log(f"  {ledger.answered}/{ledger.total} answered, {rate:.0f}/s")
    return time.monotonic() - start


class Sampler:
    """A thread that records `footprint(user)` every `period_s` seconds, with named moments."""

    def __init__(self, user: UserProcess, period_s: float) -> None:
        self.samples: List[Dict[str, float]] = []
        self.moments: Dict[str, float] = {}
        self._user = user
        self._period_s = period_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sampler", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.samples.append(footprint(self._user, arena_bound_of))
            except Exception as error:  # noqa: BLE001 (a process ended mid-read: skip the sample)
                log(f"sample skipped: {error}")
            self._stop.wait(self._period_s)

    def mark(self, name: str, at: Optional[float] = None) -> None:
        self.moments[name] = at if at is not None else time.monotonic()

    def between(self, start: float, end: float) -> List[Dict[str, float]]:
        return [sample for sample in self.samples if start <= sample["t"] <= end]

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def median_of(samples: Sequence[Dict[str, float]], metric: str) -> float:
    return float(statistics.median(sample.get(metric, 0.0) for sample in samples))


def window_before(samples: Sequence[Dict[str, float]], at: float, span_s: float,
                  minimum: int = 3) -> List[Dict[str, float]]:
    """The samples of the last `span_s` seconds before `at`, or the last `minimum` before it."""
    earlier = [sample for sample in samples if sample["t"] <= at]
    inside = [sample for sample in earlier if sample["t"] >= at - span_s]
    return inside if len(inside) >= minimum else earlier[-minimum:]


def within(metric: str, value: float, baseline: float, tolerances: Dict[str, float]) -> bool:
    """Whether `value` is back at `baseline`: RSS within its tolerance, anything else exactly."""
    if metric.startswith("rss"):
        return value <= baseline * (1 + tolerances.get(metric, tolerances["rss"]))
    return value <= baseline


BOUNDED = ("shm_arenas", "shm_user_mapped")
"""Metrics that follow the payload mix: judged against their stated bound throughout the load, not by
their growth between the two marks (`pytriton.ipc.shm.arena_bound`)."""
ALWAYS_ZERO = ("arena_extra_segments", "arena_over_bound")
"""Metrics that are 0 at every sample unless an arena leaks (common.footprint)."""


def arena_bound_of(arena: str) -> int:
    """The stated bound of one arena of harness/serve.py (its name up to the generation).

    The echo model's messages are at most a full batch of the largest payload (each tensor
    64-byte aligned); the soak sends nothing larger than a few ids or steps to the other models,
    which go inline, so their arenas should stay empty: one step is their bound.
    """
    if arena_model(arena) == ECHO_KEY:
        return arena_bound(ECHO_MAX_BATCH * (SIZES[-1] + ALIGNMENT))
    return arena_bound(1)


ARENA_CEILING = 2 * (ECHO_INSTANCES * arena_bound_of(f"-{ECHO_KEY}-0-in") + OTHER_INSTANCES * arena_bound(1))
"""The bound of all arenas together: an input and an output arena per instance."""


def judge(samples: Sequence[Dict[str, float]], load: float, half: float, full: float, baseline: Dict[str, float],
          after: Dict[str, float], growth_limit: float,
          tolerances: Dict[str, float]) -> Tuple[List[List[str]], Dict[str, Dict[str, Any]], List[str]]:
    """Each metric's verdict: its table row, its figures, and the failures (see the module docstring).

    Every judged metric must be back at its baseline after close. During the load, a metric that
    follows the payload mix (`BOUNDED`) must stay within its bound at every sample, one that
    counts a leak (`ALWAYS_ZERO`) at 0; any other must grow less than `growth_limit` from the 50 %
    to the 100 % mark. ``info_`` metrics are shown, not judged.
    """
    span = 0.05 * (full - load)
    during = [sample for sample in samples if load <= sample["t"] <= full] or list(samples[-1:])
    rows: List[List[str]] = []
    checks: Dict[str, Dict[str, Any]] = {}
    failures: List[str] = []
    for metric in [m for m in samples[-1] if m != "t"]:
        at_half = median_of(window_before(samples, half, span), metric)
        at_full = median_of(window_before(samples, full, span), metric)
        growth = (at_full - at_half) / at_half if at_half else 0.0
        peak = max(sample.get(metric, 0.0) for sample in during)
        show = mib if metric.startswith(("rss", "info_", "shm")) else (lambda v: f"{v:.0f}")
        judged = not metric.startswith("info_")  # a breakdown of a judged metric, shown to explain it
        if not judged:
            rule, load_ok = "", True
        elif metric in BOUNDED:
            rule, load_ok = f"max <= {show(ARENA_CEILING)}", peak <= ARENA_CEILING
            if not load_ok:
                failures.append(f"{metric} reached {show(peak)} MiB during the load, over its bound of "
                                f"{show(ARENA_CEILING)} MiB")
        elif metric in ALWAYS_ZERO:
            rule, load_ok = "0 throughout", peak == 0
            if not load_ok:
                failures.append(f"{metric} was {peak:.0f} during the load (0 unless an arena leaks)")
        else:
            rule, load_ok = f"growth < {growth_limit:.0%}", growth < growth_limit
            if not load_ok:
                failures.append(f"{metric} grew {growth:+.1%} from the 50 % to the 100 % mark")
        returned = not judged or within(metric, after[metric], baseline[metric], tolerances)
        if not returned:
            failures.append(f"{metric} did not return to its baseline: {after[metric]:.0f} vs {baseline[metric]:.0f}")
        checks[metric] = {"baseline": baseline[metric], "half": at_half, "full": at_full, "growth": growth,
                          "load_max": peak, "after": after[metric], "rule": rule, "load_ok": load_ok,
                          "back_ok": returned}
        rows.append([metric + (" (MiB)" if show is mib else ""), show(baseline[metric]), show(at_half),
                     show(at_full), f"{growth:+.1%}", show(peak), show(after[metric]), rule or "-",
                     ("ok" if load_ok and returned else "FAIL") if judged else "(info)"])
    return rows, checks, failures


def plot(sampler: Sampler, path: str, title: str) -> Optional[str]:
    """A PNG of the samples, with the moments as vertical lines; None if matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    t0 = sampler.samples[0]["t"]
    t = [sample["t"] - t0 for sample in sampler.samples]
    figure, axes = plt.subplots(3, 1, figsize=(10, 9), sharex=True)
    for metric, label in (("rss_user", "user process"), ("rss_server", "tritonserver"), ("rss_stubs", "stubs (sum)")):
        axes[0].plot(t, [sample[metric] / 2**20 for sample in sampler.samples], label=label)
    axes[0].set_ylabel("RSS (MiB)")
    axes[1].plot(t, [sample["shm_arenas"] / 2**20 for sample in sampler.samples], label="pytriton's arenas")
    axes[1].plot(t, [sample["shm_pool"] / 2**20 for sample in sampler.samples], label="Triton's pool (proxy path)")
    axes[1].set_ylabel("/dev/shm (MiB)")
    axes[2].plot(t, [sample["fds"] for sample in sampler.samples], label="fds (user process)")
    axes[2].plot(t, [sample["threads"] for sample in sampler.samples], label="threads (user process)")
    axes[2].set_ylabel("count")
    axes[2].set_xlabel("seconds")
    for axis in axes:
        for name, at in sampler.moments.items():
            axis.axvline(at - t0, color="grey", linestyle=":", linewidth=1)
            if axis is axes[0]:
                axis.annotate(name, (at - t0, 1.0), xycoords=("data", "axes fraction"), fontsize=7, rotation=90,
                              va="top", ha="right")
        axis.set_ylim(bottom=0)
        axis.legend(loc="lower right", fontsize=8)
    figure.suptitle(title)
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    plt.close(figure)
    return path


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=100_000, help="requests of the load phase (default 10^5)")
    parser.add_argument("--rehearsal", type=int, default=None,
                        help="requests rehearsed before the baseline (default: 5 %% of --requests, >= 1000)")
    parser.add_argument("--burst-rounds", type=int, default=3,
                        help="rounds of the worst-case burst per protocol before the baseline (0: none)")
    parser.add_argument("--period-s", type=float, default=0.5, help="sampling period")
    parser.add_argument("--growth-limit", type=float, default=0.05, help="largest growth from 50 %% to 100 %%")
    parser.add_argument("--rss-tolerance", type=float, default=0.10, help="RSS after close vs baseline")
    parser.add_argument("--server-rss-tolerance", type=float, default=None,
                        help="tritonserver's RSS after close vs baseline (default: --rss-tolerance)")
    parser.add_argument("--settle-s", type=float, default=30.0, help="longest wait for the baseline after close")
    parser.add_argument("--plot", default=str(REPO / "docs" / "soak.png"), help="PNG of the samples ('' for none)")
    parser.add_argument("--json", default="", help="write the figures to this file")
    parser.add_argument("--fault", default="", help="plant a bug in the user process (mixup, leak)")
    args = parser.parse_args(argv)

    tolerances = {"rss": args.rss_tolerance}
    if args.server_rss_tolerance is not None:
        tolerances["rss_server"] = args.server_rss_tolerance
    figures: Dict[str, Any] = {"requests": args.requests, "lanes": [f"{k} {p}" for k, p in LANES]}
    failures: List[str] = []
    rng = np.random.default_rng(20240917)
    with UserProcess(fault=args.fault or None) as user:
        figures["startup_s"] = round(user.wait_ready(), 2)
        sampler = Sampler(user, args.period_s)
        log(f"user process {user.pid} ready; warm-up: every size through every lane")
        warmup = Ledger(len(SIZES) * len(LANES), SIZES, id_base=WARMUP_ID_BASE)
        run_lanes(user, warmup)
        if args.burst_rounds:
            log("worst-case burst: the largest batches of the largest payload, over each protocol")
            sampler.mark("burst")
            worst_case_burst(user, args.burst_rounds)
            time.sleep(2 * args.period_s)  # the last batches' arenas, before they shrink
            sampler.mark("burst end")
        # A rehearsal of the load's mix at full concurrency: pools that keep their high-water mark
        # (Triton's Python-backend shared-memory pool, the allocators) reach it here, so the
        # baseline is the server's resting footprint under this load, and what the criteria
        # catch is growth that the same load causes again.
        rehearsal_count = args.rehearsal if args.rehearsal is not None else max(1000, args.requests // 20)
        log(f"rehearsal: {rehearsal_count} requests of the load's mix")
        rehearsal = Ledger(rehearsal_count, rng.choice(SIZES, size=rehearsal_count, p=WEIGHTS),
                           id_base=WARMUP_ID_BASE + 1_000_000)
        run_lanes(user, rehearsal)
        cool_down(user)
        time.sleep(1.0)  # let the warm-up's connections and threads wind down
        sampler.mark("baseline")
        time.sleep(max(1.0, 3 * args.period_s))
        baseline_samples = sampler.between(sampler.moments["baseline"], time.monotonic())
        metrics = [m for m in sampler.samples[-1] if m != "t"]
        baseline = {m: median_of(baseline_samples, m) for m in metrics}
        segments_at_baseline = shm_sizes(user.shm_prefix)

        log(f"load: {args.requests} requests over {len(LANES)} lanes")
        ledger = Ledger(args.requests, rng.choice(SIZES, size=args.requests, p=WEIGHTS))
        sampler.mark("load")
        duration = run_lanes(user, ledger)
        sampler.mark("50 %", ledger.half_at)
        sampler.mark("100 %", ledger.done_at)
        sampler.mark("clients closed")
        user_alive = user.is_live()
        cool_down(user)

        def back(value: Dict[str, float]) -> bool:
            return all(within(m, value.get(m, 0.0), baseline[m], tolerances) for m in metrics
                       if not m.startswith("info_"))

        def recent() -> Dict[str, float]:
            time.sleep(args.period_s)
            return {m: median_of(sampler.samples[-3:], m) for m in metrics}

        after = settle(recent, back, args.settle_s)
        sampler.mark("settled")
        segments_after = shm_sizes(user.shm_prefix)
        sampler.stop()
        exit_code = user.stop()
        leftovers = user.leftovers()

    figures.update(
        duration_s=round(duration, 1), requests_per_s=round(ledger.answered / duration, 1), issued=ledger.issued,
        **ledger.outcomes, lost=ledger.issued - ledger.answered, unissued=ledger.total - ledger.issued,
        per_lane=ledger.per_lane, examples=ledger.examples, warmup=warmup.outcomes, samples=len(sampler.samples),
        live_after_load=user_alive, harness_threads=threading.active_count(), user_exit_code=exit_code,
        leftovers=leftovers, arena_ceiling=ARENA_CEILING,
        arenas_at_burst=max([sample["shm_arenas"] for sample in sampler.between(
            sampler.moments.get("burst", 0.0), sampler.moments.get("burst end", 0.0))] or [0.0]),
    )  # fmt: skip
    for name, count in (("lost", figures["lost"] + figures["unissued"]), ("mixed", ledger.outcomes["mixed"]),
                        ("errors", ledger.outcomes["errors"])):
        if count:
            failures.append(f"{count} requests {name}")
    if warmup.outcomes["ok"] != warmup.total:
        failures.append(f"warm-up: {warmup.outcomes}")
    if rehearsal.outcomes["ok"] != rehearsal.total:
        failures.append(f"rehearsal: {rehearsal.outcomes}")
    if ledger.half_at is None or ledger.done_at is None:
        failures.append("the load never reached its 50 % or 100 % mark")
        half = full = time.monotonic()
    else:
        half, full = ledger.half_at, ledger.done_at
    rows, checks, verdicts = judge(sampler.samples, sampler.moments["load"], half, full, baseline, after,
                                   args.growth_limit, tolerances)
    failures.extend(verdicts)
    figures["metrics"] = checks
    # Which segments differ, by name (Triton's pool is "<prefix>-tpb...", pytriton's arenas
    # "<prefix>-<instance>-in|out-..."): says whose memory did not come back.
    changed = {name: (segments_at_baseline.get(name, 0), segments_after.get(name, 0))
               for name in sorted(set(segments_at_baseline) | set(segments_after))
               if segments_at_baseline.get(name, 0) != segments_after.get(name, 0)}
    figures["segments_changed"] = changed
    if not user_alive or exit_code != 0:
        failures.append(f"user process: live after load {user_alive}, exit code {exit_code}")
    if leftovers["processes"] or leftovers["segments"]:
        failures.append(f"left after stop: {leftovers}")
    if args.plot and sampler.samples:
        figures["plot"] = plot(sampler, args.plot, f"soak: {args.requests} requests, {len(LANES)} client lanes")
    figures["failures"] = failures

    print(table(["requests", "answered", "ok", "lost", "mixed", "errors", "seconds", "req/s"],
                [[args.requests, ledger.answered, ledger.outcomes["ok"], figures["lost"] + figures["unissued"],
                  ledger.outcomes["mixed"], ledger.outcomes["errors"], figures["duration_s"],
                  figures["requests_per_s"]]]))
    print()
    print(table(["lane", "answered"], sorted(ledger.per_lane.items())))
    print()
    print(table(["metric", "baseline", "50 %", "100 %", "growth", "load max", "after close", "judged by", "verdict"],
                rows))
    print(f"\nbaseline: median of the samples of {len(baseline_samples)} idle sample(s) after the warm-up; "
          f"after close: median of the last 3 samples (waited up to {args.settle_s:.0f} s); "
          f"tolerance: RSS +{args.rss_tolerance:.0%} (tritonserver "
          f"+{tolerances.get('rss_server', args.rss_tolerance):.0%}), others exact")
    print(f"pytriton's arenas: at most {mib(figures['arenas_at_burst'])} MiB in the worst-case burst, "
          f"{mib(figures['metrics']['shm_arenas']['load_max'])} MiB in the load; their bound "
          f"{mib(ARENA_CEILING)} MiB (pytriton.ipc.shm.arena_bound of a full batch of the largest payload, per arena)")
    print(f"threads of this harness process at the end (the clients' side, not judged): {threading.active_count()}")
    for name, (before, now) in changed.items():
        print(f"  /dev/shm/{name}: {before / 2**20:.1f} MiB at baseline, {now / 2**20:.1f} MiB after close")
    for example in ledger.examples:
        print("  " + example)
    print("PASS" if not failures else "FAIL:\n  " + "\n  ".join(failures))
    return conclude(figures, failures, args.json)


if __name__ == "__main__":
    sys.exit(main())
