"""The OpenAI-compatible front's process: an aiohttp server on its own interpreter.

``main(<fd> <parent pid> <label>)`` runs here (``python -c``, see `pytriton.openai.process`); `pytriton.openai.process`
starts it and talks to it over the socket pair whose end is `fd` (the messages are listed
there). Why a process of its own: in the serving process the front's event loop waited for the
interpreter behind the callables' threads and pytriton's worker, and served half the streams per
second of a bare gRPC client (docs/design/openai.md). Here it has an interpreter, and a core
when one is free, to itself; what it does per request is the same: the routes of
`pytriton.openai.handlers`, Triton over gRPC on localhost (`pytriton.openai.link`).

Why aiohttp: it is installed already (``tritonclient[http]`` needs it), it serves HTTP/1.1 with
streamed responses and cancels a handler whose client disconnected (``handler_cancellation``),
which is how a client that leaves cancels its request; an ASGI app on uvicorn would bring three
packages more for the same.

The process waits for ``listen`` (with the settings: port, address, the API key, Triton's gRPC
address and access token, none of them on its command line), opens the port and says
``listening`` (or ``failed`` and why). ``stop`` answers new requests 503 (and ``/health`` too)
while the answers in flight go on; ``close``, the end of the socket pair (the serving process is
gone), SIGTERM or SIGINT close the port and the connections and end the process. It also dies
by ``PR_SET_PDEATHSIG`` (SIGKILL) with the serving process's thread that started it.
"""

from __future__ import annotations

import asyncio
import ctypes
import hmac
import json
import logging
import os
import signal
import socket
import sys
from typing import Any, Awaitable, Callable, Dict, List, Optional, Tuple

from aiohttp import web

from pytriton.openai.answers import Choice
from pytriton.openai.errors import OpenAIError
from pytriton.openai.handlers import MAX_BODY_BYTES, Routes
from pytriton.openai.link import TritonLink
from pytriton.openai.measures import answer_figures

logger = logging.getLogger("pytriton.openai")

_OPEN_PATHS = ("/health",)
"""Paths answered without the API key: probes send none."""
_REPORT_EVERY_S = 0.1
"""How often the measurements of finished answers go to the serving process: one message for all."""
_PR_SET_PDEATHSIG = 1
_SHUTDOWN_S = 1.0


class OpenAIFront:
    """The front's server (see the module docstring), on the running event loop.

    Args:
        port: the port it listens on.
        host: the address it binds (every interface when None).
        grpc_address: ``host:port`` of Triton's gRPC endpoint.
        access_token: Triton's access token, for the APIs the front calls that may be restricted.
        api_key: the key clients must send as ``Authorization: Bearer <key>``; None: no check.
        observe: records each finished answer (the front's histograms), or None.
    """

    def __init__(self, port: int, host: Optional[str], grpc_address: str, access_token: Optional[str],
                 api_key: Optional[str], observe: Optional[Callable[[str, Choice, float, float], None]] = None
                 ) -> None:
        self.port = port
        self.host = host or "0.0.0.0"
        self._link = TritonLink(grpc_address, access_token)
        self._key = api_key.encode("utf-8") if api_key else None
        self._routes = Routes(self._link, observe)
        self.stopping = False
        """From `begin_stop` on: new requests get 503; answers in flight go on."""
        self._runner: Optional[web.AppRunner] = None

    async def open(self) -> None:
        """Listen on the port (OSError when it cannot)."""
        app = web.Application(middlewares=[self._middleware], client_max_size=MAX_BODY_BYTES)
        routes = self._routes
        app.add_routes([
            web.get("/health", routes.health),
            web.get("/v1/models", routes.list_models),
            web.get("/v1/models/{model}", routes.get_model),
            web.post("/v1/chat/completions", routes.chat),
            web.post("/v1/completions", routes.completions),
            web.post("/v1/embeddings", routes.embeddings),
        ])
        # handler_cancellation: a client that disconnects cancels its handler, hence its Triton requests.
        self._runner = web.AppRunner(app, handler_cancellation=True, access_log=None, shutdown_timeout=_SHUTDOWN_S)
        await self._runner.setup()
        await web.TCPSite(self._runner, self.host, self.port, reuse_address=True).start()

    async def close(self) -> None:
        """Close the port, every connection and the channel to Triton."""
        self.stopping = True
        if self._runner is not None:
            await self._runner.cleanup()
        await self._routes.close()
        await self._link.close()

    @web.middleware
    async def _middleware(self, request: web.Request,
                          handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
        try:
            if self.stopping:
                raise OpenAIError(503, "the server is stopping; retry on another replica")
            if self._key is not None and request.path not in _OPEN_PATHS:
                self._check_key(request.headers.get("Authorization", ""))
            return await handler(request)
        except OpenAIError as error:
            return web.json_response(error.body(), status=error.status)
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            return web.json_response(OpenAIError(exc.status, f"{request.method} {request.path}: {exc.reason}")
                                     .body(), status=exc.status)
        except (asyncio.CancelledError, ConnectionResetError):
            raise
        except Exception as exc:  # any other failure is the client's 500, not a dropped connection
            logger.exception("the OpenAI-compatible API failed on %s %s", request.method, request.path)
            return web.json_response(OpenAIError(500, f"{type(exc).__name__}: {exc}").body(), status=500)

    def _check_key(self, header: str) -> None:
        scheme, _, given = header.partition(" ")
        expected = self._key or b""
        # compare_digest: the time taken does not tell how much of a guess was right.
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode("utf-8"), expected):
            raise OpenAIError(401, "Incorrect API key provided: send 'Authorization: Bearer <key>' with the key "
                                   "this server was given", code="invalid_api_key")


class _Control:
    """This process's end of the socket pair: line-delimited JSON each way."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer
        self._answers: List[Tuple[str, float, Optional[float]]] = []
        self._report: Optional[asyncio.TimerHandle] = None

    async def receive(self) -> Optional[Dict[str, Any]]:
        """The next message; None at the end (the serving process closed its end, or died)."""
        line = await self._reader.readline()
        return json.loads(line) if line else None

    def send(self, message: Dict[str, Any]) -> None:
        if not self._writer.is_closing():
            self._writer.write(json.dumps(message).encode("utf-8") + b"\n")

    def observe(self, model: str, choice: Choice, started: float, ended: float) -> None:
        """One finished answer's measurements, sent with the others of the next `_REPORT_EVERY_S`."""
        figures = answer_figures(choice, started, ended)
        if figures is None:
            return
        self._answers.append((model, *figures))
        if self._report is None:
            self._report = asyncio.get_running_loop().call_later(_REPORT_EVERY_S, self.flush)

    def flush(self) -> None:
        self._report = None
        answers, self._answers = self._answers, []
        if answers:
            self.send({"op": "answers", "answers": answers})


class _ToParent(logging.Handler):
    """The front's log records, sent to the serving process, which logs them with its own setup."""

    def __init__(self, control: _Control) -> None:
        super().__init__(logging.INFO)
        self._control = control

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self._control.send({"op": "log", "level": record.levelno, "message": self.format(record)})
        except Exception:  # noqa: BLE001 - a log record must never break the request that logged it
            self.handleError(record)


async def _serve(control_socket: socket.socket) -> int:
    reader, writer = await asyncio.open_unix_connection(sock=control_socket)
    control = _Control(reader, writer)
    handler = _ToParent(control)
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    ended = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, ended.set)
    front: Optional[OpenAIFront] = None
    try:
        message = await control.receive()
        if message is None or message.get("op") != "listen":
            return 0  # the serving process gave up before the server was ready
        settings = message["settings"]
        front = OpenAIFront(port=settings["port"], host=settings["host"], grpc_address=settings["grpc_address"],
                            access_token=settings["access_token"], api_key=settings["api_key"],
                            observe=control.observe)
        try:
            await front.open()
        except OSError as exc:
            control.send({"op": "failed", "error": f"{type(exc).__name__}: {exc}"})
            await writer.drain()
            return 1
        control.send({"op": "listening", "pid": os.getpid()})

        async def follow() -> None:
            while True:
                message = await control.receive()
                if message is None or message.get("op") == "close":
                    break
                if message.get("op") == "stop" and front is not None:
                    front.stopping = True
            ended.set()

        following = asyncio.ensure_future(follow())
        await ended.wait()
        following.cancel()
        return 0
    finally:
        if front is not None:
            await front.close()
        control.flush()
        logger.removeHandler(handler)
        try:
            await asyncio.wait_for(writer.drain(), 1.0)
        except (OSError, asyncio.TimeoutError):
            pass
        writer.close()


def _die_with_parent(parent_pid: int) -> None:
    """SIGKILL when the serving process's thread that started this one ends; gone already: exit."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # not glibc: the socket pair's end still ends this process
        pass
    if os.getppid() != parent_pid:  # the parent died before the prctl took effect
        os._exit(0)


def main(argv: Optional[List[str]] = None) -> None:
    """The front's process (see the module docstring)."""
    fd, parent_pid = (int(word) for word in (sys.argv[1:] if argv is None else argv)[:2])
    _die_with_parent(parent_pid)
    code = asyncio.run(_serve(socket.socket(fileno=fd)))
    # Its port, connections and channel are closed and its last messages sent: the interpreter's
    # own teardown (gRPC's threads among it) would add a tenth of a second or more to every stop.
    os._exit(code)


if __name__ == "__main__":
    main()
