"""The load the fault matrix puts on a user process while it applies a fault.

Four lanes, one thread each, every request carrying its own id so that a mixed-up answer is
seen: ``echo`` over HTTP, ``echo`` over gRPC, ``text`` over gRPC (``ModelClient``), and one
``DecoupledModelClient`` stream after another on ``stream`` over gRPC (``harness/serve.py``'s
models). A lane that gets an error closes its client, waits a little and makes a new one, so
that it serves again as soon as the server does; every client call is bounded by
`TIMEOUTS`, and `Load.stop` waits a bounded time for the threads (they are daemons).
"""

from __future__ import annotations

import itertools
import re
import threading
import time
from typing import Any, Callable, Dict, Iterator, List, Optional

import numpy as np

from pytriton.client import DecoupledModelClient, ModelClient

STREAM_STEPS = 3  # harness/serve.py's stream model
TIMEOUTS = {"init_timeout_s": 2.0, "inference_timeout_s": 10.0}
RETRY_PAUSE_S = 0.2
MAX_ERROR_KINDS = 8


def _echo(client: ModelClient, request_id: int) -> bool:
    payload = np.full(64, request_id % 251, np.uint8)
    result = client.infer_sample(id=np.array([request_id], np.int64), payload=payload)
    return int(result["id"][0]) == request_id and np.array_equal(result["payload"], payload)


def _text(client: ModelClient, request_id: int) -> bool:
    text = np.array([f"request {request_id}".encode()], dtype=np.bytes_)
    x = np.array([request_id, -request_id], np.float32)
    result = client.infer_sample(text=text, x=x)
    return bytes(result["text"][0]) == text[0] and np.array_equal(result["x"], x)


def _stream(client: DecoupledModelClient, request_id: int) -> bool:
    partials = list(client.infer_sample(rid=np.array([request_id], np.int64)))
    got = [(int(p["rid"].reshape(-1)[0]), int(p["step"].reshape(-1)[0])) for p in partials]
    return got == [(request_id, step) for step in range(STREAM_STEPS)]


class Lane:
    """One client thread: counts answers that are right, wrong (mixed up) and errors."""

    def __init__(self, name: str, make: Callable[[], Any], call: Callable[[Any, int], bool],
                 ids: Iterator[int], stop: threading.Event) -> None:
        self.name = name
        self._make = make
        self._call = call
        self._ids = ids
        self._stop = stop
        self.ok = 0
        self.wrong = 0
        self.errors = 0
        self.error_kinds: Dict[str, int] = {}  # distinct error messages (digits dropped) and their counts
        self._thread = threading.Thread(target=self._run, name=f"faults-{name}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        client: Optional[Any] = None
        while not self._stop.is_set():
            try:
                if client is None:
                    client = self._make()
                if self._call(client, next(self._ids)):
                    self.ok += 1
                else:
                    self.wrong += 1
            except Exception as error:  # noqa: BLE001 - every failure of a request is counted, none ends the lane
                self.errors += 1
                kind = re.sub(r"\d+", "N", f"{type(error).__name__}: {error}")[:200]
                if kind in self.error_kinds or len(self.error_kinds) < MAX_ERROR_KINDS:
                    self.error_kinds[kind] = self.error_kinds.get(kind, 0) + 1
                client = _close(client)
                self._stop.wait(RETRY_PAUSE_S)
        _close(client)

    def join(self, timeout_s: float) -> bool:
        self._thread.join(timeout_s)
        return not self._thread.is_alive()


def _close(client: Optional[Any]) -> None:
    if client is not None:
        try:
            client.close()
        except Exception:  # noqa: BLE001 - a client of a dead server may fail to close; it is dropped
            pass
    return None


class Load:
    """The four lanes on one user process (see the module doc)."""

    def __init__(self, http_url: str, grpc_url: str) -> None:
        self._stop = threading.Event()
        ids = itertools.count(1)
        self.lanes = [
            Lane("echo/http", lambda: ModelClient(http_url, "echo", **TIMEOUTS), _echo, ids, self._stop),
            Lane("echo/grpc", lambda: ModelClient(grpc_url, "echo", **TIMEOUTS), _echo, ids, self._stop),
            Lane("text/grpc", lambda: ModelClient(grpc_url, "text", **TIMEOUTS), _text, ids, self._stop),
            Lane("stream/grpc", lambda: DecoupledModelClient(grpc_url, "stream", **TIMEOUTS), _stream, ids,
                 self._stop),
        ]  # fmt: skip

    def start(self) -> None:
        for lane in self.lanes:
            lane.start()

    def oks(self) -> Dict[str, int]:
        return {lane.name: lane.ok for lane in self.lanes}

    def wait_all_served(self, since: Dict[str, int], timeout_s: float) -> bool:
        """True once every lane got a right answer beyond its count in `since`."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if all(lane.ok > since.get(lane.name, 0) for lane in self.lanes):
                return True
            time.sleep(0.05)
        return False

    def stop(self, timeout_s: float = 15.0) -> List[str]:
        """Stop the lanes; the names of those still running after `timeout_s` (a hung client)."""
        self._stop.set()
        deadline = time.monotonic() + timeout_s
        return [lane.name for lane in self.lanes if not lane.join(max(0.0, deadline - time.monotonic()))]

    def summary(self) -> Dict[str, Dict[str, Any]]:
        return {lane.name: {"ok": lane.ok, "wrong": lane.wrong, "errors": lane.errors,
                            "error_kinds": dict(lane.error_kinds)} for lane in self.lanes}

    def undecodable_errors(self) -> List[str]:
        """Error messages whose body the client could not decode (garbage where a message belongs)."""
        return [kind for lane in self.lanes for kind in lane.error_kinds if "decoding the response" in kind]


class InFlight:
    """Requests the fault matrix keeps in flight on the process-instance models while it kills
    their worker processes (``slow`` and ``slow_stream`` of harness/serve.py): two plain requests
    and one stream per protocol. Each records what its client saw and when (`results`): an
    error, or ``answered by pid N`` (a request still queued in Triton when the worker died is
    served by the fresh one). `stream_pids` holds the worker of each stream that started."""

    def __init__(self, http_url: str, grpc_url: str) -> None:
        self._urls = {"http": http_url, "grpc": grpc_url}
        self.results: Dict[str, Any] = {}
        self._threads: List[threading.Thread] = []
        self.streams_started = threading.Semaphore(0)
        self.stream_pids: List[int] = []

    def worker_pid(self) -> int:
        """The pid of ``slow``'s worker process (asked with a negative x: answered at once)."""
        with ModelClient(self._urls["http"], "slow", init_timeout_s=10.0, inference_timeout_s=10.0) as client:
            return int(client.infer_sample(x=np.array([-1.0], np.float32))["pid"][0])

    def start(self) -> None:
        for protocol, url in self._urls.items():
            for number in range(2):
                self._spawn(f"slow/{protocol}/{number}", self._plain, url)
            self._spawn(f"slow_stream/{protocol}", self._stream, url)

    def _spawn(self, name: str, target: Callable[[str, str], None], url: str) -> None:
        thread = threading.Thread(target=target, args=(name, url), name=f"in-flight-{name}", daemon=True)
        self._threads.append(thread)
        thread.start()

    def _plain(self, name: str, url: str) -> None:
        try:
            with ModelClient(url, "slow", init_timeout_s=10.0, inference_timeout_s=30.0) as client:
                pid = int(client.infer_sample(x=np.array([1.0], np.float32))["pid"][0])
            self.results[name] = (f"answered by pid {pid}", time.monotonic())
        except Exception as error:  # noqa: BLE001 - what the client saw is the result
            self.results[name] = (f"{type(error).__name__}: {error}", time.monotonic())

    def _stream(self, name: str, url: str) -> None:
        started = False
        pid = 0
        try:
            with DecoupledModelClient(url, "slow_stream", init_timeout_s=10.0, inference_timeout_s=30.0) as client:
                for part in client.infer_sample(x=np.array([1.0], np.float32)):
                    pid = int(part["pid"][0])
                    if not started:
                        started = True
                        self.stream_pids.append(pid)
                        self.streams_started.release()
            self.results[name] = (f"answered by pid {pid}", time.monotonic())
        except Exception as error:  # noqa: BLE001 - what the client saw is the result
            self.results[name] = (f"{type(error).__name__}: {error}", time.monotonic())
        if not started:
            self.streams_started.release()

    def wait(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
