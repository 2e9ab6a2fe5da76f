"""The asyncio twin of :mod:`pytriton.client.core_stream`: one request's responses, awaited.

The client step of a streamed request for
:class:`~pytriton.client.streaming_aio.AsyncioDecoupledModelClient`. Everything but the I/O is
shared with the blocking streams: the request builders and decoders (``pytriton.client.codec``,
``pytriton.client.generate``) and the error translation. Each wait for a response is bounded
with ``asyncio.wait_for``; ending a stream early cancels the request on the server.

* gRPC: ``ModelStreamInfer`` on a ``grpc.aio`` channel of the :class:`AsyncStreamOpener`, with
  the request built by :func:`~pytriton.client.codec.to_stream_request` (``tritonclient.grpc.aio``'s
  ``stream_infer`` cannot ask for the empty final response that shows a stream's end).
  Cancelling the call cancels the request.
* HTTP: ``POST .../generate_stream`` on the opener's ``aiohttp`` session; closing the response
  drops its connection, which cancels the request.

Channels and sessions belong to the event loop that creates them, so the opener creates them
on first use, inside the loop.
"""

from __future__ import annotations

import abc
import asyncio
from collections.abc import Callable, Mapping
from typing import Any

import aiohttp
import grpc  # type: ignore[import-untyped,unused-ignore]
import numpy as np
from tritonclient.grpc import InferResult, service_pb2_grpc

from pytriton.client import _errors as errors
from pytriton.client.codec import from_infer_result, is_final_response, to_stream_request
from pytriton.client.core_request import CoreRequest
from pytriton.client.core_stream import ERROR_BODY_LIMIT, StreamBase, error_text
from pytriton.client.generate import ResponseDecoder, stream_post
from pytriton.client.model_config import ClientModelConfig
from pytriton.client.url import TritonUrl

#: gRPC's message size limits, lifted as ``tritonclient`` lifts them for its own channels.
_CHANNEL_OPTIONS = [("grpc.max_send_message_length", 2**31 - 1), ("grpc.max_receive_message_length", 2**31 - 1)]


class AsyncResponseStream(StreamBase):
    """The responses of one request to a decoupled model, awaited one at a time.

    Once it has ended (final response, error, timeout or :meth:`cancel`),
    :meth:`next_response` returns None.
    """

    async def next_response(self, timeout_s: float) -> dict[str, np.ndarray] | None:
        """The outputs of the next response, or None once the final response has come.

        See :meth:`pytriton.client.core_stream.ResponseStream.next_response`.
        """
        if self.finished:
            return None
        try:
            outputs = await self._next(timeout_s)
        except BaseException:
            self.cancel()
            raise
        if outputs is None:
            self.cancel()
        return outputs

    @abc.abstractmethod
    async def _next(self, timeout_s: float) -> dict[str, np.ndarray] | None: ...


class AsyncGrpcResponseStream(AsyncResponseStream):
    """One request on a ``ModelStreamInfer`` call of its own."""

    def __init__(self, call: Any, url: TritonUrl, model_name: str, ended: asyncio.Event, token_sent: bool) -> None:
        """Read the responses of ``call``, a started ``ModelStreamInfer`` carrying one request;
        `ended` is set once they are all read (the request side then half-closes)."""
        super().__init__(model_name, url)
        self._call = call
        self._token_sent = token_sent
        self._ended = ended
        self._final_seen = False

    async def _next(self, timeout_s: float) -> dict[str, np.ndarray] | None:
        try:
            return await self._read(timeout_s)
        except BaseException:
            self._ended.set()
            raise

    async def _read(self, timeout_s: float) -> dict[str, np.ndarray] | None:
        while not self._final_seen:
            try:
                response = await asyncio.wait_for(self._call.read(), timeout_s)
            except asyncio.TimeoutError:
                raise errors.next_response_timeout(self.model_name, str(self.url), timeout_s) from None
            except Exception as exc:
                error = errors.stream_error(exc, action=errors.STREAM_ACTION, url=str(self.url), timeout_s=timeout_s)
                raise errors.hint_missing_token(error, self._token_sent) from exc
            if response is grpc.aio.EOF:  # the server ended the call without a final response
                self._ended.set()
                return None
            if response.error_message:
                raise errors.stream_error(response.error_message, action=errors.STREAM_ACTION, url=str(self.url))
            self._final_seen = is_final_response(response.infer_response)
            if self._final_seen:
                self._ended.set()
            if response.infer_response.outputs or not self._final_seen:
                with errors.translate_errors(errors.STREAM_ACTION, str(self.url), timeout_s):
                    return from_infer_result(InferResult(response.infer_response))
        return None

    def _close(self) -> None:
        self._ended.set()
        self._call.cancel()


class AsyncHttpResponseStream(AsyncResponseStream):
    """One request on Triton's ``generate_stream`` endpoint, on a connection of the session's."""

    def __init__(self, response: aiohttp.ClientResponse, decoder: ResponseDecoder, url: TritonUrl, model_name: str):
        """Read the events of ``response``, an accepted ``generate_stream`` answer."""
        super().__init__(model_name, url)
        self._response = response
        self._decoder = decoder

    async def _next(self, timeout_s: float) -> dict[str, np.ndarray] | None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while self._decoder.waiting:
            try:
                chunk = await asyncio.wait_for(self._response.content.readany(), max(deadline - loop.time(), 0.0))
            except asyncio.TimeoutError:
                raise errors.next_response_timeout(self.model_name, str(self.url), timeout_s) from None
            except Exception as exc:
                raise errors.stream_error(exc, action=errors.STREAM_ACTION, url=str(self.url),
                                          timeout_s=timeout_s) from exc
            if not self._decoder.take(chunk):
                return None
        return self._decoder.next_response()

    def _close(self) -> None:
        # close(), not release(): the connection must go, or the server would not see the client leave.
        self._response.close()


class AsyncStreamOpener:
    """Opens streams to one server, over a ``grpc.aio`` channel or an ``aiohttp`` session of its own."""

    def __init__(self, url: TritonUrl, auth: Mapping[str, str], connection: Callable[[], Any]) -> None:
        """Prepare; nothing is created before the first stream.

        Args:
            url: the server's address; its scheme picks the protocol.
            auth: the headers (HTTP) or metadata (gRPC) carrying the access token.
            connection: the core's ``tritonclient`` client, which the blocking opener streams on;
                not used here (``tritonclient.grpc.aio`` cannot ask for the final response, so a
                channel of this opener's own carries the streams).
        """
        self.url = url
        self._auth = dict(auth)
        self._channel: Any = None
        self._session: aiohttp.ClientSession | None = None

    async def open(self, request: CoreRequest, config: ClientModelConfig) -> AsyncResponseStream:
        """Send one request and return the stream of its responses; see ``TritonCore.open_stream``."""
        assert request.timeout_s is not None
        model_name, timeout_s = request.model_name, request.timeout_s
        merged = {**(request.headers or {}), **self._auth}
        if self.url.scheme == "grpc":
            message = to_stream_request(model_name, request.model_version, request.inputs,
                                        parameters=request.parameters, request_id=request.request_id,
                                        priority=request.priority)
            if self._channel is None:
                self._channel = grpc.aio.insecure_channel(self.url.address, options=_CHANNEL_OPTIONS)
            stub = service_pb2_grpc.GRPCInferenceServiceStub(self._channel)
            metadata = tuple((key.lower(), value) for key, value in merged.items())
            # The request side stays open until the responses are read, as tritonclient's blocking
            # stream does: half-closing at once raced with a refusal (an access token missing), which
            # then sometimes reached the client as a bare "Internal error from Core".
            ended = asyncio.Event()

            async def requests() -> Any:
                yield message
                await ended.wait()

            call = stub.ModelStreamInfer(requests(), metadata=metadata)
            return AsyncGrpcResponseStream(call, self.url, model_name, ended, token_sent=bool(self._auth))
        post = stream_post(request, config, str(self.url))
        response = await self._post(model_name, post.path, post.body, merged, timeout_s)
        return AsyncHttpResponseStream(response, post.decoder, self.url, model_name)

    async def close(self) -> None:
        """Close the channel and the session (cancelling the streams still on them)."""
        channel, self._channel = self._channel, None
        session, self._session = self._session, None
        if channel is not None:
            await channel.close()
        if session is not None:
            await session.close()

    async def _post(self, model_name: str, path: str, body: bytes, headers: Mapping[str, str], timeout_s: float) -> Any:
        if self._session is None:
            # No overall limit: a stream may last any time; each wait has its own.
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None))
        request_headers = {"Content-Type": "application/json", "Accept": "text/event-stream", **headers}
        address = f"http://{self.url.address}{path}"
        session = self._session

        async def post() -> aiohttp.ClientResponse:
            return await session.post(address, data=body, headers=request_headers)

        with errors.translate_errors(errors.INFER_ACTION, str(self.url), timeout_s):
            try:
                # Triton sends the answer's head with the first response: this waits for it.
                response = await asyncio.wait_for(post(), timeout_s)
            except asyncio.TimeoutError as exc:
                raise errors.next_response_timeout(model_name, str(self.url), timeout_s) from exc
            if response.status != 200:
                try:
                    text = await asyncio.wait_for(response.content.read(ERROR_BODY_LIMIT), timeout_s)
                finally:
                    response.close()
                raise errors.server_error(str(response.status), error_text(text), action=errors.INFER_ACTION,
                                          url=str(self.url), timeout_s=timeout_s)
        return response
