"""One request's stream of responses from a decoupled model, blocking, over gRPC or HTTP.

The client step of a streamed request for :class:`~pytriton.client.streaming.DecoupledModelClient`.
A :class:`ResponseStream` is opened by :meth:`TritonCore.open_stream
<pytriton.client.core.TritonCore.open_stream>` (the request is then on its way) and read one
response at a time, each wait bounded by its own time limit; errors come out already
translated (``pytriton.client._errors``). Ending it early, by :meth:`ResponseStream.cancel`
or on a timeout or an error, cancels the request on the server:

* gRPC: ``tritonclient.grpc``'s bidirectional stream (``start_stream``,
  ``async_stream_infer(enable_empty_final_response=True)``, ``stop_stream``). The response that
  carries ``triton_final_response`` ends the stream; ``stop_stream(cancel_requests=True)``
  cancels a call cut short, which Triton passes on to the model (``request.is_cancelled()``).
* HTTP: ``POST .../generate_stream`` on a connection of its own (``http.client``); the events
  are decoded by :mod:`pytriton.client.generate`; the end of the body ends the stream, and
  closing the connection cancels the request (Triton 2.51 cancels it when the client goes).
"""

from __future__ import annotations

import abc
import contextlib
import dataclasses
import http.client
import json
import logging
import queue
import select
import socket
import time
from collections.abc import Mapping
from typing import Any, Callable

import numpy as np
import tritonclient.grpc
from tritonclient.utils import InferenceServerException

from pytriton.client._args import SEQUENCE_KEYS, with_auth
from pytriton.client._errors import (
    INFER_ACTION,
    STREAM_ACTION,
    hint_missing_token,
    next_response_timeout,
    server_error,
    stream_error,
    translate_errors,
)
from pytriton.client.codec import from_infer_result, is_final_response, to_infer_inputs
from pytriton.client.core_request import CoreRequest
from pytriton.client.generate import StreamPost, stream_post
from pytriton.client.lost import wait_slices
from pytriton.client.model_config import ClientModelConfig
from pytriton.client.url import TritonUrl

_LOGGER = logging.getLogger(__name__)

#: Bytes read from an event stream at once (a read returns what has arrived, up to this).
READ_SIZE = 65536
#: The most of an error body kept in a message.
ERROR_BODY_LIMIT = 4096


class StreamBase(abc.ABC):
    """What the blocking and the asyncio streams share: the names used in messages, and ending once."""

    def __init__(self, model_name: str, url: TritonUrl) -> None:
        """Name the model and server, for messages."""
        self.model_name = model_name
        self.url = url
        self.finished = False

    def cancel(self) -> None:
        """End the stream; a request still running is cancelled on the server. Idempotent, never awaited."""
        if not self.finished:
            self.finished = True
            try:
                self._close()
            except Exception as exc:  # noqa: BLE001 - closing must not hide why the stream ended
                _LOGGER.debug("Closing the stream of %s at %s failed: %s", self.model_name, self.url, exc)

    @abc.abstractmethod
    def _close(self) -> None: ...


class ResponseStream(StreamBase):
    """The responses of one request to a decoupled model, read one at a time.

    Not thread safe. Once it has ended (final response, error, timeout or :meth:`cancel`),
    :meth:`next_response` returns None. When :attr:`look` is set, each wait for a response is
    cut in slices (`pytriton.client.lost.wait_slices`) and `look` is called between two: it
    raises to end the request (its instance died, `pytriton.client.lost`).
    """

    look: Callable[[], None] | None = None

    def next_response(self, timeout_s: float) -> dict[str, np.ndarray] | None:
        """The outputs of the next response, or None once the request's final response has come.

        Args:
            timeout_s: the longest to wait for this response.

        Raises:
            PyTritonClientTimeoutError: no response within ``timeout_s``; the request is cancelled.
            PyTritonClientInferenceServerError: the model or server failed the request.
            PyTritonClientModelUnavailableError: the server cannot be reached or went away.
        """
        if self.finished:
            return None
        try:
            outputs = self._next(timeout_s)
        except BaseException:
            self.cancel()
            raise
        if outputs is None:
            self.cancel()  # the request is complete: this only closes the stream
        return outputs

    def __del__(self) -> None:
        # A stream dropped unread (e.g. an iterator never started) must not keep the request running.
        with contextlib.suppress(Exception):
            self.cancel()

    @abc.abstractmethod
    def _next(self, timeout_s: float) -> dict[str, np.ndarray] | None: ...


class GrpcResponseStream(ResponseStream):
    """A request on ``tritonclient.grpc``'s stream; the client can run one stream at a time."""

    def __init__(self, client: tritonclient.grpc.InferenceServerClient, url: TritonUrl, request: CoreRequest) -> None:
        """Start the stream and send the request.

        Args:
            client: the gRPC client (no other stream may run on it).
            url: the server's address, for messages.
            request: what to send; its headers (gRPC metadata) include the access token's, its
                ``timeout_s`` is the time limit named if starting fails.
        """
        assert request.timeout_s is not None
        timeout_s, parameters, headers = request.timeout_s, request.parameters, request.headers
        super().__init__(request.model_name, url)
        self._client = client
        self._final_seen = False
        self._token_sent = any("access-token" in key.lower() for key in (headers or {}))
        responses: queue.Queue[tuple[Any, Any]] = queue.Queue()
        self._responses = responses
        with translate_errors(INFER_ACTION, str(url), timeout_s):
            # The callback holds the queue, not the stream: a stream nobody reads can then be
            # collected, and its __del__ cancels the request.
            client.start_stream(callback=lambda result, error: responses.put((result, error)), headers=headers)
        try:
            with translate_errors(INFER_ACTION, str(url), timeout_s):
                try:
                    # tritonclient takes the sequence as keywords, and refuses its names as parameters.
                    own = {key: value for key, value in (parameters or {}).items() if key not in SEQUENCE_KEYS}
                    sequence = {key: value for key, value in (parameters or {}).items() if key in SEQUENCE_KEYS}
                    client.async_stream_infer(
                        request.model_name,
                        to_infer_inputs(tritonclient.grpc, request.inputs),
                        model_version=request.model_version,
                        request_id=request.request_id,
                        parameters=own or None,
                        enable_empty_final_response=True,
                        priority=request.priority,
                        **sequence,
                    )
                except InferenceServerException:
                    # A stream the server refused at once (e.g. without the access token): tritonclient
                    # only says "no longer in valid state" and hands the reason to the callback.
                    reason = self._early_failure(timeout_s)
                    if reason is None:
                        raise
                    error = stream_error(reason, action=INFER_ACTION, url=str(url), timeout_s=timeout_s)
                    raise hint_missing_token(error, self._token_sent) from reason
        except BaseException:
            self.cancel()
            raise

    def _early_failure(self, timeout_s: float) -> BaseException | None:
        with contextlib.suppress(queue.Empty):
            _, error = self._responses.get(timeout=min(timeout_s, 1.0))
            return error if isinstance(error, BaseException) else None
        return None

    def _next(self, timeout_s: float) -> dict[str, np.ndarray] | None:
        deadline = time.monotonic() + timeout_s
        while not self._final_seen:
            result, error = self._get(deadline, timeout_s)
            if error is not None:
                translated = stream_error(error, action=STREAM_ACTION, url=str(self.url), timeout_s=timeout_s)
                raise hint_missing_token(translated, self._token_sent) from error
            response = result.get_response()
            self._final_seen = is_final_response(response)
            if response.outputs or not self._final_seen:
                with translate_errors(STREAM_ACTION, str(self.url), timeout_s):
                    return from_infer_result(result)
        return None

    def _get(self, deadline: float, timeout_s: float) -> tuple[Any, Any]:
        left = max(deadline - time.monotonic(), 0.0)
        try:
            if self.look is None:
                return self._responses.get(timeout=left)
            for wait_s in wait_slices(left):
                with contextlib.suppress(queue.Empty):
                    return self._responses.get(timeout=wait_s)
                self.look()
        except queue.Empty:
            pass
        raise next_response_timeout(self.model_name, str(self.url), timeout_s)

    def _close(self) -> None:
        # A stream cut short is cancelled, which Triton passes on to the model. A completed one is
        # only closed: Triton 2.51 now and then keeps the request of a completed call it is told to
        # cancel, and the model can then never unload (about 1 unload in 15 after gRPC streams
        # hung so; none in 40 with the polite stop, which costs about 1 ms per stream).
        stream = getattr(self._client, "_stream", None)
        self._client.stop_stream(cancel_requests=not self._final_seen)
        # tritonclient's cancel leaves gRPC's request thread blocked on the stream's request queue
        # for good (one thread per stream); the end-of-requests marker it omits lets it finish.
        queue = getattr(stream, "_request_queue", None)
        if queue is not None:
            queue.put(None)


class HttpResponseStream(ResponseStream):
    """A request on Triton's ``generate_stream`` endpoint, on an HTTP connection of its own."""

    def __init__(
        self, url: TritonUrl, model_name: str, post: StreamPost, *, headers: Mapping[str, str] | None, timeout_s: float
    ) -> None:
        """Connect, send the request and read the answer's status.

        Args:
            url: the server's address.
            model_name: the model, for messages.
            post: the endpoint's path, the request's JSON and the decoder of the events
                (:func:`~pytriton.client.generate.stream_post`).
            headers: extra HTTP headers, the access token's included.
            timeout_s: the longest to wait for the connection and the answer's status.

        Raises:
            PyTritonClientTimeoutError: no answer within ``timeout_s``.
            PyTritonClientError: the server refused the request (its status and message mapped
                as for the other clients).
        """
        super().__init__(model_name, url)
        self._decoder = post.decoder
        self._connection = http.client.HTTPConnection(url.hostname, url.port, timeout=timeout_s)
        self._response: http.client.HTTPResponse | None = None
        self._chunks: ChunkedDecoder | None = None
        request_headers = {"Content-Type": "application/json", "Accept": "text/event-stream", **(headers or {})}
        try:
            with translate_errors(INFER_ACTION, str(url), timeout_s):
                try:
                    self._connection.request("POST", post.path, body=post.body, headers=request_headers)
                    # Triton sends the answer's head with the first response: this waits for it.
                    response = self._connection.getresponse()
                except (socket.timeout, TimeoutError) as exc:
                    raise next_response_timeout(model_name, str(url), timeout_s) from exc
                if response.status != 200:
                    raise server_error(
                        str(response.status),
                        error_text(response.read(ERROR_BODY_LIMIT)),
                        action=INFER_ACTION,
                        url=str(url),
                        timeout_s=timeout_s,
                    )
        except BaseException:
            self.cancel()
            raise
        self._response = response

    def _next(self, timeout_s: float) -> dict[str, np.ndarray] | None:
        deadline = time.monotonic() + timeout_s
        while self._decoder.waiting:
            if not self._decoder.take(self._read(deadline, timeout_s)):
                return None
        return self._decoder.next_response()

    def _read(self, deadline: float, timeout_s: float) -> bytes:
        """The next bytes of the answer's body (de-chunked), b"" at its end.

        A chunked body (Triton's event stream) is read from the socket itself and de-chunked by
        `ChunkedDecoder`, so that a wait can be cut in slices with `look` between two: a read of
        ``http.client``'s stopped by a timeout inside a chunk's head would spoil the response.
        """
        response, sock = self._response, self._connection.sock
        if response is None or sock is None:
            raise next_response_timeout(self.model_name, str(self.url), timeout_s)
        if not response.chunked:
            return self._read_plain(response, sock, deadline, timeout_s)
        if self._chunks is None:
            self._chunks = ChunkedDecoder()
            sock.settimeout(0)
            with contextlib.suppress(BlockingIOError):
                # What came with the head is in the response's buffer: take it, then the socket's.
                buffered = response.fp.peek(READ_SIZE) if response.fp is not None else b""
                if buffered:
                    payload = self._chunks.feed(response.fp.read(len(buffered)))
                    if payload or self._chunks.done:
                        return payload
        while not self._chunks.done:
            self._await_data(sock, deadline, timeout_s)
            try:
                data = sock.recv(READ_SIZE)
            except BlockingIOError:
                continue
            except OSError as exc:
                raise stream_error(exc, action=STREAM_ACTION, url=str(self.url), timeout_s=timeout_s) from exc
            if not data:
                raise stream_error(http.client.IncompleteRead(b""), action=STREAM_ACTION, url=str(self.url),
                                   timeout_s=timeout_s)
            try:
                payload = self._chunks.feed(data)
            except ValueError as exc:
                raise stream_error(exc, action=STREAM_ACTION, url=str(self.url), timeout_s=timeout_s) from exc
            if payload:
                return payload
        return b""

    def _read_plain(self, response: http.client.HTTPResponse, sock: socket.socket, deadline: float,
                    timeout_s: float) -> bytes:
        left = deadline - time.monotonic()
        if left <= 0:
            raise next_response_timeout(self.model_name, str(self.url), timeout_s)
        sock.settimeout(left)  # the socket's limit bounds each read, so the wait for this response
        try:
            return response.read1(READ_SIZE)
        except (socket.timeout, TimeoutError) as exc:
            raise next_response_timeout(self.model_name, str(self.url), timeout_s) from exc
        except Exception as exc:
            raise stream_error(exc, action=STREAM_ACTION, url=str(self.url), timeout_s=timeout_s) from exc

    def _await_data(self, sock: socket.socket, deadline: float, timeout_s: float) -> None:
        """Wait until the socket has bytes (or its end) to read, calling `look` between slices."""
        left = deadline - time.monotonic()
        if self.look is None:
            if left > 0 and select.select([sock], [], [], left)[0]:
                return
        else:
            for wait_s in wait_slices(left):
                if select.select([sock], [], [], wait_s)[0]:
                    return
                self.look()
        raise next_response_timeout(self.model_name, str(self.url), timeout_s)

    def _close(self) -> None:
        sock = self._connection.sock
        if sock is not None:
            # Shut down first: the response's file object holds the socket open past close().
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        if self._response is not None:
            self._response.close()
        self._connection.close()


class StreamOpener:
    """Opens streams to one server: over gRPC on the core's ``tritonclient`` client (which runs one
    stream at a time), over HTTP on a connection of each stream's own (``tritonclient.http`` cannot stream)."""

    def __init__(self, url: TritonUrl, auth: Mapping[str, str], connection: Callable[[], Any]) -> None:
        """Prepare; nothing is opened before the first stream.

        Args:
            url: the server's address; its scheme picks the protocol.
            auth: the headers (HTTP) or metadata (gRPC) carrying the access token.
            connection: the core's ``tritonclient.grpc`` client (made on the first call).
        """
        self.url = url
        self._auth = dict(auth)
        self._connection = connection

    def open(self, request: CoreRequest, config: ClientModelConfig) -> ResponseStream:
        """Send one request and return the stream of its responses; see ``TritonCore.open_stream``."""
        timeout_s = request.timeout_s
        assert timeout_s is not None
        request = dataclasses.replace(request, headers=with_auth(self._auth, request.headers))
        if self.url.scheme == "grpc":
            return GrpcResponseStream(self._connection(), self.url, request)
        post = stream_post(request, config, str(self.url))
        return HttpResponseStream(self.url, request.model_name, post, headers=request.headers, timeout_s=timeout_s)

    def close(self) -> None:
        """Nothing of its own to close: gRPC streams end with the core's client, HTTP ones with their connection."""


class ChunkedDecoder:
    """HTTP/1.1 chunked transfer coding, undone on bytes as they arrive (`feed`).

    Raises ValueError on a malformed chunk head; `done` once the last (empty) chunk has come
    (its trailers, which Triton does not send, are ignored).
    """

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._left: int | None = None  # None: a chunk head is next; 0: the CRLF after a chunk's data
        self.done = False

    def feed(self, data: bytes) -> bytes:
        """Take `data`; return the chunk data it completes (possibly b"")."""
        self._buffer += data
        out = bytearray()
        while not self.done:
            if self._left is None:
                end = self._buffer.find(b"\r\n")
                if end < 0:
                    if len(self._buffer) > 1024:
                        raise ValueError("a chunk head longer than 1024 bytes")
                    break
                size = int(bytes(self._buffer[:end]).split(b";", 1)[0].strip() or b"x", 16)
                del self._buffer[:end + 2]
                if size == 0:
                    self.done = True
                else:
                    self._left = size
            elif self._left == 0:
                if len(self._buffer) < 2:
                    break
                if self._buffer[:2] != b"\r\n":
                    raise ValueError("no CRLF after a chunk's data")
                del self._buffer[:2]
                self._left = None
            else:
                take = min(self._left, len(self._buffer))
                if take == 0:
                    break
                out += self._buffer[:take]
                del self._buffer[:take]
                self._left -= take
        return bytes(out)


def error_text(body: bytes) -> str:
    """The message of an error answer: the ``error`` of its JSON, else the text itself."""
    text = body.decode("utf-8", "replace")
    with contextlib.suppress(ValueError):
        parsed = json.loads(text)
        if isinstance(parsed, dict) and "error" in parsed:
            return str(parsed["error"])
    return text
