"""The OpenAI-compatible front against a plain pytriton gRPC stream of the same model.

    python bench/openai_front.py [--requests 400] [--streams 256] [--pieces 16] [--json out.json]

One server, one chat model bound with `bind_chat` (a plain generator yielding `--pieces` words
with no delay, so the figures show the serving path, not a model). Two clients in this process
(another process than the server's, as in production), each on its own connection:

- **added latency**: `--requests` non-streamed answers one after another, through the front
  (``POST /v1/chat/completions`` on a kept-alive aiohttp connection) and straight to Triton
  over gRPC, the same model and tensors, two ways: a bare ``ModelStreamInfer`` call per answer
  (`pytriton.openai.link`, what the front itself sends: the front's own cost is the
  difference) and pytriton's `AsyncioDecoupledModelClient` (what a pytriton user writes);
- **streams per second**: `--streams` streams at once, each `--pieces` pieces, through all
  three; each stream must receive exactly its own pieces, or the run fails.

Prints a table and, with ``--json``, writes the figures. docs/openai.md quotes a run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from typing import Any, Dict, List

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

import aiohttp
from support import free_ports, server_config

from pytriton.client import AsyncioDecoupledModelClient
from pytriton.openai.convention import CHAT, ServedModel
from pytriton.openai.link import TritonLink
from pytriton.triton import Triton


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
        text = []
        async for line in response.content:
            if line.startswith(b"data: {"):
                event = json.loads(line[6:])
                text.append(event["choices"][0]["delta"].get("content") or "" if event["choices"] else "")
        return "".join(text)


async def _grpc_answer(client: AsyncioDecoupledModelClient, tag: str, pieces: int) -> str:
    text = []
    async for part in client.infer_sample(**_inputs(tag, pieces)):
        piece = json.loads(part["piece"][0])
        text.append(piece.get("content", ""))
    return "".join(text)


async def _bare_answer(link: TritonLink, tag: str, pieces: int) -> str:
    call = link.chat(ServedModel("bench-chat", CHAT), [{"role": "user", "content": "hi"}],
                     {"tag": tag, "pieces": pieces})
    text = [piece.get("content", "") async for piece in call.pieces()]
    return "".join(text)


def _expected(tag: str, pieces: int) -> str:
    return "".join(f"{tag}-{index} " for index in range(pieces))


async def _latencies(call, count: int) -> List[float]:
    for _ in range(20):  # warm-up: connections, the model's first calls
        await call("warm")
    found = []
    for index in range(count):
        started = time.perf_counter()
        answer = await call(f"r{index}")
        found.append(time.perf_counter() - started)
        if answer != _expected(f"r{index}", 1):
            raise RuntimeError(f"wrong answer {answer!r}")
    return found


async def _streams(call, count: int, pieces: int) -> float:
    started = time.perf_counter()
    answers = await asyncio.gather(*(call(f"s{index}", pieces) for index in range(count)))
    took = time.perf_counter() - started
    for index, answer in enumerate(answers):
        if answer != _expected(f"s{index}", pieces):
            raise RuntimeError(f"stream {index} received {answer[:80]!r}")
    return count / took


async def measure(front_url: str, grpc_url: str, requests: int, streams: int, pieces: int) -> Dict[str, Any]:
    connector = aiohttp.TCPConnector(limit=0)
    link = TritonLink(grpc_url.replace("grpc://", ""), None)
    paths = {}
    async with aiohttp.ClientSession(connector=connector) as session, \
            AsyncioDecoupledModelClient(grpc_url, "bench-chat", inference_timeout_s=120) as client:
        paths["front"] = (lambda tag: _front_answer(session, front_url, tag, 1, False),
                          lambda tag, n: _front_answer(session, front_url, tag, n, True))
        paths["bare_grpc"] = (lambda tag: _bare_answer(link, tag, 1), lambda tag, n: _bare_answer(link, tag, n))
        paths["client_grpc"] = (lambda tag: _grpc_answer(client, tag, 1), lambda tag, n: _grpc_answer(client, tag, n))
        figures: Dict[str, Any] = {"requests": requests, "streams": streams, "pieces": pieces}
        for name, (single, _) in paths.items():
            found = sorted(await _latencies(single, requests))
            figures[f"{name}_median_ms"] = statistics.median(found) * 1e3
            figures[f"{name}_p90_ms"] = found[int(0.9 * len(found))] * 1e3
        for name, (_, stream) in paths.items():
            figures[f"{name}_streams_per_s"] = await _streams(stream, streams, pieces)
    await link.close()
    figures["added_median_ms"] = figures["front_median_ms"] - figures["bare_grpc_median_ms"]
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--streams", type=int, default=256)
    parser.add_argument("--pieces", type=int, default=16)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    (openai_port,) = free_ports(1)
    config = server_config(openai_port=openai_port)
    with Triton(config=config) as triton:
        triton.bind_chat(model_name="bench-chat", infer_func=words)
        triton.run()
        figures = asyncio.run(measure(f"http://127.0.0.1:{openai_port}", f"grpc://127.0.0.1:{config.grpc_port}",
                                      args.requests, args.streams, args.pieces))
    figures["cpus"] = os.cpu_count()
    names = {"front": "the OpenAI front (HTTP)", "bare_grpc": "bare gRPC stream", "client_grpc":
             "AsyncioDecoupledModelClient (gRPC)"}
    print(f"| path | non-streamed answer, median (p90) ms | {args.streams} streams of {args.pieces} pieces, "
          "streams/s |\n| --- | --- | --- |")
    for key, label in names.items():
        print(f"| {label} | {figures[key + '_median_ms']:.2f} ({figures[key + '_p90_ms']:.2f}) | "
              f"{figures[key + '_streams_per_s']:.0f} |")
    print(f"the front adds {figures['added_median_ms']:.2f} ms at the median to a non-streamed answer")
    if args.json:
        with open(args.json, "w") as out:
            json.dump(figures, out, indent=2)


if __name__ == "__main__":
    main()
