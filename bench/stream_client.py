"""The load generator of the continuous-batching cases: streams, and when each of their pieces arrived.

One asyncio process (the harness starts it as its own child, like perf_analyzer) drives one server
over one protocol:

* ``--target grpc``: Triton's ``ModelStreamInfer`` on one channel, one bidirectional call per
  slot, opened before its first stream and kept open for the slot's streams one after another (as
  a connected client keeps its stream: ``tritonclient``'s ``start_stream`` then
  ``async_stream_infer``), with ``triton_enable_empty_final_response`` set so that a stream whose
  last piece carries no end (a whole-batch generator's) still sees its end arrive; a call whose
  stream failed is closed and the slot's next stream opens a new one;
* ``--target http``: Triton's ``generate_stream`` (server-sent events), one request per stream,
  on one aiohttp session (whose connections are kept open and reused);
* ``--target litserve``: LitServe's ``POST /predict`` (lines of JSON), the same way.

Each stream asks for ``--steps`` pieces (``n``); the piece of step k carries ``token`` k, and a
stream counts as ok only with exactly ``n`` pieces, the first 0 and the last ``n - 1``.

Two shapes of load:

* closed loop (default): ``--concurrency`` slots, slot k starting at ``k * --stagger-s /
  concurrency`` (uniform offsets over one stream's duration), each starting a new stream as soon
  as its last one ended; after ``--warmup-s`` the ``--window-s`` measurement window opens;
  when it closes no slot starts another stream and the streams in flight run to their end;
* ``--arrivals-ms 0,40,...``: one stream at each offset (the scenario), all of them counted; each
  on a slot of its own, opened ``OPEN_AHEAD_S`` before the first arrival.

It prints a line as the window opens and one as it closes, then one JSON object: the figures of
bench/stream_figures.py, the streams that failed (with the first errors), the CPU this process
used during the window (``client_cpu_percent``, of one core: on a small machine the load
generator's share is part of the picture) and the event loop it ran on (``client_loop``: uvloop
where installed).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from typing import Any, Awaitable, Callable, Dict, List, Optional

from stream_figures import StreamTimes, scenario_figures, summarize

DRAIN_TIMEOUT_S = 20.0
"""How long the streams in flight at the window's end may take to finish."""
OPEN_AHEAD_S = 0.3
"""How long before the scenario's first arrival its slots open (their gRPC calls)."""
WINDOW_START, WINDOW_END = "bench-window: start", "bench-window: end"
"""Lines on stdout as the window opens and closes (the harness measures the servers' CPU between)."""


def _check(stream: StreamTimes, steps: int, first: Optional[int], last: Optional[int],
           tokens: Callable[[], List[int]]) -> None:
    """Mark `stream` ok when it got `steps` pieces, the first token 0 and the last `steps - 1`;
    else say what came (`tokens()` gives every token received, read only then)."""
    if stream.error is not None:
        return
    if len(stream.pieces) != steps:
        stream.error = f"{len(stream.pieces)} pieces, expected {steps}: {_missing(tokens(), steps)}" + (
            "" if stream.end is not None else ", no end")
    elif (first, last) != (0, steps - 1):
        stream.error = f"tokens {first}..{last}, expected 0..{steps - 1}"
    elif stream.end is None:
        stream.error = "no end"
    else:
        stream.ok = True


def _missing(tokens: List[int], steps: int) -> str:
    """Which of the tokens 0..steps-1 did not come, as ranges ("missing 12-15, 40"), and any extra."""
    got = set(tokens)
    ranges: List[str] = []
    for token in range(steps):
        if token in got:
            continue
        if ranges and ranges[-1].split("-")[-1] == str(token - 1):
            ranges[-1] = f"{ranges[-1].split('-')[0]}-{token}"
        else:
            ranges.append(str(token))
    extra = len(tokens) - len(got & set(range(steps)))
    return (f"missing {', '.join(ranges)}" if ranges else "none missing") + (f", {extra} extra" if extra else "")


class _Call:
    """One ``ModelStreamInfer`` call kept open: requests go out one at a time, as they are put."""

    def __init__(self, stub: Any) -> None:
        self._requests: asyncio.Queue = asyncio.Queue()
        self.call = stub.ModelStreamInfer(self._outgoing())
        self.responses = self.call.__aiter__()

    async def _outgoing(self) -> Any:
        while True:
            request = await self._requests.get()
            if request is None:  # closing our side ends the call once the server is done with it
                return
            yield request

    def send(self, request: Any) -> None:
        self._requests.put_nowait(request)

    def close(self) -> None:
        self._requests.put_nowait(None)
        self.call.cancel()


class GrpcStreams:
    """Streams over Triton's gRPC ``ModelStreamInfer``, one call kept open per slot."""

    def __init__(self, url: str, model: str) -> None:
        import grpc
        from tritonclient.grpc import service_pb2, service_pb2_grpc

        self._pb = service_pb2
        self._channel = grpc.aio.insecure_channel(url)
        self._stub = service_pb2_grpc.GRPCInferenceServiceStub(self._channel)
        self._model = model
        self._calls: List[_Call] = []

    def _request(self, steps: int) -> Any:
        request = self._pb.ModelInferRequest(model_name=self._model)
        request.parameters["triton_enable_empty_final_response"].bool_param = True
        request.inputs.add(name="n", datatype="INT32", shape=[1, 1])
        request.raw_input_contents.append(int(steps).to_bytes(4, "little", signed=True))
        return request

    def slot(self, steps: int) -> StartStream:
        """A slot: its call opens now, and each stream it runs goes on that call, one after another."""
        call: Optional[_Call] = self._open()

        async def start(times: StreamTimes) -> None:
            nonlocal call
            if call is None:
                call = self._open()
            if not await self._stream(call, steps, times):
                call.close()  # what is left of a failed stream must not reach the next one
                call = None

        return start

    def _open(self) -> _Call:
        call = _Call(self._stub)
        self._calls.append(call)
        return call

    async def _stream(self, call: _Call, steps: int, times: StreamTimes) -> bool:
        """Run one stream on `call`, recording into `times` as its pieces come (a stream cut short
        keeps what came); whether the call may carry the next stream."""
        tokens: List[int] = []
        ended = False
        call.send(self._request(steps))
        try:
            async for response in call.responses:
                now = time.monotonic()
                if response.error_message:
                    times.error = response.error_message
                    break
                outputs = response.infer_response.raw_output_contents
                if outputs:
                    tokens.append(int.from_bytes(outputs[0][:4], "little", signed=True))
                    times.pieces.append(now)
                final = response.infer_response.parameters.get("triton_final_response")
                if final is not None and final.bool_param:
                    times.end = now
                    ended = True
                    break
        except Exception as exc:  # noqa: BLE001 - a failed stream is counted, not fatal
            times.error = repr(exc)
        _check(times, steps, tokens[0] if tokens else None, tokens[-1] if tokens else None, lambda: tokens)
        return ended and times.error is None

    async def close(self) -> None:
        for call in self._calls:
            call.close()
        await self._channel.close()


class HttpStreams:
    """Streams over HTTP: Triton's ``generate_stream`` (events) or LitServe's ``/predict`` (JSON lines)."""

    def __init__(self, url: str, model: str, litserve: bool) -> None:
        import aiohttp

        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, force_close=False),
            timeout=aiohttp.ClientTimeout(total=None, sock_read=120),
            auto_decompress=False,
        )
        self._litserve = litserve
        if litserve:
            self._url = f"http://{url}/predict"
            self._delimiter = b"\n"
        else:
            self._url = f"http://{url}/v2/models/{model}/generate_stream"
            self._delimiter = b"\n\n"
        self._headers = {"Content-Type": "application/json", "Accept-Encoding": "identity"}

    def slot(self, steps: int) -> StartStream:
        """A slot: its streams are requests on the session's pool of kept-open connections."""
        return lambda times: self.stream(steps, times)

    def _token(self, event: bytes) -> Optional[int]:
        text = event.decode("utf-8", "replace")
        if not self._litserve:
            text = text.split("data:", 1)[1] if "data:" in text else text
        value = json.loads(text).get("token")
        if isinstance(value, list):
            value = value[0] if value else None
        return None if value is None else int(value)

    async def stream(self, steps: int, times: StreamTimes) -> None:
        """Run one stream, recording into `times` as its pieces come (a stream cut short keeps what came)."""
        body = json.dumps({"n": steps}).encode()
        events: List[bytes] = []
        delimiter = self._delimiter
        try:
            async with self._session.post(self._url, data=body, headers=self._headers) as response:
                if response.status != 200:
                    times.error = f"HTTP {response.status}: {(await response.read())[:300]!r}"
                else:
                    buffer = b""
                    async for chunk in response.content.iter_any():
                        now = time.monotonic()
                        buffer += chunk
                        while True:
                            cut = buffer.find(delimiter)
                            if cut < 0:
                                break
                            event, buffer = buffer[:cut], buffer[cut + len(delimiter):]
                            if not event.strip():
                                continue
                            if b'"error"' in event:
                                times.error = event[:300].decode("utf-8", "replace")
                            elif b'"token"' in event:  # not an empty final event
                                events.append(event)
                                times.pieces.append(now)
                    times.end = time.monotonic()
        except Exception as exc:  # noqa: BLE001 - a failed stream is counted, not fatal
            times.error = repr(exc)
        first = self._token(events[0]) if events else None
        last = self._token(events[-1]) if events else None
        _check(times, steps, first, last,
               lambda: [token for token in map(self._token, events) if token is not None])

    async def close(self) -> None:
        await self._session.close()


StartStream = Callable[[StreamTimes], Awaitable[None]]
"""Runs one stream on a slot (of `GrpcStreams.slot` or `HttpStreams.slot`)."""


async def _run_stream(start_stream: StartStream, streams: List[StreamTimes], planned: Optional[float] = None) -> None:
    times = StreamTimes(start=time.monotonic(), planned=planned)
    streams.append(times)  # before it ends: a stream that never does is still counted
    await start_stream(times)


async def _until_done(tasks: List[asyncio.Task[None]], streams: List[StreamTimes], timeout_s: float) -> None:
    """Wait for `tasks`; after `timeout_s`, cancel those left and mark their streams as never ended."""
    _, pending = await asyncio.wait(tasks, timeout=timeout_s)
    for task in pending:
        task.cancel()
    if pending:
        await asyncio.wait(pending, timeout=5)
    for stream in streams:
        if stream.end is None and stream.error is None:
            stream.error = f"no end within {timeout_s:g} s ({len(stream.pieces)} pieces had come)"
    for task in tasks:
        if task.done() and not task.cancelled() and task.exception() is not None:
            raise task.exception()  # type: ignore[misc]


async def closed_loop(open_slot: Callable[[], StartStream], concurrency: int, stagger_s: float, warmup_s: float,
                      window_s: float) -> Dict[str, Any]:
    """`concurrency` slots, each starting a stream as soon as its last ended (see the module docstring)."""
    streams: List[StreamTimes] = []
    begin = time.monotonic()
    window_start, window_end = begin + warmup_s, begin + warmup_s + window_s
    cpu: Dict[str, float] = {}

    async def slot(index: int) -> None:
        start_stream = open_slot()
        await asyncio.sleep(index * stagger_s / concurrency)
        while time.monotonic() < window_end:
            await _run_stream(start_stream, streams)

    async def cpu_marks() -> None:
        await asyncio.sleep(max(0.0, window_start - time.monotonic()))
        cpu["start"] = time.process_time()
        print(WINDOW_START, flush=True)
        await asyncio.sleep(max(0.0, window_end - time.monotonic()))
        cpu["end"] = time.process_time()
        print(WINDOW_END, flush=True)

    marks = asyncio.ensure_future(cpu_marks())
    await _until_done([asyncio.ensure_future(slot(index)) for index in range(concurrency)], streams,
                      warmup_s + window_s + DRAIN_TIMEOUT_S)
    await marks
    figures = summarize(streams, window_start, window_end)
    figures["client_cpu_percent"] = round((cpu["end"] - cpu["start"]) / window_s * 100, 1)
    figures["streams"] = len(streams)
    return _with_failures(figures, streams)


async def scenario(open_slot: Callable[[], StartStream], arrivals_s: List[float], step_s: float) -> Dict[str, Any]:
    """One stream at each offset of `arrivals_s`, each on a slot of its own; every stream counted."""
    slots = [open_slot() for _ in arrivals_s]
    await asyncio.sleep(OPEN_AHEAD_S)
    begin = time.monotonic()
    streams: List[StreamTimes] = []

    async def arrive(offset: float, start_stream: StartStream) -> None:
        await asyncio.sleep(max(0.0, begin + offset - time.monotonic()))
        await _run_stream(start_stream, streams, planned=begin + offset)

    await _until_done([asyncio.ensure_future(arrive(offset, slot)) for offset, slot in zip(arrivals_s, slots)], streams,
                      max(arrivals_s) + DRAIN_TIMEOUT_S)
    return _with_failures(scenario_figures(sorted(streams, key=lambda stream: stream.start), step_s), streams)


def _with_failures(figures: Dict[str, Any], streams: List[StreamTimes]) -> Dict[str, Any]:
    failed = [stream for stream in streams if not stream.ok]
    figures["failed"] = len(failed)
    figures["errors"] = sorted({stream.error or "?" for stream in failed})[:5]
    return figures


async def main_async(args: argparse.Namespace) -> Dict[str, Any]:
    if args.target == "grpc":
        client: Any = GrpcStreams(args.url, args.model)
    else:
        client = HttpStreams(args.url, args.model, args.target == "litserve")
    try:
        if args.arrivals_ms:
            arrivals = [float(value) / 1000 for value in args.arrivals_ms.split(",")]
            return await scenario(lambda: client.slot(args.steps), arrivals, args.step_s)
        return await closed_loop(lambda: client.slot(args.steps), args.concurrency, args.stagger_s,
                                 args.warmup_s, args.window_s)
    finally:
        await client.close()


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", choices=["grpc", "http", "litserve"], required=True)
    parser.add_argument("--url", required=True, help="host:port")
    parser.add_argument("--model", default="", help="Triton's model name (not for litserve)")
    parser.add_argument("--steps", type=int, required=True, help="pieces per stream")
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--stagger-s", type=float, default=0.0,
                        help="slots start over this span (one stream's duration)")
    parser.add_argument("--warmup-s", type=float, default=1.0)
    parser.add_argument("--window-s", type=float, default=5.0)
    parser.add_argument("--arrivals-ms", help="the scenario: comma-separated arrival offsets, one stream each")
    parser.add_argument("--step-s", type=float, default=0.01, help="the scenario's step, for its verdict")
    return parser.parse_args(argv)


def _event_loop() -> str:
    """Run on uvloop where it is installed (the test extra has it, on Linux): it halves the CPU
    the HTTP load takes from the 2 cores it shares with the server (measured: 93 and 81 % of a
    core at 32 streams on asyncio's loop, 44 and 40 % on uvloop), so the server's figures are less
    the load generator's. Which loop ran is in the result."""
    try:
        import uvloop
    except ImportError:
        return "asyncio"
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    return f"uvloop {uvloop.__version__}"


def main(argv: Optional[List[str]] = None) -> int:
    args = parse_args(argv)
    loop = _event_loop()
    result = asyncio.run(main_async(args))
    result["client_loop"] = loop
    json.dump(result, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
