"""pytriton's HTTP clients ask for uncompressed answers: Triton compresses an answer whenever the
request accepts gzip, which aiohttp (under ``tritonclient.http.aio``) asks for by default; the
asyncio client then spent most of a 1 MiB call on the server's compression and its own inflation.

A relay between the client and the server records what crosses it: the request's headers and
the answer's. The control case shows that the server really compresses when asked.
"""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Dict, List

import aiohttp
import numpy as np
import pytest
from support import http_url, running_triton

from pytriton.client import AsyncioModelClient, ModelClient
from pytriton.decorators import batch
from pytriton.model_config import ModelConfig, Tensor

pytestmark = pytest.mark.functional

VALUES = 64 * 1024  # 256 KiB of float32: worth compressing


@batch
def _identity(INPUT_1):
    return {"OUTPUT_1": INPUT_1}


class Relay:
    """A TCP relay on a free port to `target_port`, in a thread of its own; `heads` holds the
    header block of every message that crossed it, each direction tagged (``"request"``,
    ``"answer"``), lower-cased."""

    def __init__(self, target_port: int) -> None:
        self.heads: List[Dict[str, str]] = []
        self._target_port = target_port
        self._loop = asyncio.new_event_loop()
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        assert self._started.wait(10)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        server = self._loop.run_until_complete(asyncio.start_server(self._serve, "127.0.0.1", 0))
        self.port = server.sockets[0].getsockname()[1]
        self._started.set()
        self._loop.run_forever()
        # Cancel the relays still open and let them close their sockets while the loop still
        # runs: left to the garbage collector, each one's `finally` ran on a closed loop and
        # pytest reported it as an unraisable exception.
        server.close()
        pending = asyncio.all_tasks(self._loop)
        for task in pending:
            task.cancel()
        self._loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        self._loop.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        upstream_reader, upstream_writer = await asyncio.open_connection("127.0.0.1", self._target_port)
        await asyncio.gather(self._pipe(reader, upstream_writer, "request"),
                             self._pipe(upstream_reader, writer, "answer"))

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, side: str) -> None:
        buffered, body_left = b"", 0  # what is not parsed yet; the bytes of the current body still to come
        try:
            while chunk := await reader.read(1 << 16):
                # Recorded before it is passed on: the test reads `heads` as soon as its client has
                # the answer, and a record made after the write raced it on a busy machine.
                buffered += chunk
                while True:
                    if body_left:
                        skipped = min(body_left, len(buffered))
                        buffered, body_left = buffered[skipped:], body_left - skipped
                        if body_left:
                            break
                    head, found, rest = buffered.partition(b"\r\n\r\n")
                    if not found:
                        break
                    lines = head.decode("latin-1").split("\r\n")
                    fields = {k.strip().lower(): v.strip().lower()
                              for k, v in (line.split(":", 1) for line in lines[1:] if ":" in line)}
                    self.heads.append({"side": side, "start": lines[0], **fields})
                    buffered, body_left = rest, int(fields.get("content-length", "0"))
                writer.write(chunk)
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    def close(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def answers(self) -> List[Dict[str, str]]:
        return [head for head in self.heads if head["side"] == "answer"]

    def requests(self) -> List[Dict[str, str]]:
        return [head for head in self.heads if head["side"] == "request"]


@pytest.fixture(scope="module")
def relay():
    with running_triton() as triton:
        triton.bind("Identity", _identity, inputs=[Tensor(name="INPUT_1", dtype=np.float32, shape=(-1,))],
                    outputs=[Tensor(name="OUTPUT_1", dtype=np.float32, shape=(-1,))],
                    config=ModelConfig(max_batch_size=4))
        triton.run()
        port = int(http_url(triton._config).rsplit(":", 1)[1])
        relay = Relay(port)
        try:
            yield relay
        finally:
            relay.close()


def _inference_heads(relay: Relay, since: int) -> List[Dict[str, str]]:
    heads = relay.heads[since:]
    infers = [i for i, head in enumerate(heads) if head["side"] == "request" and "/infer" in head["start"]]
    assert infers, heads
    return heads[infers[-1]:]


def _assert_uncompressed(heads: List[Dict[str, str]]) -> None:
    request, answer = heads[0], next(head for head in heads if head["side"] == "answer")
    assert request.get("accept-encoding") == "identity", request
    assert "content-encoding" not in answer, answer
    assert answer["start"].startswith("HTTP/1.1 200"), answer


def test_the_server_compresses_an_answer_when_the_request_accepts_gzip(relay):
    # The control: aiohttp's own default headers, as tritonclient.http.aio sends them.
    async def post() -> None:
        body = json.dumps({"inputs": [{"name": "INPUT_1", "shape": [1, 4096], "datatype": "FP32",
                                       "data": [1.0] * 4096}]}).encode()
        async with aiohttp.ClientSession() as session:
            async with session.post(f"http://127.0.0.1:{relay.port}/v2/models/Identity/infer", data=body) as answer:
                assert answer.status == 200, await answer.text()
                await answer.read()

    since = len(relay.heads)
    asyncio.run(post())
    heads = _inference_heads(relay, since)
    assert "gzip" in heads[0].get("accept-encoding", ""), heads[0]
    assert next(head for head in heads if head["side"] == "answer").get("content-encoding") == "gzip", heads


def test_the_asyncio_client_asks_for_answers_uncompressed(relay):
    data = np.arange(VALUES, dtype=np.float32).reshape(1, -1)

    async def infer() -> np.ndarray:
        async with AsyncioModelClient(f"http://127.0.0.1:{relay.port}", "Identity", init_timeout_s=30) as client:
            return (await client.infer_batch(INPUT_1=data))["OUTPUT_1"]

    since = len(relay.heads)
    np.testing.assert_array_equal(asyncio.run(infer()), data)
    _assert_uncompressed(_inference_heads(relay, since))


def test_the_blocking_client_asks_for_answers_uncompressed_and_a_users_choice_stands(relay):
    data = np.arange(VALUES, dtype=np.float32).reshape(1, -1)
    with ModelClient(f"http://127.0.0.1:{relay.port}", "Identity", init_timeout_s=30) as client:
        since = len(relay.heads)
        np.testing.assert_array_equal(client.infer_batch(INPUT_1=data)["OUTPUT_1"], data)
        _assert_uncompressed(_inference_heads(relay, since))
        since = len(relay.heads)
        np.testing.assert_array_equal(
            client.infer_batch(INPUT_1=data, headers={"Accept-Encoding": "deflate"})["OUTPUT_1"], data)
    heads = _inference_heads(relay, since)
    assert heads[0].get("accept-encoding") == "deflate", heads[0]
