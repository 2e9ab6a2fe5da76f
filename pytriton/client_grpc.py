"""The asyncio side's own gRPC speaker to Triton: one ``grpc.aio`` channel, its stub, and streams.

The step where a streamed request leaves for Triton, for every asyncio caller that speaks
Triton's gRPC service itself rather than through ``tritonclient``: the asyncio streaming client
(`pytriton.client.core_stream_aio`) and the OpenAI front (`pytriton.openai.link`).
``tritonclient.grpc.aio``'s ``stream_infer`` cannot ask for the empty final response that shows
where one request's responses end, so a stream here is a ``ModelStreamInfer`` call of this
channel carrying a serialized ``ModelInferRequest`` (`pytriton.client.codec.to_stream_request`,
or bytes the caller put together).

A channel may keep a call for the next request once its request's final response came:
opening a gRPC call costs more than a short answer (one answer of one piece took 1.4 to 1.9 ms
on a kept call against 2.2 to 3.1 ms on a new one, docs/design/openai.md). A call whose request
must stop is cancelled (gRPC cancels a call's requests together) and never used again, so that
a cancel reaches exactly one request. A kept call is never half-closed (Triton would end it);
one that is not kept (no room, a request's own metadata, a channel that keeps none) is
half-closed after its final response, and Triton ends it. The OpenAI front keeps calls (it
closes them before tritonserver stops); the asyncio client keeps none, as Triton's stop waits
for the calls left open: a pytriton server took 3.2 s to stop with one client's idle call open,
against 0.3 s without (measured).

It stands beside the clients' package, not in it, as `pytriton.client_contract` does: the
front's process imports it without ``pytriton.client``'s ``__init__``, which brings the blocking
clients and ``tritonclient.http`` with gevent (0.29 s more CPU and 6 MiB more memory for the
front's process to start, measured). It ships with the clients (``pytriton-client``).

The channel belongs to the event loop that makes it, so it is made on first use, inside the loop.
Errors come out as gRPC raises them (``grpc.aio.AioRpcError``, ``asyncio.InvalidStateError``
for a call that ended meanwhile): each caller translates them at its own boundary.
"""

from __future__ import annotations

import asyncio
from typing import Any, List, Optional, Tuple

import grpc  # type: ignore[import-untyped,unused-ignore]
from tritonclient.grpc import service_pb2, service_pb2_grpc


def is_final_response(response: Any) -> bool:
    """Whether a gRPC ``ModelInferResponse`` is its request's last one (Triton's ``triton_final_response``)."""
    flag = response.parameters.get("triton_final_response")
    return bool(flag is not None and flag.bool_param)


Metadata = Tuple[Tuple[str, str], ...]
"""gRPC metadata: (key, value) pairs, keys in lower case."""

CHANNEL_OPTIONS = [("grpc.max_send_message_length", 2**31 - 1), ("grpc.max_receive_message_length", 2**31 - 1)]
"""gRPC's message size limits, lifted as ``tritonclient`` lifts them for its own channels."""
KEEP_CALLS = 256
"""Idle ``ModelStreamInfer`` calls a channel keeps for the next requests."""
_STREAM_METHOD = "/inference.GRPCInferenceService/ModelStreamInfer"


class GrpcChannel:
    """A ``grpc.aio`` channel to Triton's gRPC endpoint: its stub for plain calls, and streams.

    Args:
        address: ``host:port`` of Triton's gRPC endpoint.
        metadata: sent with every stream (the access token's).
        keep: how many idle stream calls are kept for the next requests; more are half-closed
            as they come back (0: none is kept).
    """

    def __init__(self, address: str, metadata: Metadata = (), keep: int = KEEP_CALLS) -> None:
        self.address = address
        self.metadata = metadata
        self._keep = keep
        self._channel: Any = None
        self._stub: Any = None
        self._open_call: Any = None
        self._idle: List[Any] = []

    @property
    def stub(self) -> Any:
        """The ``GRPCInferenceServiceStub`` of the channel (the channel made now if it is not yet)."""
        if self._stub is None:
            self._made()
        return self._stub

    @property
    def idle(self) -> int:
        """How many stream calls wait for a next request."""
        return len(self._idle)

    def stream(self, request: bytes, metadata: Optional[Metadata] = None) -> GrpcStream:
        """One request (a serialized ``ModelInferRequest`` asking for the empty final response),
        sent on the stream's first read (the channel is made then, inside the running loop).

        Args:
            request: the request's bytes.
            metadata: the call's metadata when it is not the channel's own (then the call is the
                request's own, never kept).
        """
        return GrpcStream(self, request, None if metadata == self.metadata else metadata)

    async def close(self) -> None:
        """Cancel the idle calls and close the channel (which cancels the calls still running)."""
        for call in self._idle:
            call.cancel()
        self._idle.clear()
        channel, self._channel, self._stub, self._open_call = self._channel, None, None, None
        if channel is not None:
            await channel.close()

    def _take(self) -> Tuple[Any, bool]:
        """A call for one request, and whether it carried one before."""
        while self._idle:
            call = self._idle.pop()
            if not call.done():  # not ended by the server (a restart, a lost connection) meanwhile
                return call, True
        return self._new(), False

    def _new(self, metadata: Optional[Metadata] = None) -> Any:
        if self._open_call is None:
            self._made()
        return self._open_call(metadata=self.metadata if metadata is None else metadata)

    def _made(self) -> None:
        """Make the channel (inside the running loop, which owns it), its stub and its stream method."""
        self._channel = grpc.aio.insecure_channel(self.address, options=CHANNEL_OPTIONS)
        self._stub = service_pb2_grpc.GRPCInferenceServiceStub(self._channel)
        # Requests go as bytes (the caller serializes them): the stub's serializer is left out.
        self._open_call = self._channel.stream_stream(
            _STREAM_METHOD, request_serializer=None,
            response_deserializer=service_pb2.ModelStreamInferResponse.FromString)

    def _give(self, call: Any) -> bool:
        """Keep a call whose request ended with its final response, if there is room; whether it was kept."""
        if len(self._idle) < self._keep and not call.done():
            self._idle.append(call)
            return True
        return False


class GrpcStream:
    """The responses of one request on a ``ModelStreamInfer`` call of a `GrpcChannel`.

    Attributes:
        finished: the request's final response came (its call went back to the channel, or
            was half-closed).
    """

    def __init__(self, channel: GrpcChannel, request: bytes, metadata: Optional[Metadata]) -> None:
        self._channel = channel
        self._request = request
        self._metadata = metadata
        self._call: Any = None
        self._cancelled = False
        self.finished = False

    async def read(self) -> Any:
        """The next response (a ``ModelStreamInferResponse``: its ``error_message``, or its
        ``infer_response``); the request is sent on the first read. After the final response
        (`finished`) or when the server ended the call without one: None.

        Raises:
            grpc.aio.AioRpcError: the call failed or was cancelled.
            asyncio.InvalidStateError: the call ended meanwhile.
        """
        if self.finished:
            return None
        call = self._call if self._call is not None else await self._send()
        response = await call.read()
        if response is grpc.aio.EOF:
            return None
        if not response.error_message and is_final_response(response.infer_response):
            self.finished = True
            if self._metadata is not None or not self._channel._give(call):
                await call.done_writing()  # not kept: the call ends as a complete one-request call does
        return response

    def cancel(self) -> None:
        """Cancel the request in Triton unless its final response came (idempotent)."""
        self._cancelled = True
        if not self.finished and self._call is not None:
            self._call.cancel()

    async def _send(self) -> Any:
        """Write the request on a call; a kept call that the server ended meanwhile is replaced once."""
        if self._metadata is not None:
            call = self._call = self._channel._new(self._metadata)
            await call.write(self._request)
            return call
        call, kept = self._channel._take()
        self._call = call
        try:
            await call.write(self._request)
            return call
        except (grpc.aio.AioRpcError, asyncio.InvalidStateError):
            if not kept or self._cancelled:
                raise
        call = self._call = self._channel._new()
        await call.write(self._request)
        return call
