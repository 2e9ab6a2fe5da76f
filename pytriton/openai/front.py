"""The OpenAI-compatible front: an aiohttp server on a thread of the serving process.

Started by `Triton` when ``TritonConfig.openai_port`` is set, once Triton is ready; it serves
the routes of `pytriton.openai.handlers` and talks to Triton over gRPC on localhost
(`pytriton.openai.link`). Why aiohttp: it is installed already (``tritonclient[http]`` needs it),
it serves HTTP/1.1 with streamed responses and cancels a handler whose client disconnected
(``handler_cancellation``), which is how a client that leaves cancels its request; an ASGI app
on uvicorn would bring three packages more for the same. The server runs its own event loop on
a daemon thread, so a serving script's main thread stays free for ``serve()``'s signal wait.

Stopping is in two steps, to fit the server's drain: `begin_stop` answers new requests 503 (and
``/health`` too) while the answers in flight go on; `close`, once Triton has stopped, closes the
port, the connections and the channel, and ends the thread.
"""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import logging
import threading
from typing import Any, Awaitable, Callable, Optional

from aiohttp import web

from pytriton.exceptions import PyTritonServerStartupError
from pytriton.openai.errors import OpenAIError
from pytriton.openai.handlers import MAX_BODY_BYTES, Observe, Routes
from pytriton.openai.link import TritonLink

logger = logging.getLogger("pytriton.openai")

_START_TIMEOUT_S = 30.0
_CLOSE_TIMEOUT_S = 10.0
_OPEN_PATHS = ("/health",)
"""Paths answered without the API key: probes send none."""


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


class OpenAIFront:
    """The front's server (see the module docstring).

    Args:
        port: the port it listens on.
        host: the address it binds (Triton's ``http_address``; every interface when None).
        grpc_address: ``host:port`` of Triton's gRPC endpoint.
        access_token: Triton's access token, for the APIs the front calls that may be restricted.
        api_key: the key clients must send as ``Authorization: Bearer <key>``; None: no check.
        observe: records each finished answer (the front's histograms), or None.
    """

    def __init__(self, port: int, host: Optional[str], grpc_address: str, access_token: Optional[str],
                 api_key: Optional[str], observe: Optional[Observe] = None) -> None:
        self.port = port
        self._host = host or "0.0.0.0"
        self._link = TritonLink(grpc_address, access_token)
        self._key = api_key.encode("utf-8") if api_key else None
        self._routes = Routes(self._link, observe)
        self._stopping = False
        self._thread: Optional[threading.Thread] = None
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._close: Optional[asyncio.Event] = None
        self._started = threading.Event()
        self._error: Optional[BaseException] = None
        self._runner: Optional[web.AppRunner] = None

    def start(self) -> None:
        """Listen on the port; returns once it accepts connections.

        Raises:
            PyTritonServerStartupError: the port could not be opened (its reason).
        """
        if self._key is None and not _is_loopback(self._host):
            logger.warning("The OpenAI-compatible API on port %d (address %s) takes requests without an API key; "
                           "set TritonSecurityConfig(openai_api_key=...) or PYTRITON_OPENAI_API_KEY, or keep the "
                           "port private", self.port, self._host)
        self._thread = threading.Thread(target=self._run, name="pytriton-openai", daemon=True)
        self._thread.start()
        if not self._started.wait(_START_TIMEOUT_S):
            raise PyTritonServerStartupError(f"the OpenAI-compatible API did not open port {self.port} within "
                                             f"{_START_TIMEOUT_S:.0f} s")
        if self._error is not None:
            self._thread.join(_CLOSE_TIMEOUT_S)
            raise PyTritonServerStartupError(
                f"the OpenAI-compatible API could not listen on {self._host}:{self.port}: {self._error}; "
                "choose another port with TritonConfig(openai_port=...)") from self._error
        logger.info("OpenAI-compatible API listening on %s:%d", self._host, self.port)

    def begin_stop(self) -> None:
        """From now on, new requests get 503; answers in flight go on."""
        self._stopping = True

    def close(self) -> None:
        """Close the port and every connection, and end the thread (idempotent)."""
        self._stopping = True
        loop, close, thread = self._loop, self._close, self._thread
        if loop is not None and close is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(close.set)
            except RuntimeError:  # the loop ended meanwhile
                pass
        if thread is not None:
            thread.join(_CLOSE_TIMEOUT_S)
            if thread.is_alive():
                logger.warning("the OpenAI-compatible API's thread did not end within %.0f s", _CLOSE_TIMEOUT_S)
        self._thread = None

    # -- the thread ------------------------------------------------------------------------
    def _run(self) -> None:
        loop = self._loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        try:
            try:
                loop.run_until_complete(self._open())
            except BaseException as exc:  # noqa: BLE001 - reported to start() in the caller's thread
                self._error = exc
                loop.run_until_complete(self._shutdown())
                return
            finally:
                self._started.set()
            assert self._close is not None
            loop.run_until_complete(self._close.wait())
            loop.run_until_complete(self._shutdown())
        finally:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    async def _open(self) -> None:
        self._close = asyncio.Event()
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
        self._runner = web.AppRunner(app, handler_cancellation=True, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        await web.TCPSite(self._runner, self._host, self.port, reuse_address=True).start()

    async def _shutdown(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        await self._routes.close()
        await self._link.close()

    @web.middleware
    async def _middleware(self, request: web.Request,
                          handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
        try:
            if self._stopping:
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


def start_front(**kwargs: Any) -> OpenAIFront:
    """An `OpenAIFront` (see its arguments), started."""
    front = OpenAIFront(**kwargs)
    front.start()
    return front
