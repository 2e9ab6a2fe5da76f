"""The front's link to Triton: gRPC on localhost, one ``ModelStreamInfer`` call per chat answer.

The request step between the OpenAI front and Triton. Every request the front takes goes
through Triton, so Triton's batcher, its ``nv_inference_*`` metrics and its traces see it, and
pytriton's own (``pytriton_*``) too. A chat answer is one ``ModelStreamInfer`` call carrying one
request; cancelling the call (a client gone, a stop sequence met) cancels the request in Triton,
which closes the callable's generator. Embeddings are plain ``ModelInfer`` calls.

The gRPC is spoken by the clients' own speaker, `pytriton.client_grpc.GrpcChannel`, which
the asyncio streaming client uses too: one channel, its stub for the plain calls, and the chat
calls, each kept open for the next request once its request's final response came (opening a
call costs more than a short answer). Chat requests are put together from pre-serialized bytes
here (`chat_request`): no message object is built per request.

Which models are served, and how, is read from Triton itself (its repository index, its
statistics, which also list the models other processes sent through the repository API, and each
model's configuration, `pytriton.openai.convention.served_model`), kept per name, and read again
when a name is unknown or `models` is asked: a model bound later, or by another process, is found.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
from typing import Any, AsyncIterator, Callable, Dict, List, Optional, Tuple

import grpc  # type: ignore[import-untyped,unused-ignore]
import numpy as np
from google.protobuf.json_format import MessageToDict
from tritonclient.grpc import service_pb2

from pytriton.access_token import auth_headers
from pytriton.client_contract import UNKNOWN_VARIANT
from pytriton.client_grpc import GrpcChannel, GrpcStream
from pytriton.openai.convention import (
    CHAT,
    CHAT_MESSAGES,
    CHAT_PARAMS,
    EMBED_DIMENSIONS,
    EMBED_INPUT,
    EMBED_OUTPUT,
    ServedModel,
    bytes_elements,
    bytes_tensor,
    decode_piece,
    served_model,
    split_variant,
)
from pytriton.openai.errors import OpenAIError, unknown_model, unknown_variant, wrong_kind

_GONE = re.compile(r"unknown model|is not found|not ready", re.IGNORECASE)
"""Triton's words for a request to a model it no longer serves."""
_CALL_TIMEOUT_S = 30.0
"""Bound of the calls that ask Triton about its models."""
_KEEP_HEADS = 1024
"""Serialized request heads kept (`chat_request_head`): one per model and variant asked for."""
_RAW_INPUT_CONTENTS = 7
"""``ModelInferRequest.raw_input_contents``'s field number (grpc_service.proto)."""


def chat_request_head(model: str, batched: bool, variant: Optional[Tuple[str, str]] = None) -> bytes:
    """What every chat request to `model` holds, serialized: its name, the two inputs' names,
    types and shapes, the request for an empty final response (the answer's end), and for a
    multiplexed model's variant the request parameter that names it (`variant`: parameter, name)."""
    request = service_pb2.ModelInferRequest(model_name=model)
    for name in (CHAT_MESSAGES, CHAT_PARAMS):
        request.inputs.add(name=name, datatype="BYTES", shape=[1, 1] if batched else [1])
    request.parameters["triton_enable_empty_final_response"].bool_param = True
    if variant is not None:
        request.parameters[variant[0]].string_param = variant[1]
    return bytes(request.SerializeToString())


def chat_request(head: bytes, messages: List[Dict[str, Any]], params: Dict[str, Any]) -> bytes:
    """A serialized ``ModelInferRequest``: `head` (`chat_request_head`) and the two inputs' raw
    contents appended as fields of their own, which protocol buffers allow in any order: no
    message object is built per request."""
    parts = [head]
    for value in (messages, params):
        content = bytes_tensor([json.dumps(value).encode("utf-8")])
        parts += [_varint((_RAW_INPUT_CONTENTS << 3) | 2), _varint(len(content)), content]
    return b"".join(parts)


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _failure(model: str, exc: BaseException) -> OpenAIError:
    """A gRPC error of a request -> the client's error: 503 while the server stops, 404 once the
    model is gone, 400 for a request the model refused, else 500 with Triton's message."""
    if isinstance(exc, grpc.aio.AioRpcError):
        code, details = exc.code(), unnamed(model, exc.details() or "")
        if code == grpc.StatusCode.UNAVAILABLE or "stopping" in details or "shutting down" in details.lower():
            return OpenAIError(503, f"model '{model}' cannot take requests now: the server is stopping ({details})")
        if code == grpc.StatusCode.NOT_FOUND or "unknown model" in details.lower() or "not found" in details.lower():
            return OpenAIError(404, f"The model '{model}' does not exist any more ({details})", param="model",
                               code="model_not_found")
        if UNKNOWN_VARIANT in details:  # a multiplexed model's loader does not know the variant asked for
            return OpenAIError(404, details, param="model", code="model_not_found")
        if code == grpc.StatusCode.INVALID_ARGUMENT:
            return OpenAIError(400, f"model '{model}' refused the request: {details}")
        if code == grpc.StatusCode.CANCELLED:
            return OpenAIError(503, f"model '{model}': the request was cancelled ({details})")
        return model_failed(model, details)
    return model_failed(model, str(exc))


def model_failed(model: str, message: str) -> OpenAIError:
    """500 for a request model `model` failed, with Triton's message (`unnamed`)."""
    return OpenAIError(500, f"model '{model}' failed: {unnamed(model, message)}")


def unnamed(model: str, message: str) -> str:
    """Triton's message about a request of `model` without the model's name in front, which
    pytriton's worker puts there ("Model 'm' failed: KeyError: ...") and the front says itself."""
    named = f"model '{model}'"
    if not message.lower().startswith(named.lower()):
        return message
    rest = message[len(named):]
    rest = rest[len(" failed"):] if rest.startswith(" failed") else rest
    return rest.lstrip(":").strip() or message


def _variant(model: ServedModel) -> Optional[Tuple[str, str]]:
    """(request parameter, variant) of a request for a multiplexed model's variant, else None."""
    if model.variant is None or model.variant_parameter is None:
        return None
    return model.variant_parameter, model.variant


class ChatCall:
    """The pieces of one answer of a chat model, read from its ``ModelStreamInfer`` call."""

    def __init__(self, stream: GrpcStream, model: str, on_gone: Callable[[str], None]) -> None:
        self._stream = stream
        self._model = model
        self._on_gone = on_gone

    @property
    def finished(self) -> bool:
        """The answer is complete: its final response came."""
        return self._stream.finished

    async def pieces(self) -> AsyncIterator[Dict[str, Any]]:
        """Each piece as a checked dict, until the final response.

        Raises:
            OpenAIError: the model failed (500 with its message), the server stops (503), ...
        """
        try:
            while True:
                response = await self._stream.read()
                if response is None:
                    return
                if response.error_message:
                    raise self._refused(response.error_message)
                for raw in response.infer_response.raw_output_contents:
                    for element in bytes_elements(raw):
                        try:
                            yield decode_piece(self._model, element)
                        except ValueError as exc:
                            raise OpenAIError(500, str(exc)) from exc
                if self._stream.finished:
                    return
        except (grpc.aio.AioRpcError, asyncio.InvalidStateError) as exc:
            error = _failure(self._model, exc)
            if error.status == 404:
                self._on_gone(self._model)
            raise error from exc
        finally:
            self._stream.cancel()  # nothing once the final response came

    def _refused(self, message: str) -> OpenAIError:
        if UNKNOWN_VARIANT in message:  # a multiplexed model's loader does not know the variant asked for
            return OpenAIError(404, unnamed(self._model, message), param="model", code="model_not_found")
        if _GONE.search(message):  # unloaded since the front last looked
            self._on_gone(self._model)
            return OpenAIError(404, f"The model '{self._model}' does not exist any more ({message})", param="model",
                               code="model_not_found")
        return model_failed(self._model, message)

    def cancel(self) -> None:
        """Cancel the request in Triton unless its answer is complete (idempotent)."""
        self._stream.cancel()


class TritonLink:
    """The front's gRPC channel to Triton and what it knows of the models.

    Args:
        address: ``host:port`` of Triton's gRPC endpoint.
        access_token: sent with every call when Triton restricts APIs the front uses (the
            model repository's index, by default).
    """

    def __init__(self, address: str, access_token: Optional[str]) -> None:
        self._metadata = tuple(auth_headers("grpc", access_token).items())
        self._grpc = GrpcChannel(address, self._metadata)
        self._models: Dict[str, ServedModel] = {}
        self._heads: Dict[Tuple[str, bool, Optional[str]], bytes] = {}

    def _service(self) -> Any:
        return self._grpc.stub  # the channel is made inside the running loop, which owns it

    async def close(self) -> None:
        await self._grpc.close()

    async def ready(self) -> bool:
        """Whether Triton answers ready (the front's ``/health``)."""
        try:
            answer = await self._service().ServerReady(service_pb2.ServerReadyRequest(), metadata=self._metadata,
                                                       timeout=5.0)
        except grpc.aio.AioRpcError:
            return False
        return bool(answer.ready)

    async def models(self) -> Dict[str, ServedModel]:
        """Every ready model that follows the convention, read from Triton now."""
        stub = self._service()
        try:
            index = await stub.RepositoryIndex(service_pb2.RepositoryIndexRequest(ready=True),
                                               metadata=self._metadata, timeout=_CALL_TIMEOUT_S)
        except grpc.aio.AioRpcError as exc:
            raise OpenAIError(503, f"cannot list the models: Triton answered {exc.code().name}: {exc.details()}") \
                from exc
        names = {entry.name for entry in index.models if not entry.state or entry.state == "READY"}
        try:  # the loaded models: those another process sent through the repository API are in no index
            statistics = await stub.ModelStatistics(service_pb2.ModelStatisticsRequest(name=""),
                                                    metadata=self._metadata, timeout=_CALL_TIMEOUT_S)
            names.update(entry.name for entry in statistics.model_stats)
        except grpc.aio.AioRpcError:
            pass  # statistics restricted with another header than the access token: the index alone
        found: Dict[str, ServedModel] = {}
        for name in sorted(names):
            model = self._models.get(name) or await self._read(name)
            if model is not None:
                found[name] = model
        self._models = found
        return dict(found)

    async def _read(self, name: str) -> Optional[ServedModel]:
        try:
            answer = await self._service().ModelConfig(service_pb2.ModelConfigRequest(name=name),
                                                       metadata=self._metadata, timeout=_CALL_TIMEOUT_S)
        except grpc.aio.AioRpcError:
            return None  # unloaded meanwhile, or a configuration the front may not read
        return served_model(MessageToDict(answer.config, preserving_proto_field_name=True))

    async def model(self, name: str, kind: str, endpoint: str) -> ServedModel:
        """The served model `name` of `kind`.

        Raises:
            OpenAIError: 404 for a name no model of the convention has, 400 for a model of
                another kind (an embeddings model asked for a chat answer).
        """
        model = self._models.get(name)
        if model is None:
            model = (await self.models()).get(name)
        if model is None:  # ``base:variant``: a multiplexed model's variant
            base, variant = split_variant(name)
            model = self._models.get(base) if variant is not None else None
            if model is None or model.variant_parameter is None:
                raise unknown_model(name, self._models)
            if model.variants is not None and variant not in model.variants:
                raise unknown_variant(name, model.name, model.variants)
            model = dataclasses.replace(model, variant=variant)
        if model.kind != kind:
            raise wrong_kind(name, model.kind, endpoint)
        return model

    def forget(self, name: str) -> None:
        """Drop what is known of model `name` (Triton said it is gone)."""
        self._models.pop(name, None)

    def chat(self, model: ServedModel, messages: List[Dict[str, Any]], params: Dict[str, Any]) -> ChatCall:
        """Start one answer of chat model `model`."""
        assert model.kind == CHAT
        key = (model.name, model.batched, model.variant)
        head = self._heads.get(key)
        if head is None:
            if len(self._heads) >= _KEEP_HEADS:
                self._heads.clear()
            head = self._heads[key] = chat_request_head(model.name, model.batched, _variant(model))
        return ChatCall(self._grpc.stream(chat_request(head, messages, params)), model.name, self.forget)

    async def embed(self, model: ServedModel, texts: List[str], dimensions: Optional[int]) -> List[np.ndarray]:
        """The embedding of each text, through as many requests as `model.max_batch_size` asks."""
        size = max(model.max_batch_size, 1)
        parts = await asyncio.gather(*(self._embed(model, texts[start:start + size], dimensions)
                                       for start in range(0, len(texts), size)))
        return [row for part in parts for row in part]

    async def _embed(self, model: ServedModel, texts: List[str], dimensions: Optional[int]) -> List[np.ndarray]:
        request = service_pb2.ModelInferRequest(model_name=model.name)
        variant = _variant(model)
        if variant is not None:
            request.parameters[variant[0]].string_param = variant[1]
        request.inputs.add(name=EMBED_INPUT, datatype="BYTES", shape=[len(texts), 1])
        request.raw_input_contents.append(bytes_tensor([text.encode("utf-8") for text in texts]))
        if dimensions is not None:
            request.inputs.add(name=EMBED_DIMENSIONS, datatype="INT32", shape=[len(texts), 1])
            request.raw_input_contents.append(np.full(len(texts), dimensions, dtype="<i4").tobytes())
        request.outputs.add(name=EMBED_OUTPUT)
        try:
            answer = await self._service().ModelInfer(request, metadata=self._metadata)
        except grpc.aio.AioRpcError as exc:
            error = _failure(model.name, exc)
            if error.status == 404:
                self.forget(model.name)
            raise error from exc
        output = answer.outputs[0]
        rows = np.frombuffer(answer.raw_output_contents[0], dtype=model.embedding_dtype)
        return list(rows.reshape([int(d) for d in output.shape]))
