"""The OpenAI-compatible front against a bare gRPC stream of the same model on the same server.

    python bench/openai_front.py [--rounds 5] [--requests 100] [--streams 256] [--pieces 16] [--json out.json]

One server, one chat model bound with `bind_chat` (a plain generator yielding `--pieces` words
with no delay, so the figures show the serving path, not a model). The clients run in this
process, which also serves the callable (as the published bench did); the front runs in its own
process (`pytriton.openai.front`), tritonserver in its own. Three paths, each on its own
connection:

- **the front**: ``POST /v1/chat/completions`` on kept-alive aiohttp connections;
- **bare gRPC**: one ``ModelStreamInfer`` call per answer (`Bare`), the same request the front
  sends to Triton, as a gRPC client writes it;
- **AsyncioDecoupledModelClient**: pytriton's asyncio client (what a pytriton user writes).

Each round measures every path, in an order that turns from round to round, so that the load
other programs put on the machine falls on all paths alike: `--requests` non-streamed answers
one after another (the added latency), then `--streams` streams of `--pieces` pieces at once,
each checked to hold exactly its own pieces (streams per second, and the CPU time each process
spent per stream). The summary gives the median of the rounds; the ratio and the added latency
are taken within each round, then their median.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from typing import Any, Awaitable, Callable, Dict, List, Optional, Tuple

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

import aiohttp
import grpc
import psutil
from support import free_ports, server_config
from tritonclient.grpc import service_pb2, service_pb2_grpc

from pytriton.client import AsyncioDecoupledModelClient
from pytriton.openai.convention import bytes_elements, bytes_tensor
from pytriton.triton import Triton

PATHS = {"front": "the OpenAI front (HTTP)", "bare_grpc": "bare gRPC stream",
         "client_grpc": "AsyncioDecoupledModelClient (gRPC)"}
Single = Callable[[str], Awaitable[str]]
Stream = Callable[[str, int], Awaitable[str]]


def words(messages: List[Dict[str, Any]], params: Dict[str, Any]):
    tag = params.get("tag", "x")
    for index in range(params.get("pieces", 1)):
        yield f"{tag}-{index} "


def _inputs(tag: str, pieces: int) -> Dict[str, np.ndarray]:
    return {"messages": np.array([json.dumps([{"role": "user", "content": "hi"}]).encode()], dtype=object),
            "params": np.array([json.dumps({"tag": tag, "pieces": pieces}).encode()], dtype=object)}


async def _front_answer(session: aiohttp.ClientSession, url: str, tag: str, pieces: int, stream: bool) -> str:
    body = {"model": "bench-chat", "messages": [{"role": "user", "content": "hi"}], "stream": stream,
            "tag": tag, "pieces": pieces}
    async with session.post(f"{url}/v1/chat/completions", json=body) as response:
        if response.status != 200:
            raise RuntimeError(f"the front answered {response.status}: {await response.text()}")
        if not stream:
            return str((await response.json())["choices"][0]["message"]["content"])
        text, rest = [], b""
        async for data in response.content.iter_any():  # events as they come, several per read when they can
            *events, rest = (rest + data).split(b"\n\n")
            for raw in events:
                if raw.startswith(b"data: {"):
                    event = json.loads(raw[6:])
                    text.append(event["choices"][0]["delta"].get("content") or "" if event["choices"] else "")
        return "".join(text)


async def _grpc_answer(client: AsyncioDecoupledModelClient, tag: str, pieces: int) -> str:
    text = []
    async for part in client.infer_sample(**_inputs(tag, pieces)):
        piece = json.loads(part["piece"][0])
        text.append(piece.get("content", ""))
    return "".join(text)


class Bare:
    """A bare gRPC client of the chat model: one ``ModelStreamInfer`` call per answer, as a gRPC
    client writes it (and as the front did before it kept its calls open, `pytriton.openai.link.Streams`)."""

    def __init__(self, address: str) -> None:
        self._channel = grpc.aio.insecure_channel(address)
        self._stub = service_pb2_grpc.GRPCInferenceServiceStub(self._channel)

    async def answer(self, tag: str, pieces: int) -> str:
        request = service_pb2.ModelInferRequest(model_name="bench-chat")
        inputs = (("messages", [{"role": "user", "content": "hi"}]), ("params", {"tag": tag, "pieces": pieces}))
        for name, value in inputs:
            request.inputs.add(name=name, datatype="BYTES", shape=[1])
            request.raw_input_contents.append(bytes_tensor([json.dumps(value).encode("utf-8")]))
        request.parameters["triton_enable_empty_final_response"].bool_param = True
        ended = asyncio.Event()

        async def requests():
            yield request
            await ended.wait()  # half-closed once the answer is complete

        call = self._stub.ModelStreamInfer(requests())
        text = []
        try:
            async for response in call:
                if response.error_message:
                    raise RuntimeError(response.error_message)
                for raw in response.infer_response.raw_output_contents:
                    text += [json.loads(element).get("content", "") for element in bytes_elements(raw)]
                final = response.infer_response.parameters.get("triton_final_response")
                if final is not None and final.bool_param:
                    break
        finally:
            ended.set()
        return "".join(text)

    async def close(self) -> None:
        await self._channel.close()


def _expected(tag: str, pieces: int) -> str:
    return "".join(f"{tag}-{index} " for index in range(pieces))


async def _latencies(call: Single, count: int, tag: str) -> List[float]:
    found = []
    for index in range(count):
        started = time.perf_counter()
        answer = await call(f"{tag}{index}")
        found.append(time.perf_counter() - started)
        if answer != _expected(f"{tag}{index}", 1):
            raise RuntimeError(f"wrong answer {answer!r}")
    return found


class CpuClock:
    """CPU seconds of this process, tritonserver and the front's process."""

    def __init__(self, front_pid: Optional[int]) -> None:
        me = psutil.Process()
        self._processes = {"serving": me, "front": psutil.Process(front_pid) if front_pid else None,
                           "tritonserver": next(p for p in me.children() if p.name() == "tritonserver")}

    def read(self) -> Dict[str, float]:
        found = {}
        for name, process in self._processes.items():
            times = process.cpu_times() if process is not None else None  # None: a front on a thread
            found[name] = times.user + times.system if times is not None else 0.0
        return found


async def _streams(call: Stream, count: int, pieces: int, clock: CpuClock) -> Tuple[float, Dict[str, float]]:
    before = clock.read()
    started = time.perf_counter()
    answers = await asyncio.gather(*(call(f"s{index}", pieces) for index in range(count)))
    took = time.perf_counter() - started
    after = clock.read()
    for index, answer in enumerate(answers):
        if answer != _expected(f"s{index}", pieces):
            raise RuntimeError(f"stream {index} received {answer[:80]!r}")
    return count / took, {name: (after[name] - before[name]) / count * 1e3 for name in after}


async def measure(front_url: str, grpc_url: str, front_pid: Optional[int], rounds: int, requests: int, streams: int,
                  pieces: int) -> Dict[str, Any]:
    connector = aiohttp.TCPConnector(limit=0)
    bare = Bare(grpc_url.replace("grpc://", ""))
    clock = CpuClock(front_pid)
    per_round: List[Dict[str, Any]] = []
    async with aiohttp.ClientSession(connector=connector) as session, \
            AsyncioDecoupledModelClient(grpc_url, "bench-chat", inference_timeout_s=120) as client:
        paths: Dict[str, Tuple[Single, Stream]] = {
            "front": (lambda tag: _front_answer(session, front_url, tag, 1, False),
                      lambda tag, n: _front_answer(session, front_url, tag, n, True)),
            "bare_grpc": (lambda tag: bare.answer(tag, 1), bare.answer),
            "client_grpc": (lambda tag: _grpc_answer(client, tag, 1), lambda tag, n: _grpc_answer(client, tag, n)),
        }
        for single, stream in paths.values():  # warm-up: connections, the model's first calls
            await _latencies(single, 20, "warm")
            await asyncio.gather(*(stream(f"w{index}", pieces) for index in range(32)))
        names = list(paths)
        for number in range(rounds):
            order = names[number % len(names):] + names[:number % len(names)]
            figures: Dict[str, Any] = {}
            for name in order:
                found = sorted(await _latencies(paths[name][0], requests, f"r{number}-"))
                figures[f"{name}_median_ms"] = statistics.median(found) * 1e3
                figures[f"{name}_p90_ms"] = found[int(0.9 * len(found))] * 1e3
            for name in order:
                rate, cpu = await _streams(paths[name][1], streams, pieces, clock)
                figures[f"{name}_streams_per_s"] = rate
                figures[f"{name}_cpu_ms_per_stream"] = cpu
            figures["ratio"] = figures["front_streams_per_s"] / figures["bare_grpc_streams_per_s"]
            figures["added_ms"] = figures["front_median_ms"] - figures["bare_grpc_median_ms"]
            per_round.append(figures)
    await bare.close()
    summary: Dict[str, Any] = {"rounds": per_round, "requests": requests, "streams": streams, "pieces": pieces,
                               "cpus": os.cpu_count()}
    for key in per_round[0]:
        if isinstance(per_round[0][key], dict):
            summary[key] = {k: statistics.median(r[key][k] for r in per_round) for k in per_round[0][key]}
        else:
            summary[key] = statistics.median(r[key] for r in per_round)
    return summary


def _cpu(figures: Dict[str, float]) -> str:
    return ", ".join(f"{name} {value:.2f}" for name, value in figures.items())


def report(summary: Dict[str, Any]) -> str:
    lines = [f"{summary['streams']} streams of {summary['pieces']} pieces at once; {summary['requests']} "
             f"non-streamed answers per path and round; {len(summary['rounds'])} rounds on {summary['cpus']} CPUs",
             "", "| round | front streams/s | bare gRPC streams/s | ratio | client streams/s | front median ms | "
             "bare median ms | added ms |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for number, figures in enumerate([*summary["rounds"], summary]):
        label = str(number + 1) if number < len(summary["rounds"]) else "median"
        lines.append(f"| {label} | {figures['front_streams_per_s']:.0f} | {figures['bare_grpc_streams_per_s']:.0f} | "
                     f"{figures['ratio']:.2f} | {figures['client_grpc_streams_per_s']:.0f} | "
                     f"{figures['front_median_ms']:.2f} | {figures['bare_grpc_median_ms']:.2f} | "
                     f"{figures['added_ms']:.2f} |")
    lines.append("")
    lines.append("CPU ms per stream (median of the rounds), by process:")
    for name, label in PATHS.items():
        lines.append(f"- {label}: {_cpu(summary[f'{name}_cpu_ms_per_stream'])}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--requests", type=int, default=100)
    parser.add_argument("--streams", type=int, default=256)
    parser.add_argument("--pieces", type=int, default=16)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    (openai_port,) = free_ports(1)
    config = server_config(openai_port=openai_port)
    with Triton(config=config) as triton:
        triton.bind_chat(model_name="bench-chat", infer_func=words)
        triton.run()
        front_pid = getattr(triton._front, "pid", None)  # None: a front on a thread of this process (before)
        summary = asyncio.run(measure(f"http://127.0.0.1:{openai_port}", f"grpc://127.0.0.1:{config.grpc_port}",
                                      front_pid, args.rounds, args.requests, args.streams, args.pieces))
    print(report(summary))
    if args.json:
        with open(args.json, "w") as out:
            json.dump(summary, out, indent=2)


if __name__ == "__main__":
    main()
