"""The synchronous streaming client of decoupled models.

The first step of a streamed request. A decoupled model (``model_transaction_policy {
decoupled: true }``, e.g. a pytriton model whose callable is a generator) sends any number of
responses per request and then a final flag. :class:`DecoupledModelClient` sends a request and
returns an iterator over its responses as they arrive. It shares with
:class:`~pytriton.client.client.ModelClient` the arguments, readiness wait and model
configuration (:class:`~pytriton.client.client.ModelClientBase`), the input mapping and batch
axis (``pytriton.client.codec``), and reads the stream through
:meth:`TritonCore.open_stream <pytriton.client.core.TritonCore.open_stream>` (gRPC streaming, or
Triton's HTTP ``generate_stream`` endpoint: see ``pytriton.client.generate`` for what HTTP
cannot carry).
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable, Mapping
from typing import Any, Dict, Generator

import numpy as np

from pytriton.client._args import mapping_arg, with_sequence
from pytriton.client.client import ModelClientBase
from pytriton.client.codec import batch_request, sample_request, sample_response
from pytriton.client.core_stream import ResponseStream
from pytriton.client.exceptions import PyTritonClientValueError
from pytriton.client.infer_calls import InferCall, InferCalls

#: What the streaming calls return: the outputs of each response, in arrival order.
Responses = Generator[Dict[str, np.ndarray], None, None]


class DecoupledModelClient(ModelClientBase, InferCalls["Responses"]):
    """Synchronous client of one decoupled model, over gRPC or HTTP: responses as an iterator.

    Takes the same arguments as :class:`~pytriton.client.client.ModelClient`;
    ``inference_timeout_s`` bounds the wait for each next response, not the whole stream. The
    request is sent when ``infer_sample``/``infer_batch`` is called; its responses are read as
    the iterator is. Leaving the iteration early (``break``, ``close()`` on the iterator, an
    error raised in the loop) cancels the request on the server.

    One stream at a time: finish or close an iterator before the next call. Not thread safe.

    Example:
        >>> with DecoupledModelClient("grpc://localhost", "Tokens") as client:  # doctest: +SKIP
        ...     for partial in client.infer_sample(np.array([b"hello"], dtype=object)):
        ...         print(partial["token"])
    """

    streaming = True

    # Weak: an iterator dropped before its first step must take its stream (and request) with it.
    _stream: weakref.ReferenceType[ResponseStream] | None = None

    def _request(self, call: InferCall) -> Responses:
        config = self._initialized_config()
        parameters = with_sequence(mapping_arg("parameters", call.parameters), call.sequence)
        build = sample_request if call.sample else batch_request
        stream = self._open(build(config, call.inputs, call.named_inputs), parameters, call.headers, call.priority)
        if call.sample:
            return self._responses(stream, functools.partial(sample_response, config))
        return self._responses(stream, dict)

    def close(self) -> None:
        """Cancel an open stream and close the connection. Idempotent."""
        stream = self._current_stream()
        if stream is not None:
            stream.cancel()
        super().close()

    def _current_stream(self) -> ResponseStream | None:
        stream = self._stream() if self._stream is not None else None
        return stream if stream is not None and not stream.finished else None

    def _open(
        self,
        inputs: dict[str, np.ndarray],
        parameters: Mapping[str, Any] | None,
        headers: Mapping[str, str] | None,
        priority: int | None = None,
    ) -> ResponseStream:
        if self._current_stream() is not None:
            raise PyTritonClientValueError(
                f"The client of model {self._args.model_name!r} still streams the responses of a previous request; "
                "read that iterator to its end or close() it first (for concurrent streams use one client each, "
                "or AsyncioDecoupledModelClient)"
            )
        request_id = self._request_ids()
        config = self._initialized_config()
        stream = self._core.open_stream(
            self._args.request(inputs, parameters, headers, request_id, priority=priority, config=config), config)
        stream.look = functools.partial(self._lookout.check, request_id, self._read_config)
        self._stream = weakref.ref(stream)
        return stream

    def _responses(
        self, stream: ResponseStream, convert: Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]
    ) -> Responses:
        try:
            while True:
                outputs = stream.next_response(self._args.inference_timeout_s)
                if outputs is None:
                    return
                yield convert(outputs)
        finally:
            stream.cancel()  # a no-op after the final response; cancels the request otherwise
