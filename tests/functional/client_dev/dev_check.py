"""Check the clients against a real tritonserver, over HTTP and gRPC; prints measured timings.

A development script, meant to become functional tests: it starts tritonserver on a small
repository of raw Python-backend models (``dev_server.py``), runs every check on both
protocols, prints one line per check, always stops the server and sweeps its shared memory,
and exits non-zero if a check failed.

Usage::

    PYTHONPATH=. .venv/bin/python tests/functional/client_dev/dev_check.py \\
        [--server-root /tmp/ts] [--port-base 18100] [--stub-numpy-dir /tmp/clientdev/stubpy]

``--stub-numpy-dir``: Triton 2.51's Python backend breaks with numpy 2.x (empty outputs,
wrong input data). Point it at a folder holding numpy 1.x for the stub's Python, e.g.
``python3.11 -m pip install --no-deps --target /tmp/clientdev/stubpy numpy==1.26.4``.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import pathlib
import socket
import sys
import time
import traceback
from collections.abc import Callable, Iterator

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).parent))

from dev_server import DevServer, dev_server

from pytriton.client import (
    FuturesModelClient,
    ModelClient,
    PyTritonClientClosedError,
    PyTritonClientInferenceServerError,
    PyTritonClientModelDoesntSupportBatchingError,
    PyTritonClientModelUnavailableError,
    PyTritonClientQueueFullError,
    PyTritonClientTimeoutError,
    PyTritonClientValueError,
)

# ---- page 000, verbatim (kept as text: it is the user's code, run as the docs test would) ------
PAGE_000 = """
# Define a ChunkingClient class that inherits from FuturesModelClient and splits the input into smaller batches
import concurrent.futures
from pytriton.client import FuturesModelClient

class ChunkingClient(FuturesModelClient):
    def __init__(self, host, model_name, chunking_strategy=None, max_workers=None):
        super().__init__(host, model_name, max_workers=max_workers)
        self.chunking_strategy = chunking_strategy or self.default_chunking_strategy

    def default_chunking_strategy(self, kwargs, max_batch_size):
        # Split the input by the first dimension according to the max batch size
        size_of_dimention_0 = self.find_size_0(kwargs)
        for i in range(0, size_of_dimention_0, max_batch_size):
            yield {key: value[i:i+max_batch_size] for key, value in kwargs.items()}

    def find_size_0(self, kwargs):
        # Check the size of the first dimension of each tensor and raise errors if they are not consistent or valid
        size_of_dimention_0 = None
        for key, value in kwargs.items():
            if isinstance(value, np.ndarray):
                if value.ndim > 0:
                    size = value.shape[0]
                    if size_of_dimention_0 is None or size_of_dimention_0 == size:
                        size_of_dimention_0 = size
                    else:
                        raise ValueError("The tensors have different sizes at the first dimension")
                else:
                    raise ValueError("The tensor has no first dimension")
            else:
                raise TypeError("The value is not a numpy tensor")
        return size_of_dimention_0

    def infer_batch(self, *args, **kwargs):
        max_batch_size = self.model_config().result().max_batch_size
        # Send the smaller batches to the server in parallel and yield the futures with results
        futures = [super(ChunkingClient, self).infer_batch(*args, **chunk) for chunk in self.chunking_strategy(kwargs, max_batch_size)]
        for future in futures:
            yield future
"""  # noqa: E501


def chunking_client_class() -> type:
    namespace: dict[str, object] = {"np": np}
    exec(compile(PAGE_000, "page_000", "exec"), namespace)
    return namespace["ChunkingClient"]  # type: ignore[return-value]


# ---- helpers ------------------------------------------------------------------------------
RESULTS: list[tuple[str, bool, str]] = []


def check(name: str, fn: Callable[[], str | None]) -> None:
    """Run one check, record pass/fail and its note (timings)."""
    try:
        note = fn() or ""
        RESULTS.append((name, True, note))
        print(f"PASS  {name}  {note}", flush=True)
    except Exception as exc:  # noqa: BLE001 - a dev script: report the failure and go on with the other checks
        RESULTS.append((name, False, f"{type(exc).__name__}: {exc}"))
        print(f"FAIL  {name}  {type(exc).__name__}: {exc}", flush=True)
        traceback.print_exc()


def expect_raises(exc_type: type[BaseException], fn: Callable[[], object]) -> tuple[BaseException, float]:
    start = time.monotonic()
    try:
        fn()
    except exc_type as exc:
        return exc, time.monotonic() - start
    raise AssertionError(f"expected {exc_type.__name__}, nothing raised")


def bound(asked: float, elapsed: float, slack: float = 1.0) -> str:
    assert asked - 0.05 <= elapsed <= asked + slack, f"fired after {elapsed:.3f} s, asked {asked} s"
    return f"asked {asked:.2f} s, fired {elapsed:.3f} s (+{elapsed - asked:.3f})"


def free_port(start: int = 18150) -> int:
    for port in range(start, 18199):
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free 181xx port")


@contextlib.contextmanager
def black_hole() -> Iterator[int]:
    """A port that accepts TCP connections (kernel backlog) and never answers."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", free_port(18160)))
    sock.listen(16)
    try:
        yield sock.getsockname()[1]
    finally:
        sock.close()


# ---- checks -------------------------------------------------------------------------------
def run_checks(server: DevServer) -> None:
    for proto, url in (("http", server.http_url), ("grpc", server.grpc_url)):
        run_protocol_checks(proto, url)


def run_protocol_checks(proto: str, url: str) -> None:
    def chunking() -> str:
        results = []
        with chunking_client_class()(url, "Batch2") as client:
            input_tensor = np.zeros((5, 1), dtype=np.int32)
            for future in client.infer_batch(INPUT_1=input_tensor):
                results.append(future.result())
        assert len(results) == 3
        two_zeros = np.array([[0], [0]], dtype=np.int32)
        single_zero = np.array([[0]], dtype=np.int32)
        assert np.all(results[0]["OUTPUT_1"] == two_zeros)
        assert np.all(results[1]["OUTPUT_1"] == two_zeros)
        assert np.all(results[2]["OUTPUT_1"] == single_zero)
        return str([r["OUTPUT_1"].shape for r in results])

    def batch_size_error() -> str:
        with FuturesModelClient(url, "Batch2") as client:
            future = client.infer_batch(np.zeros((4, 1), dtype=np.int32))
            exc, _ = expect_raises(PyTritonClientInferenceServerError, future.result)
        expected = (
            "Error occurred during inference request. Message: "
            "[request id: 0] inference request batch-size must be <= 2 for 'Batch2'"
        )
        assert str(exc) == expected, str(exc)
        return repr(str(exc))

    def bytes_round_trip() -> str:
        data = np.array(
            [[b"ab\x00", b"\x00\x00", b"", "zaż".encode()], [b"x\x00", b"\xff", b"y", b"\x00"]], dtype=object
        )
        with ModelClient(url, "IdentityBytes") as client:
            out = client.infer_batch(data)["OUTPUT_1"]
            assert out.dtype == np.object_ and out.tolist() == data.tolist(), out
            sample = client.infer_sample(INPUT_1=data[0])["OUTPUT_1"]
            assert sample.tolist() == data[0].tolist(), sample
        return "trailing NULs kept"

    def positional_named() -> str:
        with ModelClient(url, "AddSub") as client:
            a, b = np.array([1, 2, 3], np.float32), np.array([10, 20, 30], np.float32)
            by_pos = client.infer_sample(a, b)
            by_name = client.infer_sample(INPUT_B=b, INPUT_A=a)
            assert np.array_equal(by_pos["DIFF"], a - b) and np.array_equal(by_name["DIFF"], a - b)
            expect_raises(PyTritonClientValueError, lambda: client.infer_sample(a, INPUT_B=b))
            expect_raises(PyTritonClientModelDoesntSupportBatchingError, lambda: client.infer_batch(a, b))
            assert client.model_config.batching is False
        return "order kept; mixed -> ValueError; infer_batch -> DoesntSupportBatching"

    def closed() -> str:
        client = ModelClient(url, "Batch2")
        client.close()
        expect_raises(PyTritonClientClosedError, lambda: client.infer_sample(np.zeros(1, np.int32)))
        futures = FuturesModelClient(url, "Batch2")
        futures.close()
        expect_raises(PyTritonClientClosedError, lambda: futures.infer_sample(np.zeros(1, np.int32)))
        return ""

    def unknown_model_no_wait() -> str:
        with ModelClient(url, "Missing", ensure_model_is_ready=False) as client:
            exc, elapsed = expect_raises(PyTritonClientModelUnavailableError, lambda: client.model_config)
        return f"{exc} ({elapsed:.3f} s)"

    def init_timeout(target_url: str, model: str, *, lazy: bool, asked: float = 2.0) -> Callable[[], str]:
        def run() -> str:
            if lazy:
                with ModelClient(target_url, model, init_timeout_s=asked) as client:
                    exc, elapsed = expect_raises(
                        PyTritonClientTimeoutError, lambda: client.infer_sample(np.zeros(1, np.int32))
                    )
            else:
                exc, elapsed = expect_raises(
                    PyTritonClientTimeoutError,
                    lambda: ModelClient(target_url, model, init_timeout_s=asked, lazy_init=False),
                )
            return bound(asked, elapsed) + f" | {str(exc)[:110]}"

        return run

    def futures_init_timeout(target_url: str, asked: float = 1.5) -> str:
        with FuturesModelClient(target_url, "Batch2", init_timeout_s=asked) as client:
            start = time.monotonic()
            future = client.infer_batch(np.zeros((1, 1), np.int32))
            expect_raises(PyTritonClientTimeoutError, future.result)
            return bound(asked, time.monotonic() - start)

    def inference_timeout(asked: float = 0.7) -> str:
        with ModelClient(url, "Slow", inference_timeout_s=asked) as client:
            client.wait_for_model(10)
            exc, elapsed = expect_raises(
                PyTritonClientTimeoutError, lambda: client.infer_sample(np.zeros(1, np.float32))
            )
        with ModelClient(url, "Slow", inference_timeout_s=5) as client:
            start = time.monotonic()
            client.infer_sample(np.zeros(1, np.float32))
            ok = time.monotonic() - start
        return bound(asked, elapsed) + f" | slow ok in {ok:.2f} s | {str(exc)[:80]}"

    def queue_full() -> str:
        with FuturesModelClient(url, "Slow", max_workers=1, max_queue_size=1, non_blocking=True) as client:
            first = client.infer_sample(np.zeros(1, np.float32))
            second = client.infer_sample(np.zeros(1, np.float32))
            expect_raises(PyTritonClientQueueFullError, lambda: client.infer_sample(np.zeros(1, np.float32)))
            concurrent.futures.wait([first, second])
            assert first.result() and second.result()
        return ""

    def parameters_and_headers() -> str:
        headers = {"x-dev-check": "1"}
        with ModelClient(url, "Batch2") as client:
            out = client.infer_sample(np.array([7], np.int32), parameters={"p_int": 1, "p_str": "s"}, headers=headers)
        assert out["OUTPUT_1"].tolist() == [7] and headers == {"x-dev-check": "1"}
        return "accepted; caller's headers dict untouched"

    def futures_close_without_wait() -> str:
        client = FuturesModelClient(url, "Slow", max_workers=2)
        futures = [client.infer_sample(np.full(1, i, np.float32)) for i in range(3)]
        start = time.monotonic()
        client.close(wait=False)
        returned = time.monotonic() - start
        results = [f.result(timeout=15)["OUTPUT_1"].tolist() for f in futures]
        assert results == [[0.0], [1.0], [2.0]] and returned < 0.5, (results, returned)
        expect_raises(PyTritonClientClosedError, lambda: client.infer_sample(np.zeros(1, np.float32)))
        return f"close returned in {returned:.3f} s; queued requests completed"

    scheme = "grpc" if proto == "grpc" else "http"
    dead = f"{scheme}://localhost:{free_port()}"
    check(f"{proto}: page 000 ChunkingClient verbatim", chunking)
    check(f"{proto}: batch-size error text", batch_size_error)
    check(f"{proto}: bytes round-trip", bytes_round_trip)
    check(f"{proto}: positional/named inputs", positional_named)
    check(f"{proto}: calls after close", closed)
    check(f"{proto}: unknown model without wait", unknown_model_no_wait)
    check(f"{proto}: init timeout, nothing listens, lazy_init=False", init_timeout(dead, "Batch2", lazy=False))
    check(f"{proto}: init timeout, nothing listens, lazy", init_timeout(dead, "Batch2", lazy=True))
    check(f"{proto}: init timeout, model not loaded, lazy_init=False", init_timeout(url, "Missing", lazy=False))
    check(f"{proto}: init timeout, model not loaded, lazy", init_timeout(url, "Missing", lazy=True))
    with black_hole() as port:
        hole = f"{scheme}://localhost:{port}"
        check(f"{proto}: init timeout, server never answers", init_timeout(hole, "Batch2", lazy=False))
    check(f"{proto}: futures init timeout, nothing listens", lambda: futures_init_timeout(dead))
    check(f"{proto}: inference timeout (model sleeps 2 s)", inference_timeout)
    check(f"{proto}: futures queue full (non_blocking)", queue_full)
    check(f"{proto}: parameters and headers", parameters_and_headers)
    check(f"{proto}: futures close(wait=False)", futures_close_without_wait)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--server-root", default="/tmp/ts", type=pathlib.Path)
    parser.add_argument("--workspace", default="/tmp/clientdev", type=pathlib.Path)
    parser.add_argument("--port-base", default=18100, type=int)
    default_numpy = "/tmp/clientdev/stubpy" if pathlib.Path("/tmp/clientdev/stubpy/numpy").is_dir() else None
    parser.add_argument("--stub-numpy-dir", default=default_numpy)
    args = parser.parse_args()
    with dev_server(
        root=args.server_root, workspace=args.workspace, port_base=args.port_base, stub_numpy_dir=args.stub_numpy_dir
    ) as server:
        run_checks(server)
    failed = [name for name, ok, _ in RESULTS if not ok]
    print(f"\n{len(RESULTS) - len(failed)} passed, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
